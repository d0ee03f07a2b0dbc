"""The Triton kernels with an FP8 KV cache (CPU: interpreter) against a torch reference that stores FP8 and
dequantizes: the KV write equals ``quantize_kv`` bit for bit, attention equals a float64 reference over the
values the cache gives back (stored * scale), and the torch backend's FP8 output."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import make_batch, quantize_batch, reference, rel_error
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces.attention import AttentionSpec, KVScales, quantize_kv
from pagoda.platforms.cpu import CpuPlatform
from pagoda_attention_triton.backend import TritonAttentionBackend
from pagoda_attention_triton.kv_write import write_kv
from test_kernels import DEVICE, FP32_TOL, MIXED, PLATFORM, VERIFY

FORMATS = ["fp8", "fp8_e5m2"]
HALF_TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # as the 16-bit caches' (test_kernels.py)


def fp8_spec(kv_dtype: str, heads=8, kv_heads=2, head=64, block=16, window=None, dtype=torch.float32) -> AttentionSpec:
    return AttentionSpec(heads, kv_heads, head, head**-0.5, block, dtype, window, kv_cache_dtype=kv_dtype)


def run_fp8(spec: AttentionSpec, seqs, seed: int, splits: int | None = None):
    """(Triton's output, the float64 reference over the dequantized cache, the batch) for ``seqs``."""
    batch, k_scale, v_scale = quantize_batch(spec, make_batch(spec, seqs, DEVICE, seed=seed))
    scales = KVScales(DEVICE)
    scales.k_scale.copy_(k_scale), scales.v_scale.copy_(v_scale)
    backend = TritonAttentionBackend(spec, PLATFORM).with_kv_scales(scales)
    backend.force_num_splits = splits
    out = backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, backend.prepare(batch.metadata))
    return out, reference(spec, batch), batch


@pytest.mark.parametrize("kv_dtype", FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_write_stores_what_quantize_kv_stores(kv_dtype: str, dtype: torch.dtype) -> None:
    """Saturation, ties to even and the carries into the exponent the interpreter's own cast gets wrong."""
    spec = fp8_spec(kv_dtype, heads=4, kv_heads=2, dtype=dtype)
    cache_dtype = spec.cache_dtype
    g = torch.Generator().manual_seed(1)
    key = (torch.randn(24, 2, 64, generator=g) * 30).to(dtype)
    value = (torch.randn(24, 2, 64, generator=g) * 3000).to(dtype)
    key[0, 0, :6] = torch.tensor([127.5, 0.85, 0.0, -1e-9, 5000.0, -31.0]).to(dtype)
    cache = torch.zeros(2, 4, 8, 2, 64, dtype=cache_dtype)
    slots = torch.randperm(32, generator=g)[:24]
    slots[3] = -1  # a padding token
    scales = KVScales(DEVICE)
    scales.k_scale.fill_(0.05), scales.v_scale.fill_(3.0)
    cache = cache.to(DEVICE)
    write_kv(key.to(DEVICE), value.to(DEVICE), cache, slots.to(DEVICE), kv_scales=scales)
    ok = slots >= 0
    stored = cache.cpu()
    for half, x, scale in ((0, key, scales.k_scale), (1, value, scales.v_scale)):
        expected = quantize_kv(x[ok], scale.cpu(), cache_dtype)
        assert torch.equal(stored[half].view(-1, 2, 64)[slots[ok]].float(), expected.float())
    untouched = torch.ones(32, dtype=torch.bool)
    untouched[slots[ok]] = False
    assert not stored.reshape(2, 32, -1)[:, untouched].float().any()


@pytest.mark.parametrize("kv_dtype", FORMATS)
@pytest.mark.parametrize(
    "heads,kv_heads,head,block",
    [(2, 2, 64, 16), (8, 2, 64, 32), (8, 1, 128, 16), (4, 2, 48, 16)],
    ids=["mha-d64-b16", "gqa4-d64-b32", "mqa8-d128-b16", "gqa2-d48-padded"],
)
def test_mixed_batch_attends_to_the_dequantized_cache(kv_dtype: str, heads: int, kv_heads: int, head: int,
                                                       block: int) -> None:
    spec = fp8_spec(kv_dtype, heads, kv_heads, head, block)
    out, ref, _ = run_fp8(spec, MIXED, seed=head + heads)
    assert rel_error(out, ref) < FP32_TOL


@pytest.mark.parametrize("splits,window", [(4, None), (4, 40)])
def test_split_kv_decode_and_window(splits: int, window: int | None) -> None:
    spec = fp8_spec("fp8", 8, 1, 64, 16, window=window)
    out, ref, _ = run_fp8(spec, [(1, 300), (1, 3), (1, 129), (20, 70)], seed=splits, splits=splits)
    assert rel_error(out, ref) < FP32_TOL


@pytest.mark.parametrize("splits", [1, 4])
def test_short_queries_on_the_decode_kernel(splits: int) -> None:
    spec = fp8_spec("fp8", 8, 2, 64, 16)
    out, ref, _ = run_fp8(spec, VERIFY, seed=splits, splits=splits)
    assert rel_error(out, ref) < FP32_TOL


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_models_compute_in_their_dtype(dtype: torch.dtype) -> None:
    spec = fp8_spec("fp8", 8, 2, 64, 16, dtype=dtype)
    out, ref, _ = run_fp8(spec, [(1, 40), (10, 33)], seed=7, splits=2)
    assert out.dtype == dtype and rel_error(out, ref) < HALF_TOL[dtype]


def test_equals_the_torch_backend_on_the_same_fp8_cache() -> None:
    spec = fp8_spec("fp8", 8, 2, 64, 16)
    batch, k_scale, v_scale = quantize_batch(spec, make_batch(spec, MIXED, DEVICE, seed=4))
    outs = []
    for cls, platform in ((TritonAttentionBackend, PLATFORM), (TorchAttentionBackend, CpuPlatform())):
        scales = KVScales(DEVICE)
        scales.k_scale.copy_(k_scale), scales.v_scale.copy_(v_scale)
        backend = cls(spec, platform).with_kv_scales(scales)
        cache = batch.kv_cache.clone()
        outs.append(backend.forward(batch.query, batch.key, batch.value, cache, backend.prepare(batch.metadata)))
    assert rel_error(outs[0], outs[1].double().cpu()) < FP32_TOL


def test_check_reasons_for_fp8_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "fp8" in TritonAttentionBackend.kv_cache_dtypes and "fp8_e5m2" in TritonAttentionBackend.kv_cache_dtypes
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    from pagoda_platform_cuda.platform import CudaPlatform
    from pagoda_platform_rocm.arch import parse_arch
    from pagoda_platform_rocm.platform import RocmPlatform

    class OldGpu(CudaPlatform):  # a CUDA GPU without FP8 instructions (e.g. sm_80)
        def fp8_dtype(self):
            return None

        def describe(self) -> str:
            return "A100 (sm_80)"

    def amd(gfx: str) -> RocmPlatform:
        class Amd(RocmPlatform):
            def arch(self):
                return parse_arch(gfx)

            def describe(self) -> str:
                return gfx

        return Amd()

    old = TritonAttentionBackend.check(OldGpu(), fp8_spec("fp8"))
    assert "compute capability >= 8.9" in old and "use --kv-cache-dtype fp8_e5m2 or --attention-backend flash" in old
    assert TritonAttentionBackend.check(OldGpu(), fp8_spec("fp8_e5m2")) is None
    for gfx in ("gfx90a", "gfx942"):  # no OCP FP8 (gfx942's is float8_e4m3fnuz): neither format, flash NVIDIA-only
        for fmt in ("fp8", "fp8_e5m2"):
            reason = TritonAttentionBackend.check(amd(gfx), fp8_spec(fmt))
            assert reason is not None and reason.endswith("use --kv-cache-dtype auto"), reason
    assert all(TritonAttentionBackend.check(amd("gfx950"), fp8_spec(fmt)) is None for fmt in ("fp8", "fp8_e5m2"))