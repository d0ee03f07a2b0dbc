"""Shared pieces of the offline benchmarks: engine setup, random prompts, device rates, results."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

import torch

from pagoda.messages import StepStats
from pagoda.entrypoints.engine_args import DEFAULT_MODEL_HELP, add_engine_args, engine_config
from pagoda.plugins import get_plugin_manager


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help=DEFAULT_MODEL_HELP + "; with --load-format dummy a folder holding a config.json")
    p.add_argument("--result-file", help="write the results as JSON here")
    add_engine_args(p, get_plugin_manager())


def build_llm(args: argparse.Namespace):
    """An LLM without a tokenizer (benchmarks feed random token ids)."""
    from pagoda import LLM

    config = engine_config(args, args.model)
    config.skip_tokenizer_init = True
    return LLM(**vars(config))


@contextlib.contextmanager
def folder_variable(variable, wanted: bool, prefix: str) -> Iterator[None]:
    """While the block runs, the environment variable ``variable`` (a ``pagoda.envs`` entry) names a folder: as
    the user set it, or, when ``wanted`` and unset, a temporary one, removed and the variable unset after."""
    if not wanted or variable.get():
        yield
        return
    folder = tempfile.mkdtemp(prefix=prefix)
    os.environ[variable.name] = folder
    try:
        yield
    finally:
        os.environ.pop(variable.name, None)
        shutil.rmtree(folder, ignore_errors=True)


def random_prompts(num: int, length: int, vocab_size: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (num, length), generator=g).tolist()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_rates(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """Measured matmul rate (FLOP/s) and device copy bandwidth (bytes read + written per second)."""
    n = 8192 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    copy_src = torch.empty(1 << (30 if device.type == "cuda" else 26), dtype=torch.uint8, device=device)
    copy_dst = torch.empty_like(copy_src)
    rates = {}
    for name, fn, work in (
        ("matmul_flops", lambda: a @ a, 2 * n**3),
        ("copy_bytes", lambda: copy_dst.copy_(copy_src), 2 * copy_src.numel()),
    ):
        fn(), synchronize(device)
        start, reps = time.perf_counter(), 10
        for _ in range(reps):
            fn()
        synchronize(device)
        rates[name] = work * reps / (time.perf_counter() - start)
    return rates


def streamed_weights(model: torch.nn.Module) -> tuple[int, int]:
    """(bytes, count) of the weights a forward reads whole: every parameter but untied input
    embedding tables, of which a step gathers only its tokens' rows (these are not matmul FLOPs
    either). A table the LM head shares is counted, once."""
    from pagoda.layers.embedding import LMHead, VocabEmbedding

    head = {id(m.weight) for m in model.modules() if isinstance(m, LMHead)}
    gathered = {id(m.weight) for m in model.modules() if isinstance(m, VocabEmbedding)} - head
    params = [p for p in model.parameters() if id(p) not in gathered]
    return sum(p.numel() * p.element_size() for p in params), sum(p.numel() for p in params)


def kv_bytes_per_token(parts) -> int:
    """KV cache bytes one token takes over this rank's layers, whatever the backend's layout (K/V pairs, or
    multi-head latent attention's one latent row)."""
    tokens = parts.kv_cache.num_blocks * parts.config.block_size
    return sum(c.numel() * c.element_size() for c in parts.kv_caches) // tokens


def kv_cache_summary(parts) -> dict[str, int]:
    """The KV cache's capacity (this rank's): blocks, tokens, bytes per token; for multi-head latent attention
    also the tokens the same bytes would hold with each head's keys and values cached (an MHA layout)."""
    per_token = kv_bytes_per_token(parts)
    tokens = parts.kv_cache.num_blocks * parts.config.block_size
    out = {"blocks": parts.kv_cache.num_blocks, "tokens": tokens, "bytes_per_token": per_token}
    spec, cfg = parts.attention.spec, parts.hf_config
    if spec.mla is not None:
        per_head = int(cfg.qk_nope_head_dim) + int(cfg.qk_rope_head_dim) + int(cfg.v_head_dim)  # a key and a value
        mha = len(parts.kv_caches) * spec.num_heads * per_head * parts.kv_caches[0].element_size()
        out.update(mha_bytes_per_token=mha, mha_tokens=tokens * per_token // mha)
    return out


def active_params(model: torch.nn.Module, num_params: int, hf_config) -> int:
    """Parameters one token multiplies: an MoE layer counts ``num_experts_per_tok`` of its experts."""
    from pagoda.layers.moe import FusedMoE

    top_k = getattr(hf_config, "num_experts_per_tok", None)
    for m in model.modules():
        if isinstance(m, FusedMoE) and top_k:
            num_params -= int((m.w13_weight.numel() + m.w2_weight.numel()) * (1 - top_k / m.num_experts))
    return num_params


SPEC_COUNTERS = ("spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_steps",
                 "spec_num_suspended_steps")


def spec_decode_summary(llm, before=None) -> dict | None:
    """Acceptance of the drafts verified since ``before`` (an earlier ``llm.engine.stats``), or
    None when the engine does not speculate. Mean acceptance length = tokens emitted per round;
    ``suspended_steps`` of ``steps`` ran without drafts by the goodput controller's verdict, whose
    latest measured ratio (tokens/s speculating over suspended) is ``goodput_ratio``."""
    after = llm.engine.stats
    if not after.spec_accepted_per_position:
        return None
    if before is None or not before.spec_accepted_per_position:  # since start
        before = StepStats(spec_accepted_per_position=[0] * len(after.spec_accepted_per_position))
    rounds, drafted, accepted, steps, suspended = (getattr(after, name) - getattr(before, name) for name in SPEC_COUNTERS)
    per_position = [a - b for a, b in zip(after.spec_accepted_per_position, before.spec_accepted_per_position)]
    return {"rounds": rounds, "draft_tokens": drafted, "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_acceptance_length": 1 + accepted / rounds if rounds else 0.0,
            "acceptance_per_position": [n / rounds if rounds else 0.0 for n in per_position],
            "steps": steps, "suspended_steps": suspended, "goodput_ratio": after.spec_goodput_ratio}


def emit(result: dict, result_file: str | None) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    if result_file:
        Path(result_file).parent.mkdir(parents=True, exist_ok=True)
        Path(result_file).write_text(text + "\n")
