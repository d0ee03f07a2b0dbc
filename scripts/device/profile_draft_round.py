"""Where a draft round's time goes (issue 16): torch.profiler over steady rounds of the 1B draft.

spec_costs.py found a round (k = 2, batch 1, after all drafts were accepted) about 0.4 ms per draft
above its graph replays back to back (H100, 2026-11-27). This script runs the same steady rounds
of ``DraftProposer.propose`` (Llama-3.1-8B target, Llama-3.2-1B-config draft, dummy bf16 weights)
under the profiler and splits each round's wall time into: host time before its first kernel
(the device idles), the device's busy time (the union of its kernels), the gaps between kernels
inside the round, and the tail from its last kernel to the round's end (read and host work after).
Prints the mean split, the largest gaps with the kernels around them, and the host functions of
most own time; writes a Chrome trace and the figures under --out.

    python3 scripts/device/profile_draft_round.py --out $OUT      # GPU machine (CUDA platform installed)
    python scripts/device/profile_draft_round.py --tiny            # CPU smoke run (host figures only)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import spec_costs

ROUND = "draft_round"


def steady_rounds(proposer, k: int, vocab: int, context: int, batch: int):
    """A function running one round after a round whose drafts were all accepted (plus a bonus)."""
    from pagoda.interfaces.proposer import ProposalInput

    g = torch.Generator().manual_seed(7)
    seqs = {f"p{i}": torch.randint(0, vocab, (context,), generator=g).tolist() for i in range(batch)}
    state = {"proposal": proposer.propose([ProposalInput(r, tuple(t)) for r, t in seqs.items()], k)}

    def one_round() -> None:
        for (rid, tokens), drafts in zip(seqs.items(), state["proposal"].token_ids):
            tokens += drafts + [int(torch.randint(0, vocab, (1,), generator=g))]
        with record_function(ROUND):
            state["proposal"] = proposer.propose([ProposalInput(r, tuple(t)) for r, t in seqs.items()], k)

    return one_round


def split_rounds(events) -> list[dict]:
    """Per round (a ``ROUND`` range on the host): before its first kernel, kernels' union, gaps, tail (us)."""
    rounds = [e for e in events if e.name == ROUND and e.device_type.name == "CPU"]
    kernels = sorted((e for e in events if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    out = []
    for r in rounds:
        start, end = r.time_range.start, r.time_range.end
        inside = [k for k in kernels if start <= k.time_range.start < end]
        row = {"wall_us": end - start, "kernels": len(inside)}
        if inside:
            busy, gaps, edge = 0.0, [], inside[0].time_range.start
            for before, k in zip([None, *inside], inside):
                if k.time_range.start > edge and before is not None:
                    gaps.append((k.time_range.start - edge, before.name, k.name))
                busy += max(0.0, k.time_range.end - max(edge, k.time_range.start))
                edge = max(edge, k.time_range.end)
            row.update(before_first_us=inside[0].time_range.start - start, busy_us=busy,
                       gaps_us=sum(g[0] for g in gaps), tail_us=end - edge, largest_gaps=sorted(gaps)[-5:])
        out.append(row)
    return out


def summary(rounds: list[dict]) -> dict:
    keys = ("wall_us", "before_first_us", "busy_us", "gaps_us", "tail_us", "kernels")
    mean = {k: sum(r.get(k, 0) for r in rounds) / max(len(rounds), 1) for k in keys}
    gaps = sorted((g for r in rounds for g in r.get("largest_gaps", [])), reverse=True)[:10]
    return {"rounds": len(rounds), "mean": mean, "largest_gaps": gaps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny random models")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = p.parse_args()
    args.batches, args.max_model_len = [args.batch], 4096
    target, draft, kv_bytes = str(spec_costs.TARGET), str(spec_costs.DRAFT), 8 << 30
    if args.tiny:
        target, draft = spec_costs.tiny_models(Path(tempfile.mkdtemp(prefix="draft-round-")))
        args.max_model_len, args.context, kv_bytes = 256, 48, 16 << 20
    llm = spec_costs.build_engine(target, kv_bytes, args, draft)
    proposer = llm.engine.core.speculator.proposer
    one_round = steady_rounds(proposer, args.k, llm.engine.core.vocab_size, args.context, args.batch)
    for _ in range(10):
        one_round()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(args.rounds):
            one_round()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / "draft_round_trace.json"))
    result = summary(split_rounds(prof.events()))
    (out / "draft_round_profile.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["mean"], indent=1))
    for gap in result["largest_gaps"]:
        print(f"  gap {gap[0]:7.1f} us between {gap[1][:60]} and {gap[2][:60]}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
