"""The ``cpu-native`` platform: ``auto`` picks it on a CPU where its kernels build (the built-in ``cpu`` where they
do not, with the reason); greedy tokens and logprobs equal HF transformers' on the same weights, as the built-in
platform's do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "engine"))
from tiny_models import assert_greedy_matches_hf, make_tiny_model, random_prompts  # noqa: E402

from pagoda import LLM  # noqa: E402
from pagoda.layers.norm import RMSNorm  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402
from pagoda_platform_cpu.ops import NativeCpuOps  # noqa: E402
from pagoda_platform_cpu.platform import NativeCpuPlatform  # noqa: E402


def test_auto_picks_cpu_native_and_cpu_keeps_the_builtin() -> None:
    registry = PluginManager().registry("platform")
    assert registry.select("auto")[0] == "cpu-native"
    assert type(registry.create("cpu").custom_ops()).__name__ == "CpuOps"
    assert isinstance(NativeCpuPlatform().custom_ops(), NativeCpuOps)


@pytest.mark.parametrize("family", ["llama", "qwen3"])  # GQA; q/k norms (RMSNorm of [tokens, heads, head_size])
def test_greedy_tokens_and_logprobs_match_hf(tmp_path: Path, family: str) -> None:
    hf_model = make_tiny_model(tmp_path, family)
    prompts = random_prompts(6, range(3, 60), seed=11)
    max_tokens = [24 + 3 * i for i in range(len(prompts))]
    llm = LLM(model=str(tmp_path), dtype="float32", platform="cpu-native", block_size=8, max_num_batched_tokens=40)
    runner = llm.engine.core.runner
    assert isinstance(runner.platform, NativeCpuPlatform)
    assert all(isinstance(m.ops, NativeCpuOps) for m in runner.model.modules() if isinstance(m, RMSNorm))
    assert_greedy_matches_hf(llm, hf_model, prompts, max_tokens)


def test_a_machine_without_a_compiler_keeps_the_builtin_platform_and_says_why(tmp_path) -> None:
    probe = ("from pagoda.plugins.manager import PluginManager\n"
             "registry = PluginManager().registry('platform')\n"
             "print(registry.select('auto')[0])\n"
             "print(registry.reason_against('cpu-native'))\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    chosen, reason = out.stdout.splitlines()[:2]
    assert chosen == "cpu", out.stderr
    assert "its C++ kernels are unavailable: the C++ build failed (" in reason and "no-such-c++" in reason
    assert reason.endswith("install a C++ compiler such as g++, or use --platform cpu")
