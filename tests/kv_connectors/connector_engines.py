"""Helpers of the KV connector tests: engines on a device cache too small for a shared prefix, and the tokens
each step computed per request."""

from __future__ import annotations

from collections import defaultdict

import torch

from pagoda import LLM, SamplingParams

BLOCK = 8
# bytes of one 8-token block of the tiny Llama: 2 layers x K and V x 8 tokens x 2 KV heads x 16 floats x 4 bytes
BLOCK_BYTES = 2 * 2 * BLOCK * 2 * 16 * 4
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def prompts(seed: int, count: int, length: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 380, (count, length), generator=g).tolist()


def engine(path: str, blocks: int = 12, dtype: str = "float32", **kwargs) -> LLM:
    """An engine whose device cache holds ``blocks`` blocks of 8 tokens (float32; bfloat16 half the bytes, FP8 a
    quarter; each tensor-parallel rank holds its share of the KV heads)."""
    divisor = 4 if kwargs.get("kv_cache_dtype", "auto") != "auto" else 2 if dtype == "bfloat16" else 1
    block_bytes = BLOCK_BYTES // divisor // kwargs.get("tensor_parallel_size", 1)
    return LLM(model=path, dtype=dtype, block_size=BLOCK, kv_cache_memory=blocks * block_bytes, max_num_seqs=4,
               skip_tokenizer_init=True, **kwargs)


class StepLog:
    """Records, for each step the engine schedules, (request id, first token, tokens) of each request in it."""

    def __init__(self, llm: LLM) -> None:
        self.steps: list[list[tuple[str, int, int]]] = []
        scheduler = llm.engine.core.scheduler
        schedule = scheduler.schedule

        def recording():
            out = schedule()
            self.steps.append([(r.request_id, r.num_computed_tokens, n) for r, n in zip(out.requests, out.num_tokens)])
            return out

        scheduler.schedule = recording

    def computed(self) -> dict[str, list[tuple[int, int]]]:
        """request id -> [(first token, tokens)] of each step that computed it."""
        per_request = defaultdict(list)
        for step in self.steps:
            for request_id, start, n in step:
                per_request[request_id].append((start, n))
        return dict(per_request)


def generate(llm: LLM, prompt: list[int]):
    """One request's output (its id is the LLM's own)."""
    return llm.generate([prompt], GREEDY, use_tqdm=False)[0]


def evicted_prefix_run(path: str, **kwargs):
    """Prompt A (a 64-token prefix + 5), three others that evict A's blocks from the device cache, then prompt B
    (the same prefix + 5 others): the outputs, B's scheduled (first token, count) per step, the engine's stats."""
    prefix = prompts(1, 1, 64)[0]
    first, second = (prefix + tail for tail in prompts(2, 2, 5))
    llm = engine(path, blocks=12, **kwargs)
    log = StepLog(llm)
    try:
        outputs = [generate(llm, first)] + [generate(llm, p) for p in prompts(3, 3, 60)] + [generate(llm, second)]
        stats = llm.engine.core.snapshot_stats()
    finally:
        llm.shutdown()
    return outputs, log.computed()[outputs[-1].request_id], stats
