"""The LoRA decode kernels (``pagoda.lora.triton_kernels``, BGMV) on one Llama-3.1-8B layer: rank-16
adapters on q/k/v, o, gate/up and down, for a decode step of B rows over 1 or 8 adapters (rows assigned
round-robin), read through the graph plan as replayed decode steps read it.

Each case times, as CUDA-graph replays over enough layer copies that the weights stream from memory:
the layer's four base matmuls (``base``, cuBLAS), the LoRA adds alone (``lora``) and both
(``base+lora``); ``vs_peer`` of ``base+lora`` is the layer's speed with adapters relative to without.
The floor: the adapters' matrices and the activations at the copy rate. ``max_rel_err``: the LoRA add
against the torch reference. ``--tiles split_k=256+decode_k=64,block_n=64,...`` also times the LoRA adds with
other tiles (a sweep: each variant some of :class:`~pagoda.lora.triton_kernels.Tiles`' fields, ``+``-joined).
``--small`` (tiny shapes) runs on a CPU under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import copies_for, device, on_gpu, time_each_us
from pagoda.triton_support import interpreting

TIMING = "CUDA-graph replays over layer copies, median"
RANK, SLOTS = 16, 8
LLAMA_8B = {"qkv": (4096, [4096, 1024, 1024]), "o": (4096, [4096]), "gate_up": (4096, [14336, 14336]),
            "down": (14336, [4096])}
SMALL = {"qkv": (64, [64, 32, 32]), "down": (96, [64])}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batches", help="comma-separated decode rows (default 1,16,64,256; --small: 1,20)")
    p.add_argument("--tiles", help="tile variants to time too, comma-separated, each FIELD=N[+FIELD=N...] of "
                   "pagoda.lora.triton_kernels.Tiles (e.g. split_k=256+decode_k=64,block_n=64)")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu() and not interpreting():
        return "the Triton kernels need a GPU, or TRITON_INTERPRET=1 (with --small) on a CPU"
    return None


class Projection:
    """One projection's base weight, adapter slots and activations for ``rows`` decode rows."""

    def __init__(self, k: int, sizes: list[int], rows: int, dtype: torch.dtype) -> None:
        n, dev = sum(sizes), device()
        self.w = torch.randn(n, k, device=dev, dtype=dtype) * k**-0.5
        self.a = torch.randn(SLOTS, len(sizes), RANK, k, device=dev, dtype=dtype) * k**-0.5
        self.b = torch.randn(SLOTS, n, RANK, device=dev, dtype=dtype) * RANK**-0.5
        self.host_slices = [(sum(sizes[:i]), size) for i, size in enumerate(sizes)]
        self.slices = torch.tensor(self.host_slices, dtype=torch.int32, device=dev)
        self.x = torch.randn(rows, k, device=dev, dtype=dtype)
        self.y = torch.zeros(rows, n, device=dev, dtype=dtype)

    def base(self) -> None:
        torch.mm(self.x, self.w.t(), out=self.y)

    def lora(self, plan, tiles=None) -> None:
        from pagoda.lora.triton_kernels import add_lora_triton

        add_lora_triton(self.y, self.x, self.a, self.b, self.slices, max(s for _, s in self.host_slices), plan, tiles)

    def lora_bytes(self, adapters: int) -> int:
        return adapters * (self.a[0].numel() + self.b[0].numel()) * self.a.element_size() + 2 * self.y.numel() * 2


def _plan(slots: list[int]):
    from pagoda.lora.plan import graph_buffer_size, graph_plan, write_graph_plan

    static = torch.empty(graph_buffer_size(len(slots), SLOTS), dtype=torch.int32)
    write_graph_plan(static.numpy(), slots, len(slots), SLOTS)
    return graph_plan(static.to(device()), len(slots), SLOTS)


def _max_rel_err(p: Projection, slots: list[int], plan) -> float:
    from pagoda.lora.ops import add_lora_torch
    from pagoda.lora.plan import build_plan

    p.y.zero_()
    p.lora(plan)
    got = p.y.float().clone()
    want = add_lora_torch(torch.zeros_like(p.y, dtype=torch.float32), p.x.float(), p.a.float(), p.b.float(), p.slices,
                          p.host_slices, build_plan(slots, [1] * len(slots), device(), groups=True))
    return float((got - want).abs().max() / want.abs().max())


def _variants(spec: str | None) -> dict:
    """name -> tiles: the engine's ("lora"), then each of ``spec``'s."""
    from pagoda.lora.triton_kernels import tiles

    default = tiles(1)
    out = {"lora": default}
    for item in (spec or "").split(","):
        if item:
            out[f"lora_{item}"] = default._replace(**{name: int(value) for name, value in
                                                      (field.split("=") for field in item.split("+"))})
    return out


def case_row(report: Report, shapes: dict, rows: int, adapters: int, dtype: torch.dtype, variants: dict) -> None:
    layer = [Projection(k, sizes, rows, dtype) for k, sizes in shapes.values()]
    layer_bytes = sum(p.w.numel() * p.w.element_size() + p.a.numel() * 2 + p.b.numel() * 2 for p in layer)
    copies = [layer] + [[Projection(k, sizes, rows, dtype) for k, sizes in shapes.values()]
                        for _ in range(copies_for(layer_bytes) - 1)]
    slots = [i % adapters for i in range(rows)]
    plan = _plan(slots)
    us = {"base": time_each_us([lambda ps=ps: [p.base() for p in ps] for ps in copies], graphed=on_gpu())}
    for name, v in variants.items():
        us[name] = time_each_us([lambda ps=ps, v=v: [p.lora(plan, v) for p in ps] for ps in copies], graphed=on_gpu())
    us["base+lora"] = time_each_us([lambda ps=ps: [(p.base(), p.lora(plan, variants["lora"])) for p in ps]
                                    for ps in copies], graphed=on_gpu())
    floor = report.rates.floor_us(nbytes=sum(p.lora_bytes(adapters) for p in layer))
    report.add(make_row({"rows": rows, "adapters": adapters, "rank": RANK}, us, peer="base", floor_us=floor,
                        max_rel_err=_max_rel_err(layer[0], slots, plan)))


def run(args: argparse.Namespace, report: Report) -> None:
    shapes = SMALL if args.small else LLAMA_8B
    dtype = torch.bfloat16 if on_gpu() else torch.float32
    batches = [int(b) for b in (args.batches or ("1,20" if args.small else "1,16,64,256")).split(",")]
    variants = _variants(args.tiles)
    torch.manual_seed(0)
    for rows in batches:
        for adapters in (1, SLOTS):
            if adapters <= rows:
                case_row(report, shapes, rows, adapters, dtype, variants)
