"""A small round-to-nearest quantizer for the tests, and the two formats' tensors written from their
descriptions (AutoGPTQ/GPTQModel and compressed-tensors, as their readers in vLLM and transformers
document them), independently of the plugin's own unpacking.

Values are unsigned: ``W[k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n]`` with ``q`` in ``0 .. 2**bits - 1``,
``g(k) = g_idx[k]``. Act-order: a random permutation stands for the quantizer's activation order,
row ``perm[i]`` goes to group ``i // group``. ``group = -1``: one group of all inputs.

- GPTQ: ``qweight`` int32 ``[K / p, N]`` (word ``r`` holds rows ``p r .. p r + p - 1``, value ``j`` at
  bits ``bits * j``), ``qzeros`` int32 ``[G, N / p]`` (columns packed alike), stored as ``z - 1``
  in the v1 format (``gptq``) and as ``z`` in ``gptq_v2``, ``scales`` fp16 ``[G, N]``, ``g_idx``
  int32 ``[K]`` (always written, ``k // group`` without act-order).
- compressed-tensors pack-quantized: ``weight_packed`` int32 ``[N, K / p]`` holding ``q`` (the signed
  value plus ``2**(bits - 1)``), ``weight_scale`` ``[N, G]``, ``weight_zero_point`` int32 ``[N / p, G]``
  (asymmetric only: the signed zero point plus the same offset, packed along the outputs),
  ``weight_g_idx`` int32 ``[K]`` (actorder "group" only), ``weight_shape`` ``[N, K]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Layout:
    """What a test checkpoint declares."""

    fmt: str = "gptq"  # "gptq" or "compressed-tensors"
    bits: int = 4
    group: int = 32  # -1: per channel
    sym: bool = True
    act_order: bool = False
    v1: bool = True  # GPTQ: zero points stored minus one
    scale_dtype: torch.dtype = torch.float16

    def __str__(self) -> str:
        order = "-act" if self.act_order else ""
        version = "" if self.fmt != "gptq" else "-v1" if self.v1 else "-v2"
        return f"{self.fmt}-{self.bits}b-g{self.group}-{'sym' if self.sym else 'asym'}{order}{version}"


@dataclass
class IntWeights:
    """The quantizer's integers for one ``[out, in]`` weight."""

    q: torch.Tensor  # [K, N] long
    zeros: torch.Tensor  # [G, N] long
    scales: torch.Tensor  # [G, N] in the layout's scale dtype
    g_idx: torch.Tensor  # [K] long

    def dequantized(self) -> torch.Tensor:
        """float64 ``[K, N]``."""
        return (self.q - self.zeros[self.g_idx]).double() * self.scales.double()[self.g_idx]


def group_index(k: int, layout: Layout, perm: torch.Tensor | None) -> torch.Tensor:
    if layout.group == -1:
        return torch.zeros(k, dtype=torch.long)
    order = perm if layout.act_order else torch.arange(k)
    g_idx = torch.empty(k, dtype=torch.long)
    g_idx[order] = torch.arange(k) // layout.group
    return g_idx


def quantize(weight: torch.Tensor, layout: Layout, perm: torch.Tensor | None = None) -> IntWeights:
    """``weight`` [out, in] -> integers, round to nearest per (group, output)."""
    w = weight.detach().double().t()  # [K, N]
    k, n = w.shape
    g_idx = group_index(k, layout, perm)
    groups = int(g_idx.max()) + 1
    maxq, half = 2**layout.bits - 1, 2 ** (layout.bits - 1)
    lo = torch.stack([w[g_idx == g].amin(0) for g in range(groups)]).clamp(max=0.0)  # [G, N]
    hi = torch.stack([w[g_idx == g].amax(0) for g in range(groups)]).clamp(min=0.0)
    if layout.sym:
        scales = (torch.maximum(-lo, hi) / (half - 1)).clamp(min=1e-6).to(layout.scale_dtype)
        zeros = torch.full((groups, n), half, dtype=torch.long)
    else:
        scales = ((hi - lo) / maxq).clamp(min=1e-6).to(layout.scale_dtype)
        low = 1 if layout.fmt == "gptq" and layout.v1 else 0  # v1 cannot store a zero point of 0
        zeros = torch.round(-lo / scales.double()).clamp(low, maxq).long()
    s = scales.double()[g_idx]
    q = (torch.round(w / s) + zeros[g_idx]).clamp(0, maxq).long()
    return IntWeights(q, zeros, scales, g_idx)


def pack(values: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Little-endian packing of ``values`` (0 .. 2**bits - 1) along ``dim`` into int32."""
    per = 32 // bits
    v = values.long() if dim == 0 else values.long().t()
    words = torch.zeros(v.shape[0] // per, v.shape[1], dtype=torch.long)
    for j in range(per):
        words |= v[j::per] << (bits * j)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the same bits, signed
    return words if dim == 0 else words.t().contiguous()


def gptq_tensors(quant: IntWeights, layout: Layout) -> dict[str, torch.Tensor]:
    stored = quant.zeros - (1 if layout.v1 else 0)
    return {"qweight": pack(quant.q, layout.bits, 0), "qzeros": pack(stored, layout.bits, 1),
            "scales": quant.scales, "g_idx": quant.g_idx.to(torch.int32)}


def compressed_tensors_tensors(quant: IntWeights, layout: Layout) -> dict[str, torch.Tensor]:
    k, n = quant.q.shape
    out = {"weight_packed": pack(quant.q.t(), layout.bits, 1), "weight_scale": quant.scales.t().contiguous(),
           "weight_shape": torch.tensor([n, k])}
    if not layout.sym:
        out["weight_zero_point"] = pack(quant.zeros.t(), layout.bits, 0)
    if layout.act_order:
        out["weight_g_idx"] = quant.g_idx.to(torch.int32)
    return out


def checkpoint_tensors(quant: IntWeights, layout: Layout) -> dict[str, torch.Tensor]:
    """The layer's tensors in ``layout``'s format, named as in the checkpoint (without the module prefix)."""
    return (gptq_tensors if layout.fmt == "gptq" else compressed_tensors_tensors)(quant, layout)


def quantization_config(layout: Layout) -> dict:
    if layout.fmt == "gptq":
        return {"quant_method": "gptq", "bits": layout.bits, "group_size": layout.group, "sym": layout.sym,
                "desc_act": layout.act_order, "static_groups": False, "true_sequential": True,
                "checkpoint_format": "gptq" if layout.v1 else "gptq_v2", "damp_percent": 0.01}
    weights = {"num_bits": layout.bits, "type": "int", "symmetric": layout.sym, "dynamic": False,
               "strategy": "channel" if layout.group == -1 else "group",
               "group_size": None if layout.group == -1 else layout.group,
               "actorder": "group" if layout.act_order else None, "observer": "minmax"}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": "pack-quantized"}},
            "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {}}
