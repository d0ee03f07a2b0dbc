"""Prompts both engines receive: random token ids (offline) and the same ids as 'words' (served).

Imports only torch, so that vLLM's process (which has no Pagoda) can use it too. The offline prompts
are exactly `pagoda.bench.common.random_prompts` (same generator, same seed), so `pagoda bench
throughput` and vllm_offline.py feed identical token ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def random_token_prompts(num: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (num, length), generator=g).tolist()


def ids_to_text(ids: list[int]) -> str:
    """The synthetic word-level tokenizer (model_dir.py) maps 't<id>' to id, words split on spaces."""
    return " ".join(f"t{i}" for i in ids)


def prefix_prompts(num: int, num_prefixes: int, prefix_len: int, suffix_len: int, vocab_size: int,
                   seed: int) -> list[list[int]]:
    """num prompts; prompt i = shared prefix (i mod num_prefixes) + suffix_len unique random ids."""
    prefixes = random_token_prompts(num_prefixes, prefix_len, vocab_size, seed)
    suffixes = random_token_prompts(num, suffix_len, vocab_size, seed + 1)
    return [prefixes[i % num_prefixes] + suffixes[i] for i in range(num)]


def write_prompts_file(path: Path, prompts: list[list[int]], output_len: int) -> Path:
    """JSONL for `pagoda bench serve --prompts-file`: {"prompt": text, "output_len": n} per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"prompt": ids_to_text(p), "output_len": output_len}) for p in prompts)
    path.write_text("\n".join(lines) + "\n")
    return path


def mixed_prompts(lengths: list[tuple[int, int]], vocab_size: int, seed: int) -> list[tuple[list[int], int]]:
    """(prompt ids, output_len) for each (input_len, output_len): random ids, one generator for all."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab_size, (n,), generator=g).tolist(), out) for n, out in lengths]


def write_mixed_prompts_file(path: Path, prompts: list[tuple[list[int], int]]) -> Path:
    """JSONL for `pagoda bench serve --prompts-file`, each line with its own output_len."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": ids_to_text(ids), "output_len": out}) + "\n" for ids, out in prompts))
    return path


def write_sharegpt_file(path: Path, prompts: list[tuple[list[int], int]]) -> Path:
    """The same requests as a ShareGPT-format JSON for `vllm bench serve --dataset-name sharegpt`: it takes a
    conversation's first turn as the prompt and the second turn's token count as the output length, so the
    second turn is output_len words of the synthetic tokenizer (one token each)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{"id": str(i), "conversations": [{"from": "human", "value": ids_to_text(ids)},
                                                {"from": "gpt", "value": " ".join(["t1"] * out)}]}
               for i, (ids, out) in enumerate(prompts)]
    path.write_text(json.dumps(entries) + "\n")
    return path
