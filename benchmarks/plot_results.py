"""Draw the charts in docs/ from the JSON results in benchmarks/results/ (needs matplotlib).

Usage: python benchmarks/plot_results.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())




def attention_chart() -> None:
    data = load("h200_attention_triton/attention_triton.json")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    seqs = [r["seq"] for r in data["prefill"]]
    left.plot(seqs, [r["triton_mha_tflops"] for r in data["prefill"]], "o-", label="Pagoda triton")
    left.plot(seqs, [r["sdpa_flash_tflops"] for r in data["prefill"]], "s--", label="torch SDPA (flash)")
    left.set(xscale="log", xlabel="sequence length", ylabel="TFLOP/s", title="Prefill, causal, head dim 128, bf16")
    left.legend()
    by_batch: dict[int, list] = {}
    for r in data["decode"]:
        by_batch.setdefault(r["batch"], []).append((r["ctx"], r["of_copy"] * 100))
    for batch, points in sorted(by_batch.items()):
        points.sort()
        right.plot([p[0] for p in points], [p[1] for p in points], "o-", label=f"batch {batch}")
    right.axhline(80, color="grey", ls=":", label="goal 80%")
    right.set(xscale="log", xlabel="context length", ylabel="% of copy bandwidth", title="Paged decode, bf16 (H200)")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "attention_triton_h200.png", dpi=110)




def awq_chart() -> None:
    """AWQ int4 (tiles kernel) over bf16 by token count: per projection, and the decoder layer with and
    without programmatic dependent launch (H100)."""
    run = "h100_awq/pdl_ab_kernels"
    pdl, off = load(f"{run}/pdl/quant_awq.json"), load(f"{run}/pdl_off/quant_awq.json")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for layer in ("qkv", "o", "gate_up", "down"):
        rows = sorted((r["m"], r["bf16_us"] / r["tiles_us"]) for r in pdl["shapes"] if r["layer"] == layer)
        left.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label=layer)
    left.set(title="per projection (PDL on)")
    for data, label, style in ((pdl, "PDL on", "o-"), (off, "PDL off", "x--")):
        rows = sorted((r["m"], r["bf16_us"] / r["tiles_us"]) for r in data["decoder_layer"])
        right.plot([r[0] for r in rows], [r[1] for r in rows], style, label=label)
    right.set(title="decoder layer (4 projections)")
    for ax in (left, right):
        ax.axhline(3.85, color="grey", ls=":", label="bytes ratio 3.85x")
        ax.axhline(2.5, color="green", ls=":", label="goal 2.5x (M <= 16)")
        ax.axhline(1.0, color="black", lw=0.5)
        ax.set(xscale="log", xlabel="tokens per call (M)")
        ax.set_xticks([1, 2, 4, 8, 16, 64, 256], ["1", "2", "4", "8", "16", "64", "256"])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    left.set_ylabel("speedup over bf16 (cuBLAS)")
    fig.suptitle("AWQ int4 (g128) tiles kernel against bf16, Llama-3.1-8B projections, H100 (2026-11-27)", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "awq_h100.png", dpi=110)



def tp_layers_chart() -> None:
    """Where a decoder layer's time goes at TP=1 and TP=2 on 2 x H200 (profiler traces of both sizes, summed per
    kernel kind; the folder's README names the commit of the tool): the GEMVs halve, the latency-bound kernels
    between them do not."""
    layers = load("h200x2_decode_step/layer_breakdown.json")
    tp1, tp2 = layers["TP=1"], layers["TP=2 rank 1"]
    kinds = (("dense GEMVs", "#1d4e89"), ("norms / LL sums", "#c44536"), ("attention", "#89c2d9"),
             ("SiLU-and-mul", "#999999"))
    rows = (("TP=1", tp1), ("TP=1 GEMVs halved,\nthe rest as TP=1", {**tp1, "dense GEMVs": tp1["dense GEMVs"] / 2}),
            ("TP=2 (a rank)", tp2))
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for y, (_, row) in enumerate(rows):
        left = 0.0
        for kind, color in kinds:
            ax.barh(y, row[kind], left=left, color=color, label=kind if y == 0 else None)
            left += row[kind]
        ax.text(left + 1, y, f"{left:.1f} us ({left / tp1['layer']:.3f}x)", va="center", fontsize=8)
    ax.axvline(0.6 * tp1["layer"], color="#c44536", linestyle="--", linewidth=1, label="0.6x TP=1's layer")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, tp1["layer"] * 1.25)
    ax.set(xlabel="microseconds a decoder layer (exclusive time plus gaps, decode steps)",
           title="Llama-3.1-8B dummy bf16, batch-1 decode, 2 x H200: a layer by kind")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "tp_layers_h200x2.png", dpi=110)


def tp_pace_chart() -> None:
    """The 8B's batch-1 step ratio TP=2 / TP=1 on 2 x H200, pair by pair: main without the pace
    against the dense GEMV's paced early reads at 2500 GB/s (arms of a pair run one after the other)."""
    run = "h200x2_decode_step"

    def step(call: str, pair: int, tp: int, arm: str) -> float:
        return load(f"{run}/{call}/latency_p{pair}_tp{tp}_{arm}.json")["steps"][0]["step_ms"]

    pairs = [(call, pair) for call in ("gemv_pace_ab", "gemv_pace_confirm") for pair in (1, 2)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for i, (call, pair) in enumerate(pairs):
        for dx, arm, color, label in ((-width / 2, "main", "#999999", "no pace"), (width / 2, "p2500", "#1d4e89", "paced, 2500 GB/s")):
            ratio = step(call, pair, 2, arm) / step(call, pair, 1, arm)
            ax.bar(i + dx, ratio, width, color=color, label=label if i == 0 else None)
            ax.text(i + dx, ratio + 0.002, f"{ratio:.3f}", ha="center", fontsize=7)
    ax.axhline(0.6, color="#c44536", linestyle="--", linewidth=1, label="goal 0.6x")
    ax.set_xticks(range(len(pairs)), [f"pair {i + 1}" for i in range(len(pairs))])
    ax.set_ylim(0.5, 0.64)
    ax.set(ylabel="TP=2 step / TP=1 step", title="Llama-3.1-8B dummy bf16, batch-1 decode, 2 x H200")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "tp_pace_h200x2.png", dpi=110)


def verify_chart() -> None:
    """The verify step (1-5 query tokens) over the 1-token decode step, Llama-3.1-8B batch 1 on an H100,
    Triton's short-query path against the prefill kernel (2026-11-27, one machine)."""
    run = "h100_speculative/verify_step"
    fig, ax = plt.subplots(figsize=(6, 4))
    for short, label, style in (("short_query_path", "short-query path (decode kernel)", "o-"),
                                ("prefill_kernel", "prefill kernel", "x--")):
        steps = sorted((s["query_len"], s["step_ms"]) for s in load(f"{run}/{short}/spec_costs.json")["costs"]["target_steps"]
                       if s["batch"] == 1)
        ax.plot([q for q, _ in steps], [ms / steps[0][1] for _, ms in steps], style, label=label)
    ax.plot([5], [1.15], "v", color="#c44536", label="goal: 5 tokens <= 1.15x")
    ax.set(xlabel="query tokens per request (k + 1)", ylabel="step / 1-token decode step", xticks=[1, 2, 3, 4, 5],
           title="Verify step, Llama-3.1-8B dummy bf16, batch 1, H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "verify_h100.png", dpi=110)


def flash_chunks_chart() -> None:
    """Verify steps and short chunks after cached prefixes on an H200 (docs/attention_flash.md): flash's decode kernel, its prefill kernel unpacked and packed, triton."""
    run = "h200_flash_vs_triton/kernels"
    unpacked, packed = (load(f"{run}/attention_flash_verify_pack{p}.json")["verify"] for p in (0, 1))
    labels = [f"{r['batch']} x {r['q_len']}\nctx {r['ctx'] // 1024}k" for r in packed]
    series = (("flash decode kernel", [r["flash_us"] for r in packed], "#1d4e89"),
              ("flash prefill, one q head a program", [r["flash_prefill_us"] for r in unpacked], "#89c2d9"),
              ("flash prefill, packed (default)", [r["flash_prefill_us"] for r in packed], "#2a6f97"),
              ("triton", [r["triton_us"] for r in packed], "#c44536"))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.2
    for i, (label, values, color) in enumerate(series):
        ax.bar([x + (i - 1.5) * width for x in range(len(labels))], values, width, label=label, color=color)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set(yscale="log", ylabel="microseconds a layer (log)", xlabel="batch x query tokens, cached context",
           title="Short queries after cached prefixes, Llama-3.1-8B attention, bf16, H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "flash_chunks_h200.png", dpi=110)


if __name__ == "__main__":
    IMG.mkdir(parents=True, exist_ok=True)
    attention_chart()
    awq_chart()
    tp_layers_chart()
    tp_pace_chart()
    verify_chart()
    flash_chunks_chart()
    print("wrote", *sorted(p.name for p in IMG.glob("*.png")))
