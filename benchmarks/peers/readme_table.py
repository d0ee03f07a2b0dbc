"""README's comparison with vLLM, rendered from the raw result files, so that text and data cannot drift.

    python -m benchmarks.peers.report --readme           # rewrite the block between the markers in README.md
    python -m benchmarks.peers.report --readme --check   # exit 1 if the block is not what the files render

Every metric of every row is shown whichever way it points: each cell is Pagoda's value vs vLLM's and Pagoda's
advantage (above 1x Pagoda is ahead; latencies inverted). The label above the tables says whether the runs
were like for like, from what the result files record: matched scheduler limits, fresh prompts for every run,
the same warm-up, and each engine's prefix-cache hit rate about 0 where the prompts were fresh."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BEGIN = "<!-- peers-table:begin (python -m benchmarks.peers.report --readme renders this from the files it names) -->"
END = "<!-- peers-table:end -->"
# The runs README shows (paths from the repository root); a new run's merged file replaces these.
SOURCES = ("benchmarks/results/h100_vs_vllm/peers.json",)
SERVED_COLUMNS = (("request_throughput", "requests/s"), ("p50_ttft_ms", "TTFT p50"), ("p99_ttft_ms", "TTFT p99"),
                  ("p50_tpot_ms", "TPOT p50"), ("p50_itl_ms", "ITL p50"), ("p99_itl_ms", "ITL p99"))
OFFLINE_COLUMNS = {"requests_per_s": "requests/s", "step_ms": "step time"}
KINDS = (("offline", "offline"), ("serve_", "served 256/256"), ("mixed_", "served, ShareGPT-shaped mixed lengths"),
         ("prefix_", "served, 10 shared 1024-token prefixes + 128 tokens, 128 out"))
SHORT_KINDS = {"serve_": "256/256", "mixed_": "mixed lengths", "prefix_": "shared prefixes"}  # in the tally


def value(metric: str, v: float) -> str:
    if metric.endswith("_ms"):
        if v >= 1000:
            return f"{v / 1000:.1f} s"
        return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"
    return f"{v:.1f}"


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    adv = row["pagoda_advantage"]
    return f"{value(row['metric'], row['pagoda'])} vs {value(row['metric'], row['vllm'])}" + (
        f" ({adv:.2f}x)" if adv else "")


def workload_label(name: str) -> str:
    """serve_256x256_rate4 -> '4 req/s'; *_inf -> 'at once'; offline_1024x128 -> '1000 x 1024/128'."""
    rate = re.search(r"_rate([\d.]+)$", name)
    if name.startswith("latency_b"):
        return f"decode step, batch {name.removeprefix('latency_b')}"
    if name.startswith("offline_"):
        return "1000 x " + name.removeprefix("offline_").replace("x", "/")
    return f"{rate.group(1)} req/s" if rate else "at once"


def caveats(runs: list[dict], rows: list[dict], limits: str) -> list[str]:
    """What keeps this table's runs from being like for like (empty: like for like)."""
    found = ["limits unmatched"] if limits != "matched" else []
    settings = [r.get("settings") or {} for r in runs]
    served = [r.get("settings") or {} for r in runs if any(p != "offline" for p in r.get("parts", []))]
    if any(not s.get("fresh_prompts_per_run") for s in served):
        found.append("prompts reused across rates")
    if any(not s.get("warmup") for s in settings):
        found.append("warm-ups differ")
    flagged = sorted({r["workload"] for r in rows if r.get("cache_flag")})
    if flagged:
        found.append(f"prefix-cache hits in {', '.join(flagged)}")
    return found


def vllm_line(runs: list[dict]) -> str:
    choices = {}
    for run in runs:
        for source in (run.get("vllm_choices") or {}).values():
            for k, v in source.items():
                choices.setdefault(k.split(".")[-1], v)
    if not choices:
        return "vLLM's attention backend, compilation mode and CUDA-graph sizes were not recorded in these runs."
    sizes = choices.get("cudagraph_capture_sizes") or []
    parts = [f"attention {choices.get('attention_backend', choices.get('backend', 'not recorded'))}"]
    if "flash_attn_version" in choices:
        parts[0] += f" (FlashAttention {choices['flash_attn_version']})"
    parts.append(f"compilation {choices.get('compilation_mode', choices.get('mode', 'not recorded'))}")
    parts.append(f"CUDA graphs {choices.get('cudagraph_mode', 'not recorded')}"
                 + (f" at {len(sizes)} sizes up to {max(sizes)}" if sizes else ""))
    return "vLLM ran with " + ", ".join(parts) + " (from its log and /server_info)."


def shown(rows: list[dict]) -> list[dict]:
    """The rows the tables show (their columns), in order."""
    served = {m for m, _ in SERVED_COLUMNS}
    return [r for r in rows if (r["metric"] in OFFLINE_COLUMNS if r["client"] == "offline" else r["metric"] in served)]


def tally(rows: list[dict]) -> str:
    """'Pagoda is ahead on A of the N figures below, level (within 1%) on L, behind on B: where.'"""
    picked = [r for r in shown(rows) if r["pagoda_advantage"]]
    behind = [r for r in picked if r["pagoda_advantage"] < 0.99]
    level = [r for r in picked if 0.99 <= r["pagoda_advantage"] <= 1.01]
    names = dict(SERVED_COLUMNS) | OFFLINE_COLUMNS
    where: dict[str, list[str]] = {}
    for r in behind:
        where.setdefault(names[r["metric"]], []).append(tally_label(r))
    text = (f"Pagoda is ahead on {len(picked) - len(behind) - len(level)} of the {len(picked)} figures below, "
            f"level (within 1%) on {len(level)}, behind on {len(behind)}")
    return text + (": " + "; ".join(f"{m} {', '.join(w)}" for m, w in where.items()) if where else "") + "."


def tally_label(row: dict) -> str:
    """Where a figure is: '1000 x 1024/128', '256/256 at 8 req/s', 'mixed lengths at once (vllm client)'."""
    label = workload_label(row["workload"])
    if row["client"] == "offline":
        return label
    kind = next((short for prefix, short in SHORT_KINDS.items() if row["workload"].startswith(prefix)), "")
    label = (kind + " " if kind else "") + (label if label.startswith("at ") else "at " + label)
    return label + ("" if row["client"] == "pagoda" else f" ({row['client']} client)")


def table(title: str, rows: list[dict], columns: tuple[tuple[str, str], ...], by_client: bool) -> list[str]:
    keys = list(dict.fromkeys((r["workload"], r["client"]) for r in rows))
    head = [title] + (["client"] if by_client else []) + [label for _, label in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for workload, client in keys:
        found = {r["metric"]: r for r in rows if (r["workload"], r["client"]) == (workload, client)}
        client_cell = [f"`{client} bench serve`"] if by_client else []
        lines.append("| " + " | ".join([workload_label(workload), *client_cell,
                                        *(cell(found.get(m)) for m, _ in columns)]) + " |")
    return lines


def own_defaults(runs: list[dict]) -> str:
    """' (Pagoda's: 256 sequences; vLLM's, from its /server_info: 1024 sequences, 8192 tokens a step)': each
    from the first own-limits run that recorded it (Pagoda's start-up line; vLLM's /server_info). Runs made
    before Pagoda's was recorded fall back to today's EngineConfig default."""
    from pagoda.config import EngineConfig

    own = [r for r in runs if (r.get("settings") or {}).get("limits") == "own"]
    ours = first_recorded(own, "pagoda_choices", "max_num_seqs")
    mine = (f"Pagoda's, from its start-up line: {ours['max_num_seqs']} sequences, {ours['max_num_batched_tokens']} "
            "tokens a step" if ours else f"Pagoda's: {EngineConfig.max_num_seqs} sequences")
    vllm = first_recorded(own, "vllm_choices", "server_info").get("server_info", {})
    seqs, tokens = vllm.get("scheduler_config.max_num_seqs"), vllm.get("scheduler_config.max_num_batched_tokens")
    theirs = f"; vLLM's, from its /server_info: {seqs} sequences, {tokens} tokens a step" if seqs and tokens else ""
    offline = first_recorded(own, "vllm_choices", "vllm_offline+latency").get("vllm_offline+latency", {}).get(
        "max_num_batched_tokens")
    theirs += f" (offline, from its log: {offline} tokens a step)" if theirs and offline and offline != tokens else ""
    return f" ({mine}{theirs})"


def first_recorded(runs: list[dict], field: str, name: str) -> dict:
    """``run[field]`` of the first run whose ``field`` recorded ``name``; {} where none did."""
    return next((r[field] for r in runs if name in (r.get(field) or {})), {})


def limits_section(runs: list[dict], rows: list[dict], limits: str, found: list[str]) -> list[str]:
    what = ("matched scheduler limits (256 sequences, 8192 tokens a step on both)" if limits == "matched"
            else "each engine at its own scheduler defaults" + own_defaults(runs))
    verdict = "like for like" if not found else f"not like-for-like ({', '.join(found)})"
    out = [f"**{what[0].upper() + what[1:]}: {verdict}.** {tally(rows)}", ""]
    offline = [r for r in rows if r["client"] == "offline" and r["metric"] in OFFLINE_COLUMNS]
    if offline:
        out += ["| offline | Pagoda vs vLLM |", "| --- | --- |"]
        out += [f"| {workload_label(r['workload'])}, {OFFLINE_COLUMNS[r['metric']]} | {cell(r)} |" for r in offline]
        out += [""]
    for prefix, title in KINDS[1:]:
        served = [r for r in rows if r["workload"].startswith(prefix)]
        if served:
            out += table(title, served, SERVED_COLUMNS, True) + [""]
    return out


def repeats_line(rows: list[dict]) -> str:
    """Where some rows are medians over several server starts (run.py --repeats): which and how many."""
    repeated = [r for r in shown(rows) if r.get("repeats")]
    if not repeated:
        return ""
    starts = sorted({n for r in repeated for n in r["repeats"].values()})
    names = ", ".join(sorted({f"`{r['workload']}`" for r in repeated}))
    return (f" Rows of {names} are medians over "
            f"{'/'.join(map(str, starts))} server starts of each engine, alternating which started first.")


def render(merged: dict, sources: tuple[str, ...]) -> str:
    runs, rows = merged["runs"], merged["rows"]
    devices = sorted({r.get("device") or "unknown" for r in runs})
    dates = sorted({(r.get("date") or "")[:10] for r in runs})
    links = ", ".join(f"[{Path(s).name}]({s})" for s in sources)
    lines = [BEGIN, f"Pagoda against vLLM 0.26 on {', '.join(devices)}, runs of {', '.join(dates)} ({links}). "
             "Each cell: Pagoda vs vLLM (Pagoda's advantage: above 1x Pagoda is ahead, latencies inverted, so "
             "0.50x is twice vLLM's latency). " + vllm_line(runs) + repeats_line(rows), ""]
    fair = False
    for limits in ("matched", "own"):
        picked = [r for r in rows if r.get("limits", "own") == limits]
        if picked:
            found = caveats(runs, picked, limits)
            fair |= limits == "matched" and not found
            lines += limits_section(runs, picked, limits, found)
    if not fair:
        lines += ["A like-for-like rerun (matched limits, fresh prompts for every rate, the same warm-up, both "
                  "clients) is pending on the GPU machine.", ""]
    return "\n".join(lines + [END])


def load(sources: tuple[str, ...]) -> dict:
    import report

    return report.merge_runs([json.loads((ROOT / s).read_text()) for s in sources])


def replace_block(text: str, block: str) -> str:
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no block between {BEGIN!r} and {END!r}; add the two markers where it goes")
    return text[:start] + block + text[end + len(END):]


def main(sources: tuple[str, ...] = SOURCES, check: bool = False, readme: Path = README) -> int:
    block = render(load(sources), sources)
    text = readme.read_text()
    updated = replace_block(text, block)
    if check:
        if updated != text:
            print(f"{readme.name}'s comparison with vLLM is not what {', '.join(sources)} render; run "
                  "python -m benchmarks.peers.report --readme")
            return 1
        return 0
    readme.write_text(updated)
    print(f"{readme}: comparison with vLLM rendered from {len(sources)} file(s)")
    return 0
