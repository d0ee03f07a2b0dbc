"""The built-in guided decoding backend: xgrammar (https://xgrammar.mlc.ai).

Grammars compile once per distinct spec (xgrammar's compiler caches them); a batch's bitmask rows
are filled by one native call of xgrammar's ``BatchGrammarMatcher`` (outside the GIL). With
``max_threads > 1`` that call starts a pool of threads and joins it, every call: for most rows (a
few microseconds each for JSON at a 128k vocabulary) the threads cost more than they save, so a
batch is filled on one thread, and on :func:`fill_threads` threads only after a batch took longer
than ``SLOW_FILL_S`` on one (some grammar states check much of the vocabulary at run time,
milliseconds per row), checking one thread again every ``RECHECK_EVERY`` batches. xgrammar's
default thread count is half of ``std::thread::hardware_concurrency()``: the host's online CPUs,
not the ones this process may use; :func:`fill_threads` counts those.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pagoda.errors import RequestError
from pagoda.guided.schema_compat import json_safe_schema
from pagoda.interfaces.guided import GrammarMatcher, GuidedDecodingBackend

if TYPE_CHECKING:
    from pagoda.sampling_params import GuidedDecodingParams

SLOW_FILL_S = 3e-3  # a batch that took longer on one thread: the next ones use fill_threads() threads
RECHECK_EVERY = 16  # batches filled on threads before one is timed on one thread again


class XgrammarMatcher(GrammarMatcher):
    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher  # xgrammar.GrammarMatcher

    def accept(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(token_id))

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)


class XgrammarBackend(GuidedDecodingBackend):
    description = "xgrammar: JSON schema, any JSON, regex, choice and EBNF grammars"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        super().__init__(tokenizer, vocab_size, stop_token_ids)
        import xgrammar as xgr

        self._xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                  stop_token_ids=stop_token_ids or None)
        self.compiler = xgr.GrammarCompiler(info, max_threads=4)
        self.one_thread = xgr.BatchGrammarMatcher(max_threads=1)  # a plain loop over the rows
        threads = fill_threads()
        self.threaded = xgr.BatchGrammarMatcher(max_threads=threads) if threads > 1 else None
        self._threaded_batches = 0  # batches still to fill on threads before timing one thread again

    @classmethod
    def check(cls) -> str | None:
        try:
            import xgrammar  # noqa: F401
        except ImportError as exc:
            return f"xgrammar is not importable ({exc}); pip install xgrammar"
        return None

    @classmethod
    def validate(cls, params: "GuidedDecodingParams") -> None:
        import xgrammar as xgr

        try:
            _grammar(xgr, params)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise RequestError(f"guided {params.kind} is not valid for xgrammar: {_first_line(exc)}; fix it") from exc

    def new_matcher(self, params: "GuidedDecodingParams") -> GrammarMatcher:
        compiled = self._compile(params)
        return XgrammarMatcher(self._xgr.GrammarMatcher(compiled))

    def fill_bitmasks(self, matchers: list[GrammarMatcher], bitmask: torch.Tensor, rows: list[int]) -> None:
        inner = [m.matcher for m in matchers]  # type: ignore[attr-defined]
        if self._threaded_batches > 0:
            self._threaded_batches -= 1
            self.threaded.batch_fill_next_token_bitmask(inner, bitmask, rows)
            return
        start = time.perf_counter()
        self.one_thread.batch_fill_next_token_bitmask(inner, bitmask, rows)
        if self.threaded is not None and time.perf_counter() - start > SLOW_FILL_S:
            self._threaded_batches = RECHECK_EVERY

    def _compile(self, params: "GuidedDecodingParams") -> Any:
        """Compile from text, never from a ``Grammar`` object: xgrammar 0.2.8 re-parses a Grammar's
        printed form, which turns "ça" into "\\xe7a" and then into U+0E7A."""
        kind, c = params.kind, self.compiler
        if kind == "json":
            return c.compile_json_schema(json.dumps(json_safe_schema(params.json)), any_whitespace=False)
        if kind == "json_object":
            return c.compile_json_schema('{"type": "object"}', any_whitespace=False)
        if kind == "regex":
            return c.compile_regex(params.regex)
        return c.compile_grammar(_choice_ebnf(params.choice) if kind == "choice" else params.grammar)


def fill_threads(limit: int = 8) -> int:
    """Threads for filling a slow batch's bitmask rows: half the CPUs this process may run on (the
    other half keeps the engine loop and torch going), at most ``limit``."""
    return max(1, min(limit, usable_cpus() // 2))


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by a cgroup v2 CPU quota if one is set."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cpus
    return cpus if quota == "max" else max(1, min(cpus, -(-int(quota) // int(period))))


def _grammar(xgr: Any, params: "GuidedDecodingParams") -> Any:
    """The xgrammar ``Grammar`` of ``params`` (raises on a bad schema, regex or grammar)."""
    kind = params.kind
    if kind == "json":
        return xgr.Grammar.from_json_schema(json.dumps(json_safe_schema(params.json)), any_whitespace=False)
    if kind == "json_object":
        return xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=False)
    if kind == "regex":
        return xgr.Grammar.from_regex(params.regex)
    if kind == "choice":
        return xgr.Grammar.from_ebnf(_choice_ebnf(params.choice))
    return xgr.Grammar.from_ebnf(params.grammar)


def _choice_ebnf(choice: list[str]) -> str:
    """``root ::= "a" | "b"`` (JSON string escapes are EBNF string escapes)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choice)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return re.sub(r"^\[[^\]]*\] \S+: ", "", line)  # drop xgrammar's "[time] file.cc:line: " prefix
