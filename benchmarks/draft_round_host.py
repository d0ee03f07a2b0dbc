"""Host time of a draft-proposer round, on CPU (issue 16): what a round costs besides its steps.

Tiny random models (a Llama target, a Qwen3 draft, as in the tests) on a CPU platform that
"captures" the draft's step graphs and replays them as no-ops, so each round's wall time is its
host work alone: syncing the shadows, reserving KV slots, packing and copying the round's inputs,
queueing its steps, reading the drafts. Rounds follow one that accepted one draft ("one") or all
("all"), as in scripts/device/spec_costs.py. Printed per round (medians): the time until the first
step is launched (a GPU idles meanwhile), the time spent queueing the steps, the read, the total,
and the torch ops dispatched in one round (each a kernel launch or a view on a GPU).

    PYTHONPATH=core python benchmarks/draft_round_host.py --k 2 --batch 1
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import time
import types
from pathlib import Path

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from pagoda import LLM
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.hookspecs import hookimpl
from pagoda.interfaces.proposer import ProposalInput
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins import manager as plugin_manager

VOCAB = 384


class NoOpReplayPlatform(CpuPlatform):
    """Graphs whose replay does nothing: a round's steps cost no compute, only their host work."""

    priority = -1

    def supports_graphs(self) -> bool:
        return True

    def capture_graph(self, fn):
        return (lambda: None), fn()


class GraphSafeTorchBackend(TorchAttentionBackend):
    priority = -1
    supports_graphs = True


def build(folder: Path, k: int, batch: int):
    """The draft proposer of an engine over tiny random models, its step graphs "captured"."""
    shape = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=1024)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape)).save_pretrained(folder / "target")
    transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**shape)).save_pretrained(folder / "draft")
    module = types.SimpleNamespace(
        register_platforms=hookimpl(lambda register: register("noop-replay", NoOpReplayPlatform)),
        register_attention_backends=hookimpl(lambda register: register("torch-graphs", GraphSafeTorchBackend)),
    )
    plugin_manager._MANAGER = plugin_manager.PluginManager(modules={"bench": module}, entry_points=False)
    spec = {"method": "draft", "model": str(folder / "draft"), "num_speculative_tokens": k}
    llm = LLM(model=str(folder / "target"), skip_tokenizer_init=True, block_size=16, max_num_seqs=max(8, batch),
              max_num_batched_tokens=4096, kv_cache_memory=16 << 20, speculative_config=spec, platform="noop-replay",
              attention_backend="torch-graphs")
    return llm.engine.core.speculator.proposer


class OpCount(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def measure(proposer, k: int, batch: int, accepted: str, rounds: int) -> dict[str, float]:
    marks: dict[str, float] = {}
    steps, platform = proposer.chain.steps, proposer.runner.platform
    run, copy = steps.run, platform.copy_to_host_async
    steps.run = lambda *a: marks.setdefault("first", time.perf_counter()) and run(*a)
    platform.copy_to_host_async = lambda t, beside=False: marks.setdefault("queued", time.perf_counter()) and copy(t, beside)
    phases, ops = collections.defaultdict(list), 0
    for repeat in range(max(1, rounds // 20)):
        g = torch.Generator().manual_seed(repeat)
        seqs = {f"{accepted}-{repeat}-{i}": torch.randint(0, VOCAB, (64,), generator=g).tolist() for i in range(batch)}
        drafts = proposer.propose([ProposalInput(r, tuple(t)) for r, t in seqs.items()], k).token_ids
        for j in range(20):
            for tokens, d in zip(seqs.values(), drafts):
                tokens += (d[:1] if accepted == "one" else d) + [7]
            inputs = [ProposalInput(r, tuple(t)) for r, t in seqs.items()]
            marks.clear()
            start = time.perf_counter()
            if j == 19:
                with OpCount() as counter:
                    drafts = proposer.propose(inputs, k).token_ids
                ops = counter.count
                continue
            drafts = proposer.propose(inputs, k).token_ids
            end = time.perf_counter()
            if j >= 3:
                phases["to first step"].append(marks["first"] - start)
                phases["queueing steps"].append(marks["queued"] - marks["first"])
                phases["read"].append(end - marks["queued"])
                phases["total"].append(end - start)
        for rid in seqs:
            proposer.release(rid)
    steps.run, platform.copy_to_host_async = run, copy
    return {**{name: statistics.median(v) * 1e6 for name, v in phases.items()}, "torch ops": ops}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args()
    torch.set_num_threads(1)
    proposer = build(Path(tempfile.mkdtemp(prefix="draft-round-")), args.k, args.batch)
    for accepted in ("one", "all"):
        result = measure(proposer, args.k, args.batch, accepted, args.rounds)
        parts = [f"{name} {value:.0f}" + ("" if name == "torch ops" else " us") for name, value in result.items()]
        print(f"batch {args.batch} k={args.k} after {accepted} accepted: " + ", ".join(parts))


if __name__ == "__main__":
    main()
