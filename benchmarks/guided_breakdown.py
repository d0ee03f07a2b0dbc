"""Where a guided step's grammar time goes: the per-step cost of ``GuidedSampling.mask`` by phase.

No model: ``--batch-size`` requests share the JSON schema of ``benchmarks/guided_decoding.py``;
each step masks random logits ``[batch, vocab]`` on the device, takes the argmax of the masked row
as the next token (so the grammars walk through realistic states: strings, numbers, keys) and
times the phases of :meth:`pagoda.guided.runtime.GuidedSampling.mask`:

- ``start``: the engine's thread advances the matchers and hands the fill to the worker thread,
- ``advance``: each matcher accepts the token its request sampled last step,
- ``fill``: the backend fills the batch's bitmask rows on the CPU (on the worker thread),
- ``job_wait``: how long the engine's thread blocked on the fill before applying the mask,
- ``apply``: the bitmask's copy to the device and the masking op (host time to queue it;
  ``apply_device_ms`` is its device time on CUDA, from events),
- ``mask``: the whole call, host time.

``--host-work-ms X``: between starting a step's fill and applying its mask, the engine's thread
does X ms of pure-Python work (as the engine core schedules and prepares the next step meanwhile):
``job_wait`` then shows what of the fill that work did not hide, ``mask`` the whole.

``--fill``: how the xgrammar backend fills rows: ``auto`` (the engine's: one thread, xgrammar's
threads after a batch took over 3 ms on one), ``one`` (always one thread), ``xgrammar:N`` (always
``BatchGrammarMatcher(max_threads=N)``, which starts N threads per call; N=``auto``: xgrammar's
default; the engine's path before, with N = ``fill_threads()``).

``--apply``: ``auto`` (the engine's choice: the Triton kernel on a GPU), ``caps`` (the torch
table path), ``unpack`` (the unpack-to-bool + masked_fill the engine used before). ``--legacy``:
the whole path from two rounds before (unpack, a pageable host bitmask, xgrammar's default
thread count, no worker thread).

CPU (Llama 3's 128k tokenizer, see scripts/device/llama3_tokenizer.sh):
    python benchmarks/guided_breakdown.py --tokenizer /tmp/llama3-tokenizer --batch-size 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from guided_decoding import SCHEMA  # benchmarks/ is on sys.path when run as a script

APPLY_MODES = ("auto", "caps", "unpack")


def unpack_apply(logits: torch.Tensor, bitmask: torch.Tensor, rows: torch.Tensor | None = None) -> None:
    """The masking the engine used before: unpack the words to a bool mask, masked_fill, per-row index."""
    num_rows = logits.shape[0] if rows is None else rows.shape[0]
    words = bitmask[:num_rows].to(logits.device, non_blocking=True)
    bits = torch.arange(32, dtype=torch.int32, device=logits.device)  # [32]
    allowed = ((words[:, :, None] >> bits) & 1).reshape(num_rows, -1)[:, :logits.shape[1]].bool()  # [M, V]
    index = (torch.arange(num_rows) if rows is None else rows).to(logits.device, non_blocking=True)
    logits[index] = logits[index].masked_fill_(~allowed, float("-inf"))


def select_fill(guided: Any, mode: str) -> None:
    """Make the xgrammar backends of ``guided`` fill rows the ``mode`` way (see the module docstring)."""
    kind, _, threads = mode.partition(":")
    for backend in guided.backends.values():
        if kind == "xgrammar":
            backend.fill_bitmasks = xgrammar_fill(int(threads) if threads.isdigit() else "auto")
        elif kind == "one":
            backend.threaded = None


def xgrammar_fill(threads: int | str) -> Callable:
    """A ``fill_bitmasks`` through xgrammar's own batch fill with ``threads`` (it starts them on each call)."""
    import xgrammar as xgr

    batch = xgr.BatchGrammarMatcher(max_threads=threads)

    def fill(matchers: list, bitmask: torch.Tensor, rows: list[int]) -> None:
        batch.batch_fill_next_token_bitmask([m.matcher for m in matchers], bitmask, rows)

    return fill


def select_apply(mode: str) -> None:
    """Make GuidedSampling apply bitmasks the ``mode`` way (see the module docstring)."""
    import pagoda.guided.bitmask as bitmask
    import pagoda.guided.runtime as runtime

    if mode == "caps":
        bitmask._use_triton = lambda logits: False
    elif mode == "unpack":
        runtime.apply_bitmask = unpack_apply


class PhaseTimer:
    """Host milliseconds per call of wrapped callables by phase, and device milliseconds (CUDA
    events) for the phases wrapped with ``device=True``; :meth:`restore` unwraps them all."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ms: dict[str, list[float]] = {}
        self.events: dict[str, list[tuple[Any, Any]]] = {}  # phase -> CUDA (start, end) per call
        self._originals: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, attr: str, value: Any) -> None:
        """``owner.attr = value`` until :meth:`restore`."""
        self._originals.append((owner, attr, owner.__dict__.get(attr)))
        setattr(owner, attr, value)

    def wrap(self, owner: Any, attr: str, phase: str, device: bool = False) -> None:
        inner: Callable = getattr(owner, attr)
        on_device = device and self.device.type == "cuda"

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            events = _start_events() if on_device else None
            try:
                return inner(*args, **kwargs)
            finally:
                if events is not None:
                    events[1].record()
                    self.events.setdefault(phase, []).append(events)
                self.ms.setdefault(phase, []).append(1e3 * (time.perf_counter() - start))

        self.patch(owner, attr, timed)

    def restore(self) -> None:
        for owner, attr, original in reversed(self._originals):
            if original is None:
                delattr(owner, attr)  # it was a class attribute: the instance attribute goes
            else:
                setattr(owner, attr, original)
        self._originals.clear()

    def summary(self) -> dict[str, float]:
        """Median (and mean) ms per call of each phase (host), and of each device phase (``*_device_ms``)."""
        out: dict[str, float] = {}
        for phase, values in self.ms.items():
            out[f"{phase}_ms"] = round(statistics.median(values), 3)
            out[f"{phase}_mean_ms"] = round(statistics.mean(values), 3)
            out[f"{phase}_calls"] = len(values)
        if self.events:
            torch.cuda.synchronize()
        for phase, pairs in self.events.items():
            out[f"{phase}_device_ms"] = round(statistics.median(s.elapsed_time(e) for s, e in pairs), 3)
        return out


def _start_events() -> tuple[Any, Any]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    return start, end


def make_requests(batch: int, guided_params: Any) -> list[Any]:
    from pagoda.engine.request import Request
    from pagoda.sampling_params import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=100_000, guided_decoding=guided_params)
    return [Request(f"r{i}", [1, 2, 3], params) for i in range(batch)]


def instrument(guided: Any, timer: PhaseTimer) -> None:
    """Wrap the phases of ``guided`` (a GuidedSampling whose backend exists) with the timer."""
    from pagoda.guided.runtime import GrammarJob

    timer.wrap(guided, "start", "start")
    timer.wrap(guided, "_advance_all", "advance")
    for backend in guided.backends.values():
        timer.wrap(backend, "fill_bitmasks", "fill")
    timer.wrap(GrammarJob, "wait", "job_wait")
    timer.wrap(guided, "_apply", "apply", device=True)
    timer.wrap(guided, "mask", "mask")


def run_steps(guided: Any, requests: list[Any], logits_pool: list[torch.Tensor], steps: int) -> None:
    """``steps`` masked steps; each request appends the argmax of its masked row."""
    for step in range(steps):
        logits = logits_pool[step % len(logits_pool)].clone()
        guided.mask(logits, requests)
        tokens = logits.argmax(dim=1).tolist()
        for req, token in zip(requests, tokens):
            req.token_ids.append(token)


def mask_around_python_work(guided: Any, work_ms: float) -> Callable:
    """A ``guided.mask`` as the engine runs it: start the fill, work ``work_ms`` in Python, apply."""
    def mask(logits: torch.Tensor, requests: list[Any]) -> None:
        job = guided.start(requests)
        python_work(work_ms)
        guided.apply(logits, job)

    return mask


def python_work(ms: float) -> None:
    """Busy the interpreter for ``ms`` milliseconds with dict and list work (no native call that frees the GIL)."""
    end = time.perf_counter() + ms / 1e3
    scratch: dict[int, list[int]] = {}
    while time.perf_counter() < end:
        for i in range(64):
            scratch[i] = [i, i + 1, i + 2]


def build_guided(args: argparse.Namespace, tokenizer: Any, requests: list[Any]) -> Any:
    """A GuidedSampling over ``tokenizer`` with its backend built, on the path ``args`` asks for."""
    from pagoda.guided.runtime import GuidedSampling

    select_apply("unpack" if args.legacy else args.apply)
    pinned = args.device == "cuda" and not args.legacy
    guided = GuidedSampling(tokenizer, args.vocab_size, [tokenizer.eos_token_id], worker=not args.legacy,
                            host_buffer=lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=pinned))
    guided.mask(torch.zeros(len(requests), args.vocab_size, device=args.device), requests)  # builds the backend
    select_fill(guided, "xgrammar:auto" if args.legacy else args.fill)
    if args.host_work_ms:
        guided.mask = mask_around_python_work(guided, args.host_work_ms)
    return guided


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from pagoda.guided.params import GuidedDecodingParams
    from pagoda.guided.xgrammar_backend import fill_threads, usable_cpus

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    args.vocab_size = args.vocab_size or len(tokenizer)
    requests = make_requests(args.batch_size, GuidedDecodingParams(json=SCHEMA))
    guided = build_guided(args, tokenizer, requests)
    gen = torch.Generator(device=args.device).manual_seed(0)
    pool = [torch.randn(args.batch_size, args.vocab_size, generator=gen, device=args.device) for _ in range(4)]
    run_steps(guided, requests, pool, args.warmup)  # compiles the grammar, warms the allocator
    timer = PhaseTimer(torch.device(args.device))
    instrument(guided, timer)
    run_steps(guided, requests, pool, args.steps)
    return {"batch_size": args.batch_size, "vocab_size": args.vocab_size, "device": args.device,
            "legacy": args.legacy, "apply": "unpack" if args.legacy else args.apply, "steps": args.steps,
            "fill": "xgrammar:auto" if args.legacy else args.fill, "host_work_ms": args.host_work_ms,
            "fill_threads": fill_threads(), "usable_cpus": usable_cpus(), "os_cpu_count": os.cpu_count(),
            **timer.summary(), "sample_output": tokenizer.decode(requests[0].output_token_ids[:60])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="a local Hugging Face tokenizer folder")
    parser.add_argument("--vocab-size", type=int, default=128256, help="logits width (0: the tokenizer's length)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--apply", choices=APPLY_MODES, default="auto", help="how the bitmask masks the logits")
    parser.add_argument("--fill", default="auto", help="auto, one or xgrammar:N (see above)")
    parser.add_argument("--host-work-ms", type=float, default=0.0,
                        help="Python work on the engine's thread between a job's start and its mask's apply")
    parser.add_argument("--legacy", action="store_true", help="the grammar path from before the bitmask work")
    parser.add_argument("--result-file", help="write the results as JSON here")
    args = parser.parse_args()
    text = json.dumps(measure(args), indent=2)
    print(text)
    if args.result_file:
        Path(args.result_file).write_text(text + "\n")


if __name__ == "__main__":
    main()
