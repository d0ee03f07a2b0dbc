"""Run by test_tensor_parallel.py (and test_pipeline_parallel.py) in a process of its own: TP=2 on the default
platform (or the sizes given as NAME=VALUE arguments), the last rank killed after a first request. Prints
'raised after <s> s: <message>' if the engine raises WorkerFailedError, then how many worker processes are left
after shutdown; a driver stuck in a device collective instead exits 1 after logging the same reason (the
watcher's grace exit)."""

import os
import signal
import sys
import time

from pagoda import LLM, SamplingParams
from pagoda.executor.workers import WorkerFailedError


def main(path: str, sizes: dict[str, int]) -> None:
    llm = LLM(model=path, dtype="float32", block_size=8, gpu_memory_utilization=0.3, **sizes)
    pids = llm.engine.core.executor.worker_pids
    llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)  # works
    os.kill(pids[-1], signal.SIGKILL)
    killed = time.monotonic()
    try:
        for _ in range(50):  # the first call may still see the rank alive; it fails within steps
            llm.generate([[4, 5, 6]], SamplingParams(temperature=0, max_tokens=16), use_tqdm=False)
            time.sleep(0.1)
    except WorkerFailedError as exc:
        print(f"raised after {time.monotonic() - killed:.1f} s: {exc}", flush=True)
    finally:
        llm.shutdown()
    print(f"workers left: {sum(os.path.exists(f'/proc/{pid}') for pid in pids)}", flush=True)


if __name__ == "__main__":
    sizes = dict(arg.split("=") for arg in sys.argv[2:]) or {"tensor_parallel_size": "2"}
    main(sys.argv[1], {name: int(value) for name, value in sizes.items()})
