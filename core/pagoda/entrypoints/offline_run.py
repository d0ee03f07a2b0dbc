"""The request loop of the offline ``LLM`` calls (``generate``, ``beam_search``, ``embed``, ``score``, ...)."""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from pagoda.engine.engine import LLMEngine


def run_requests(engine: "LLMEngine", adds: Sequence[Callable[[str], object]], use_tqdm: bool, desc: str,
                 tokens: Callable[[Any], int] | None = None) -> list:
    """Queue one request per ``add`` (each called with a fresh request id), step the engine until
    all are finished and return their final outputs in order. On an error or Ctrl-C the requests
    not finished yet are aborted. ``tokens`` (of a finished output) puts a tokens/s rate on the bar,
    which is updated once per step."""
    with _older_objects_frozen():
        return _run(engine, adds, use_tqdm, desc, tokens)


def _run(engine: "LLMEngine", adds: Sequence[Callable[[str], object]], use_tqdm: bool, desc: str,
         tokens: Callable[[Any], int] | None) -> list:
    request_ids: list[str] = []
    finished: dict[str, Any] = {}
    bar = tqdm(total=len(adds), desc=desc, unit="req", disable=not use_tqdm, dynamic_ncols=True)
    start, counted = time.perf_counter(), 0
    try:
        for add in adds:
            request_ids.append(engine.next_request_id())
            add(request_ids[-1])
        while engine.has_unfinished_requests():
            done = [output for output in engine.step() if output.finished]
            finished.update((output.request_id, output) for output in done)
            if done and use_tqdm:
                bar.update(len(done))
                if tokens is not None:
                    counted += sum(map(tokens, done))
                    bar.set_postfix_str(f"{counted / (time.perf_counter() - start):.1f} tok/s", refresh=False)
    except BaseException:
        engine.abort([r for r in request_ids if r not in finished])
        raise
    finally:
        bar.close()
    return [finished[r] for r in request_ids]


@contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """Keep the objects alive before the call (modules, the model, the prompts) out of the garbage
    collector's passes during it: a call queues thousands of requests, and each full pass would
    walk the whole heap (on 5,000 embeddings: 15% of the host time). A heap someone else froze
    (the API server) is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
