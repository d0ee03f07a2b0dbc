"""Where the first token of the quick start's model goes: importing Pagoda, building the engine (loading the
GGUF, the KV cache), and the first generate call. Prints one JSON line (seconds)."""

from __future__ import annotations

import json
import time

PROMPT = "The three primary colors are"


def main() -> None:
    start = time.perf_counter()
    from pagoda import LLM, SamplingParams

    imported = time.perf_counter()
    llm = LLM()
    built = time.perf_counter()
    llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    first = time.perf_counter()
    llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)
    again = time.perf_counter()
    print(json.dumps({"import_s": imported - start, "build_s": built - imported, "first_token_s": first - built,
                      "warm_first_token_s": again - first, "total_s": first - start}), flush=True)


if __name__ == "__main__":
    main()
