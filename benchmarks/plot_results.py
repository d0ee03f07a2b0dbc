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


def throughput_chart() -> None:
    """Requests/s on the 256/256 workload: Pagoda (triton, torch backends), HF, vLLM 0.5.4's anchor."""
    run = "h100_2026-11-21"
    hf = load(f"{run}/hf_200x256x256.json")
    bars = [
        ("Pagoda, graphs\n1000 prompts", load(f"{run}/run3/throughput_graphs_256x256.json")["pagoda"]["requests_per_s"]),
        ("Pagoda, eager\n1000 prompts", load(f"{run}/throughput_256x256.json")["pagoda"]["requests_per_s"]),
        ("vLLM 0.5.4 (published)\n1000 prompts", 24.5),
        ("Pagoda, eager\n200 prompts", hf["pagoda"]["requests_per_s"]),
        ("Pagoda, torch ref attn\n200 prompts", load(f"{run}/backend_torch_200x256x256.json")["pagoda"]["requests_per_s"]),
        ("HF generate_batch\n200 prompts", hf["hf_generate_batch"]["requests_per_s"]),
    ]
    fig, ax = plt.subplots(figsize=(9, 4))
    colors = ["#1d4e89", "#2a6f97", "#999999", "#2a6f97", "#89c2d9", "#c44536"]
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color=colors)
    for i, (_, v) in enumerate(bars):
        ax.text(i, v + 0.3, f"{v:.1f}", ha="center")
    ax.set_ylabel("requests / s")
    ax.set_title("Llama-3.1-8B (dummy bf16 weights), 256 in / 256 out, one H100")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "throughput_h100.png", dpi=110)


def latency_chart() -> None:
    """Decode step time at batch 1/8/64 on the H100: eager, graphs (first version), graphs now, floor."""
    run = "h100_2026-11-21"
    series = [("eager", f"{run}/latency.json", "#999999"), ("CUDA graphs, first", f"{run}/run2/latency_graphs.json", "#89c2d9"),
              ("CUDA graphs, one-copy inputs", f"{run}/run3/latency_graphs.json", "#1d4e89")]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.25
    for k, (label, name, color) in enumerate(series):
        steps = load(name)["steps"]
        ax.bar([i + (k - 1) * width for i in range(len(steps))], [s["step_ms"] for s in steps], width, label=label, color=color)
    floor = load(series[-1][1])["steps"]
    for i, s in enumerate(floor):
        ax.hlines(s["floor_ms"], i - 1.6 * width, i + 1.6 * width, colors="#c44536", linestyles="--",
                  label="memory floor" if i == 0 else None)
        ax.text(i + width, s["step_ms"] + 0.2, f"{s['ratio_to_floor']:.2f}x", ha="center", fontsize=8)
    ax.set_xticks(range(len(floor)), [f"batch {s['batch']}" for s in floor])
    ax.set_ylabel("ms per decode step")
    ax.set_title("Llama-3.1-8B decode step (dummy bf16), one H100")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "latency_h100.png", dpi=110)


def attention_chart() -> None:
    data = load("attention_triton_h200.json")
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


def flash_splits_chart() -> None:
    """Flash decode bandwidth against the split count (H100), triton at its own plan for reference."""
    data = load("h100_2026-11-26_round10/flash_splits_planned.json")
    cases = {}
    for r in data["rows"]:
        cases.setdefault((r["batch"], r["ctx"]), []).append(r)
    shown = [(64, 1024), (64, 4096), (64, 8192), (32, 8192), (1, 32768), (4, 32768)]
    fig, axes = plt.subplots(1, len(shown), figsize=(14, 3.2), sharey=True)
    for ax, key in zip(axes, shown):
        rows = cases[key]
        flash = sorted((r["splits"], r["of_copy"] * 100, r.get("planned")) for r in rows if r["backend"] == "flash")
        triton = next(r for r in rows if r["backend"] == "triton")
        ax.plot([f[0] for f in flash], [f[1] for f in flash], "o-", label="flash")
        ax.plot([f[0] for f in flash if f[2]], [f[1] for f in flash if f[2]], "r*", ms=14, label="flash's plan")
        ax.axhline(triton["of_copy"] * 100, color="grey", ls="--", label="triton (its own plan)")
        ax.axhline(85, color="green", ls=":", label="goal 85%")
        ax.set(xscale="log", xlabel="splits", title=f"batch {key[0]} x {key[1] // 1024}k")
        ax.minorticks_off()
        ax.set_xticks([f[0] for f in flash], [str(f[0]) for f in flash], fontsize=7)
    axes[0].set_ylabel("% of copy bandwidth")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Flash decode against the split count, Llama-3.1-8B attention, bf16, H100", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "flash_splits_h100.png", dpi=110)


def flash_decode_chart() -> None:
    """Flash decode against triton by batch and context (H200, run 8), and the ring depth at split 1."""
    run = "h200_2026-11-26_flash_decode"
    data = load(f"{run}/4_final/attention_flash.json")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    by_batch: dict[int, list] = {}
    for r in data["decode"]:
        by_batch.setdefault(r["batch"], []).append((r["ctx"], r["flash_of_copy"] * 100, r["triton_gbs"] / data["copy_gbs"] * 100))
    for batch, points in sorted(by_batch.items()):
        points.sort()
        line = left.plot([p[0] for p in points], [p[1] for p in points], "o-", label=f"batch {batch}")[0]
        left.plot([p[0] for p in points], [p[2] for p in points], "x--", color=line.get_color(), alpha=0.6)
    left.axhline(85, color="green", ls=":", label="goal 85%")
    left.set(xscale="log", xlabel="context length", ylabel="% of copy bandwidth",
             title="flash (solid) and triton (dashed), each at its plan")
    left.legend(fontsize=7)
    shown = [(64, 1024), (64, 4096), (64, 8192), (32, 8192)]
    for stages, marker in ((2, "s"), (3, "o")):
        rows = load(f"{run}/2_ring_depth/flash_splits_s{stages}.json")["rows"]
        split1 = {(r["batch"], r["ctx"]): r["of_copy"] * 100 for r in rows if r["backend"] == "flash" and r["splits"] == 1}
        right.plot(range(len(shown)), [split1[k] for k in shown], marker + "-", label=f"{stages}-stage rings, 1 split")
    best = {(r["batch"], r["ctx"]): r["of_copy"] * 100 for r in load(f"{run}/2_ring_depth/flash_splits_s2.json")["rows"]
            if r["backend"] == "triton"}
    right.plot(range(len(shown)), [best[k] for k in shown], "x--", color="grey", label="triton")
    right.set_xticks(range(len(shown)), [f"b{b} x {c // 1024}k" for b, c in shown])
    right.set(ylabel="% of copy bandwidth", title="Ring depth at head 128 (batch 32-64)")
    right.legend(fontsize=7)
    fig.suptitle("Flash decode, Llama-3.1-8B attention, bf16, H200 (2026-11-26, run 8)", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "flash_decode_h200.png", dpi=110)


def awq_chart() -> None:
    """AWQ int4 (tiles kernel) over bf16 by token count: per projection, and the decoder layer with and
    without programmatic dependent launch (H100, run 17)."""
    run = "h100_2026-11-27_awq/10_awq_pdl"
    pdl, off = load(f"{run}/pdl/quant_awq.json"), load(f"{run}/pdl_off/quant_awq.json")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for layer in ("qkv", "o", "gate_up", "down"):
        rows = sorted((r["m"], r["bf16_us"] / r["tiles_us"]) for r in pdl["shapes"] if r["layer"] == layer)
        left.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label=layer)
    left.set(title="per projection (PDL on)")
    for data, label, style in ((pdl, "PDL on", "o-"), (off, "PAGODA_PDL=0", "x--")):
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


def tp_chart() -> None:
    """Llama-3.1-8B at TP=2 against TP=1 on 2 x H100 (2026-11-27, the LL all-reduce the default): the
    batch-1 decode step of each run against its own TP=1 step, and the offline throughput."""
    run = "h100x2_2026-11-27_ll_default"
    step = {name: load(f"{run}/{name}.json")["steps"][0]["step_ms"] for name in (
        "run1/work/tp1_8b_latency", "run1/work/tp2_8b_latency", "run2/work/tp1_8b_latency",
        "run2/work/tp2_8b_latency", "run2/work/tp2_8b_latency_ll")}
    pairs = [("run 1", step["run1/work/tp1_8b_latency"], step["run1/work/tp2_8b_latency"]),
             ("run 2", step["run2/work/tp1_8b_latency"], step["run2/work/tp2_8b_latency"]),
             ("run 2, =ll", step["run2/work/tp1_8b_latency"], step["run2/work/tp2_8b_latency_ll"])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.38
    for i, (label, tp1, tp2) in enumerate(pairs):
        left.bar(i - width / 2, tp1, width, color="#999999", label="TP=1" if i == 0 else None)
        left.bar(i + width / 2, tp2, width, color="#1d4e89", label="TP=2" if i == 0 else None)
        left.hlines(0.6 * tp1, i, i + width, colors="#c44536", linestyles="--", label="goal 0.6x TP=1" if i == 0 else None)
        left.text(i + width / 2, tp2 + 0.1, f"{tp2 / tp1:.3f}x", ha="center", fontsize=8)
    left.set_xticks(range(len(pairs)), [p[0] for p in pairs])
    left.set(ylabel="ms per batch-1 decode step", title="batch-1 decode step")
    left.legend(fontsize=8)
    rates = [load(f"{run}/run1/work/tp{n}_8b_1000x256.json")["pagoda"]["requests_per_s"] for n in (1, 2)]
    right.bar(["TP=1", "TP=2"], rates, color=["#999999", "#1d4e89"])
    for i, v in enumerate(rates):
        right.text(i, v + 1, f"{v:.1f}", ha="center", fontsize=8)
    right.set(ylabel="requests/s", title="bench throughput 1000 x 256/256 (run 1)")
    fig.suptitle("Llama-3.1-8B dummy bf16, tensor parallelism on 2 x H100, LL all-reduce (2026-11-27)", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "tp_h100x2.png", dpi=110)


def tp_layers_chart() -> None:
    """Where a decoder layer's time goes at TP=1 and TP=2 on 2 x H200 (2026-11-28, session 30's traces of main
    through scripts/device/layer_breakdown.py): the GEMVs halve, the latency-bound kernels between them do not."""
    layers = load("h200x2_2026-11-28_round30/layer_breakdown.json")
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
    """The 8B's batch-1 step ratio TP=2 / TP=1 on 2 x H200 (session 31), pair by pair: main without the pace
    against the dense GEMV's paced early reads at 2500 GB/s (arms of a pair run one after the other)."""
    run = "h200x2_2026-11-28_round31"

    def step(call: str, pair: int, tp: int, arm: str) -> float:
        return load(f"{run}/{call}/latency_p{pair}_tp{tp}_{arm}.json")["steps"][0]["step_ms"]

    pairs = [(call, pair) for call in ("pace_ab", "pace_confirm") for pair in (1, 2)]
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
    ax.set(ylabel="TP=2 step / TP=1 step", title="Llama-3.1-8B dummy bf16, batch-1 decode, 2 x H200 (session 31)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "tp_pace_h200x2.png", dpi=110)


def verify_chart() -> None:
    """The verify step (1-5 query tokens) over the 1-token decode step, Llama-3.1-8B batch 1 on an H100,
    Triton's short-query path against the prefill kernel (2026-11-27, one machine)."""
    run = "h100_2026-11-27_round16"
    fig, ax = plt.subplots(figsize=(6, 4))
    for short, label, style in (("short1", "short-query path (decode kernel)", "o-"),
                                ("short0", "PAGODA_TRITON_SHORT_QUERIES=0 (prefill kernel)", "x--")):
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
    """Verify steps and short chunks after cached prefixes on an H200 (2026-11-27, run 12 of
    docs/attention_flash.md): flash's decode kernel, its prefill kernel unpacked and packed, triton."""
    run = "h200_2026-11-27_round22/bench_fixed"
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
    throughput_chart()
    latency_chart()
    attention_chart()
    flash_splits_chart()
    flash_decode_chart()
    awq_chart()
    tp_chart()
    tp_layers_chart()
    tp_pace_chart()
    verify_chart()
    flash_chunks_chart()
    print("wrote", *sorted(p.name for p in IMG.glob("*.png")))
