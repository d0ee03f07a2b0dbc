"""The flash backend without a GPU: selection (check reasons, auto priority) and the split plan."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.attention import AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda_attention_flash import backend as flash_backend
from pagoda_attention_flash.backend import FlashAttentionBackend
from pagoda_attention_flash.plan import choose_num_splits, heads_per_cta, make_plan


class _CudaLike(CpuPlatform):
    """A platform that claims to be CUDA (only ``device_type`` is read before the capability)."""

    device_type = "cuda"


def spec_of(head: int = 128, dtype=torch.bfloat16, heads: int = 32, kv_heads: int = 8) -> AttentionSpec:
    return AttentionSpec(heads, kv_heads, head, head**-0.5, 16, dtype)


@pytest.fixture
def sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    """An sm_90 GPU whose kernels load (a stand-in module: nothing runs here)."""
    monkeypatch.setattr(flash_backend, "device_capability", lambda platform: (9, 0))
    monkeypatch.setattr(flash_backend, "_load_kernels", lambda: object())


def test_refuses_platforms_other_than_cuda() -> None:
    reason = FlashAttentionBackend.check(CpuPlatform(), spec_of())
    assert reason == "flash needs an NVIDIA GPU (the cuda platform), not platform 'cpu'"
    assert FlashAttentionBackend.check(None, None) == "flash needs an NVIDIA GPU (the cuda platform); no platform was given"


def test_refuses_gpus_below_sm80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flash_backend, "device_capability", lambda platform: (7, 5))
    reason = FlashAttentionBackend.check(_CudaLike(), spec_of())
    assert reason == "flash needs compute capability >= 8.0 (tensor-core mma.sync); this GPU is sm_75"


@pytest.mark.usefixtures("sm90")
def test_refuses_unsupported_dtypes_and_head_sizes() -> None:
    platform = _CudaLike()
    assert FlashAttentionBackend.check(platform, spec_of()) is None
    assert FlashAttentionBackend.check(platform, None) is None
    for head in (64, 256):
        assert FlashAttentionBackend.check(platform, spec_of(head, torch.float16)) is None
    reason = FlashAttentionBackend.check(platform, spec_of(dtype=torch.float32))
    assert reason == "flash attention supports float16 and bfloat16, not float32 (use --attention-backend triton)"
    assert "head sizes 64, 128 and 256, not 80" in FlashAttentionBackend.check(platform, spec_of(80))
    assert "not a multiple" in FlashAttentionBackend.check(platform, spec_of(heads=12, kv_heads=8))


def test_missing_kernels_are_a_reason_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    ExtensionUnavailable = pytest.importorskip("pagoda_platform_cuda.build").ExtensionUnavailable

    monkeypatch.setattr(flash_backend, "device_capability", lambda platform: (9, 0))

    def unavailable():
        raise ExtensionUnavailable("no nvcc (CUDA_HOME not found)")

    monkeypatch.setattr(flash_backend, "_load_kernels", unavailable)
    reason = FlashAttentionBackend.check(_CudaLike(), spec_of())
    assert reason == "the flash kernels are unavailable: no nvcc (CUDA_HOME not found)"


def test_kernels_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    build = pytest.importorskip("pagoda_platform_cuda.build")

    monkeypatch.setattr(flash_backend, "device_capability", lambda platform: (8, 0))
    monkeypatch.setenv("PAGODA_CUDA_KERNELS", "0")
    build.load_flash_extension.cache_clear()
    try:
        reason = FlashAttentionBackend.check(_CudaLike(), spec_of())
    finally:
        build.load_flash_extension.cache_clear()
    assert reason == "the flash kernels are unavailable: PAGODA_CUDA_KERNELS=0 switches the CUDA kernels off"


@pytest.mark.usefixtures("sm90")
def test_auto_prefers_flash_only_where_usable() -> None:
    from pagoda.plugins.manager import PluginManager
    import pagoda_attention_flash.plugin as flash_plugin

    triton_plugin = pytest.importorskip("pagoda_attention_triton.plugin")

    pm = PluginManager(modules={"attention-flash": flash_plugin, "attention-triton": triton_plugin}, entry_points=False)
    registry = pm.registry("attention")
    assert registry.select("auto", platform=_CudaLike(), spec=spec_of())[0] == "flash"
    assert registry.select("auto", platform=_CudaLike(), spec=spec_of(80))[0] == "triton"  # flash refuses head 80
    assert registry.select("auto", platform=CpuPlatform(), spec=spec_of())[0] != "flash"
    from pagoda_attention_triton.backend import TritonAttentionBackend

    assert FlashAttentionBackend.priority > TritonAttentionBackend.priority and FlashAttentionBackend.supports_graphs


def test_split_plan_fills_the_gpu_only_when_needed() -> None:
    assert heads_per_cta(32, 8) == 4 and heads_per_cta(64, 8) == 8 and heads_per_cta(12, 4) == 1
    assert heads_per_cta(32, 32) == 1 and heads_per_cta(48, 4) == 4
    # 32 q / 8 kv heads: 8 CTAs per decode (4 heads each) on 132 multiprocessors
    assert choose_num_splits(1, 32, 8, 32768, 132) == 32  # 8 CTAs -> ~264 wanted
    assert choose_num_splits(4, 32, 8, 32768, 132) == 8
    assert choose_num_splits(32, 32, 8, 32768, 132) == 1  # 256 CTAs fill the GPU
    assert choose_num_splits(1, 32, 8, 512, 132) == 1  # short context: a reduce costs more than it saves
    assert choose_num_splits(0, 32, 8, 4096, 132) == 1
    assert choose_num_splits(1, 32, 8, 2048, 132) == 8  # at least 256 keys per split


def test_plan_allocates_scratch_only_for_splits() -> None:
    plan = make_plan(3, 32, 128, 4, torch.device("cpu"))
    assert plan.part_out.shape == (3, 32, 4, 128) and plan.part_lse.shape == (3, 32, 4)
    assert plan.part_out.dtype == torch.float32
    assert make_plan(3, 32, 128, 1, torch.device("cpu")).part_out is None
    assert make_plan(0, 32, 128, 8, torch.device("cpu")).num_splits == 1
