"""vLLM's side of the vision-language workload (part `vlm`), run in vLLM's environment (no Pagoda there).

Measures what benchmarks/multimodal_throughput.py measures, the same way and under the same result keys, on the
same model folder (its config, image processor and synthetic tokenizer, `multimodal_throughput.model_dir`): the
same requests (`multimodal_throughput.image_requests`: random words, the family's image placeholder, one random
image each, seed 0) through `LLM.generate` with `multi_modal_data`, greedy, EOS ignored; before them the same
warm-up (WARMUP other requests, seed 1, WARMUP_TOKENS tokens each). The time includes the front end's image
processing, as on Pagoda's side. One image a prompt and no video (`limit_mm_per_prompt`), as the workload sends.

    python vllm_vlm.py --model DIR --num-prompts 500 --input-len 64 --image-size 448 --output-len 128 \
        --result-file out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: multimodal_throughput (no Pagoda import)

from multimodal_throughput import WARMUP, WARMUP_TOKENS, image_requests  # noqa: E402
from vllm_offline import engine_kwargs, scheduler_limits, write  # noqa: E402
from workloads import LIMITS  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="folder multimodal_throughput.model_dir wrote (dummy weights)")
    p.add_argument("--num-prompts", type=int, default=500)
    p.add_argument("--input-len", type=int, default=64, help="random words beside the image")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--image-size", type=int, default=448, help="side of each square image, in pixels")
    p.add_argument("--limits", choices=LIMITS, default="matched")
    p.add_argument("--engine-flag", action="append", default=[], help="extra vLLM flag, e.g. --max-model-len=4096")
    p.add_argument("--result-file", required=True)
    return p.parse_args(argv)


def vlm_kwargs(args: argparse.Namespace) -> dict:
    """vllm_offline's arguments (dummy weights, the limits, --engine-flag) with the tokenizer (the processor needs
    it), one image a prompt and no video."""
    kwargs = engine_kwargs(args)
    kwargs["skip_tokenizer_init"] = False
    kwargs.setdefault("limit_mm_per_prompt", {"image": 1, "video": 0})
    return kwargs


def timed_generate(llm, requests, params) -> tuple[float, list]:
    start = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=False)
    return time.perf_counter() - start, outputs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import vllm
    from vllm import LLM, SamplingParams

    kwargs = vlm_kwargs(args)
    start = time.perf_counter()
    llm = LLM(**kwargs)
    startup_s = time.perf_counter() - start
    config = json.loads((Path(args.model) / "config.json").read_text())
    requests = image_requests(config, args.num_prompts, args.input_len, args.image_size, seed=0)
    warmup = image_requests(config, WARMUP, args.input_len, args.image_size, seed=1)
    timed_generate(llm, warmup, SamplingParams(temperature=0, max_tokens=WARMUP_TOKENS, ignore_eos=True))
    seconds, outputs = timed_generate(llm, requests, SamplingParams(temperature=0, max_tokens=args.output_len,
                                                                    ignore_eos=True))
    n, prompt_len = args.num_prompts, len(outputs[0].prompt_token_ids)
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    result = {"engine": "vllm", "version": vllm.__version__, "engine_kwargs": kwargs, "startup_s": startup_s,
              "scheduler": scheduler_limits(llm),
              "workload": f"{n} x ({args.input_len} words + one {args.image_size}x{args.image_size} image) / "
                          f"{args.output_len} out", "prompt_tokens": prompt_len, "output_tokens": out_tokens,
              "seconds": seconds, "requests_per_s": n / seconds, "output_tokens_per_s": out_tokens / seconds,
              "tokens_per_s": (sum(len(o.prompt_token_ids) for o in outputs) + out_tokens) / seconds}
    write(result, args.result_file)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
