"""Run by test_tensor_parallel.py's GPU tests in a process of its own: torch sets symmetric memory up
once per process (symm_all_reduce.same_history), so each such test starts its TP=2 engines fresh.
argv[1]: JSON {"model", "prompts", "max_tokens", "engines": [LLM keyword arguments, ...]} (an engine's
"env" entry, if any, is set in the environment before it starts); the engines run one after another, each printing one JSON line: its greedy token ids, its fast all-reduce's type
name (None: NCCL), whether decode and verify steps were captured, and the accepted draft tokens."""

import json
import os
import sys

from pagoda import LLM, SamplingParams
from pagoda.spec_decode.step import SpecDecodeStep


def main() -> None:
    spec = json.loads(sys.argv[1])
    params = SamplingParams(temperature=0, max_tokens=spec["max_tokens"])
    for kwargs in spec["engines"]:
        os.environ.update(kwargs.pop("env", {}))  # read by this process and inherited by its workers
        llm = LLM(model=spec["model"], dtype="float32", block_size=16, max_num_seqs=16,
                  gpu_memory_utilization=0.3, **kwargs)
        try:
            core = llm.engine.core
            tokens = [o.outputs[0].token_ids for o in llm.generate(spec["prompts"], params, use_tqdm=False)]
            fast = core.executor.workers.tp.fast
            print(json.dumps({
                "tokens": tokens, "fast": None if fast is None else type(fast).__name__,
                "graphs": core.runner.graphs is not None, "verify_graphs": getattr(core.runner.feature(SpecDecodeStep), "step_graphs", None) is not None,
                "accepted": 0 if core.speculator is None else core.speculator.num_accepted,
            }), flush=True)
        finally:
            llm.shutdown()


if __name__ == "__main__":
    main()
