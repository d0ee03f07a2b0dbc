"""pagoda-attention-flash: the plugin registers 'flash'; check() refuses, with the reason, every
place the kernels cannot run (CPU, older GPUs, ROCm, float32, other head sizes, kernels not built)
and ``auto`` ranks it above triton where it runs."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.attention import AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins.manager import PluginManager
from pagoda.testing import load_installed_plugin

pytest.importorskip("pagoda_attention_flash", reason="pagoda-attention-flash is not installed")
from pagoda_attention_flash import kernels  # noqa: E402
from pagoda_attention_flash.backend import FlashAttentionBackend  # noqa: E402

SPEC = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)


class _FakeGpu(CpuPlatform):
    """A CUDA platform as check() sees it: device type, csrc kernels built, a capability."""

    device_type = "cuda"

    def __init__(self, csrc_reason: str | None = None, capability: tuple[int, int] | None = (9, 0)) -> None:
        self.csrc_reason = csrc_reason
        self.capability = capability

    def compute_capability(self) -> tuple[int, int] | None:
        return self.capability

    def csrc_kernel_reason(self, name: str) -> str | None:
        assert name == "attention"
        return self.csrc_reason

    def device(self) -> torch.device:
        return torch.device("cuda", 0)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    """torch looks like a CUDA build with an sm_90 GPU and the kernels built (nothing compiles)."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(kernels, "extension", lambda: (object(), None))
    return monkeypatch


def test_installed_plugin_registers_flash() -> None:
    info = load_installed_plugin("pagoda-attention-flash", "attention-flash")
    assert info.module == "pagoda_attention_flash.plugin"
    assert info.registers == {"attention": ["flash"]}
    assert FlashAttentionBackend.priority == 60 and FlashAttentionBackend.supports_graphs


def test_check_refuses_cpu_and_rocm() -> None:
    assert FlashAttentionBackend.check(CpuPlatform(), SPEC).startswith("flash needs an NVIDIA GPU")
    rocm = "csrc/attention/flash_decode.cu uses NVIDIA-only instructions (mma.sync), so the ROCm build leaves it out"
    assert FlashAttentionBackend.check(_FakeGpu(csrc_reason=rocm), SPEC) == rocm


def test_check_accepts_sm90_and_refuses_sm75(gpu) -> None:
    assert FlashAttentionBackend.check(_FakeGpu(), SPEC) is None
    reason = FlashAttentionBackend.check(_FakeGpu(capability=(7, 5)), SPEC)
    assert "compute capability >= 8.0" in reason and "sm_75" in reason


@pytest.mark.parametrize(
    "spec,expected",
    [(AttentionSpec(8, 2, 128, 0.1, 16, torch.float32), "float16 and bfloat16, not float32"),
     (AttentionSpec(8, 2, 96, 0.1, 16, torch.float16), "head sizes 64, 128, 256, not 96"),
     (AttentionSpec(6, 4, 64, 0.1, 16, torch.float16), "6 query heads are not a multiple of 4 kv heads")],
    ids=["float32", "head96", "gqa-ratio"],
)
def test_check_refuses_unsupported_specs(gpu, spec: AttentionSpec, expected: str) -> None:
    assert expected in FlashAttentionBackend.check(_FakeGpu(), spec)


def test_check_refuses_head_256_without_the_shared_memory(gpu) -> None:
    from types import SimpleNamespace

    spec = AttentionSpec(8, 1, 256, 0.0625, 16, torch.bfloat16)
    gpu.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(shared_memory_per_block_optin=227 * 1024))
    assert FlashAttentionBackend.check(_FakeGpu(), spec) is None
    gpu.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(shared_memory_per_block_optin=99 * 1024))
    assert "head size 256 needs 136 KiB of shared memory per block; this GPU has 99 KiB" in FlashAttentionBackend.check(_FakeGpu(), spec)


def test_check_names_missing_kernels(gpu) -> None:
    gpu.setattr(kernels, "extension", lambda: (None, "the csrc kernels are unavailable (no nvcc)"))
    assert FlashAttentionBackend.check(_FakeGpu(), SPEC) == "the csrc kernels are unavailable (no nvcc)"


def test_auto_prefers_flash_where_it_runs(gpu) -> None:
    """flash leads triton on Hopper (run 12); where flash cannot run, auto falls back to the next backend."""
    attention = PluginManager().registry("attention")
    assert attention.select("auto", platform=_FakeGpu(), spec=SPEC)[0] == "flash"
    fp32 = AttentionSpec(8, 2, 128, 0.1, 16, torch.float32)
    assert attention.select("auto", platform=_FakeGpu(), spec=fp32)[0] != "flash"


def test_split_plan_counts_programs_per_sequence() -> None:
    """A group of 20 q heads per kv head takes two decode programs: the plan sees 2 x kv heads."""
    spec = AttentionSpec(40, 2, 64, 0.125, 16, torch.float16)
    backend = _planning_backend(spec)
    from pagoda.interfaces.attention import AttentionMetadata

    seq_lens = torch.tensor([32768], dtype=torch.int32)
    meta = AttentionMetadata(torch.zeros(1, dtype=torch.long), torch.zeros(1, 2048, dtype=torch.int32),
                             torch.tensor([0, 1], dtype=torch.int32), seq_lens, 1, 32768, num_decodes=1)
    plan = backend.prepare(meta).extra
    assert plan.num_splits == 64 and plan.short_query_len == 0  # ceil(2 * 132 / 4) = 66 -> 64 (the cap)
    part_o, part_lse = plan.decode_scratch
    assert part_o.shape == (1, 40, 64, 64) and part_lse.shape == (1, 40, 64)


def _planning_backend(spec: AttentionSpec) -> FlashAttentionBackend:
    """The backend's planning state without a GPU: 132 SMs, 4 decode programs an SM."""
    backend = FlashAttentionBackend.__new__(FlashAttentionBackend)
    backend.spec, backend.force_num_splits, backend.num_sms, backend.programs_per_sm = spec, None, 132, 4
    backend.short_query_max = 8
    return backend


@pytest.mark.parametrize("query_lens,short", [((4, 4, 4), 4), ((1, 1, 3), 3), ((1, 9, 2), 9), ((1, 16, 2), 16),
                                              ((1, 17, 2), 0), ((1, 1, 1), 0), ((9,) * 17, 0), ((8,) * 17, 8)])
def test_verify_steps_go_to_the_decode_kernel(query_lens, short) -> None:
    """Steps whose queries are all of at most SHORT_QUERY tokens (not pure decodes) take the decode kernel
    for every sequence: its rows are tokens x q heads (4 x 4 = one program a kv head, 8 x 4 = two), its
    scratch per token; up to 16 tokens while sequences x kv heads (8) stay under the 132 SMs (17 x 8 do
    not); a longer query keeps decodes + prefill."""
    from pagoda.interfaces.attention import AttentionMetadata

    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    qsl = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    decodes = next((i for i, q in enumerate(query_lens) if q != 1), len(query_lens))
    seqs = len(query_lens)
    meta = AttentionMetadata(torch.zeros(int(qsl[-1]), dtype=torch.long), torch.zeros(seqs, 256, dtype=torch.int32), qsl,
                             torch.full((seqs,), 4096, dtype=torch.int32), max(query_lens), 4096, num_decodes=decodes)
    plan = _planning_backend(spec).prepare(meta).extra
    assert plan.short_query_len == short
    tokens = int(qsl[-1]) if short else decodes
    if seqs <= 3:  # three sequences at 4k split; 17 x 8 kv heads fill the SMs unsplit (no scratch)
        assert plan.num_splits > 1 and plan.decode_scratch[1].shape == (tokens, 32, plan.num_splits)
    else:
        assert plan.num_splits == 1 and plan.decode_scratch is None


def test_fp8_kv_cache_is_stored_where_the_kernels_have_it(gpu) -> None:
    from dataclasses import replace
    from types import SimpleNamespace

    assert {"fp8", "fp8_e4m3", "fp8_e5m2"} <= set(FlashAttentionBackend.kv_cache_dtypes)
    for kv in ("fp8", "fp8_e5m2"):  # cuda_fp8.h converts both on every sm_80+ GPU
        spec = replace(SPEC, kv_cache_dtype=kv)
        gpu.setattr(kernels, "extension", lambda: (SimpleNamespace(reshape_and_cache_fp8=None), None))
        assert FlashAttentionBackend.check(_FakeGpu(), spec) is None
        gpu.setattr(kernels, "extension", lambda: (SimpleNamespace(), None))  # built before the FP8 cache existed
        assert FlashAttentionBackend.check(_FakeGpu(), spec) == (
            "the installed csrc kernels predate the FP8 KV cache; reinstall pagoda-platform-cuda")
        assert FlashAttentionBackend.check(_FakeGpu(), SPEC) is None  # a 16-bit cache still runs there
