"""Offline throughput of a vision-language model on prompts with one image each (docs/multimodal.md).

``--num-prompts`` requests, each ``--input-len`` random words and one random RGB image of ``--image-size``
pixels square, ``--output-len`` tokens (greedy, EOS ignored). Every image differs, so every request runs
the vision encoder; the time includes the front end's image processing, as users see it. MODEL is a
config folder (config.json and the image processor's preprocessor_config.json, e.g.
benchmarks/configs/qwen2.5-vl-7b) for ``--load-format dummy``: a copy gets a synthetic tokenizer (word
``t<i>`` is token i; the model's image tokens are special tokens at their ids, under the names the family's
HF processor looks for). The requests (``image_requests``) and the model folder (``model_dir``) need no Pagoda:
vLLM's side of ``benchmarks/peers`` (part ``vlm``, ``vllm_vlm.py``) builds the same requests from them.

GPU (the device suite ``multimodal``, part ``bench``):
    python benchmarks/multimodal_throughput.py benchmarks/configs/qwen2.5-vl-7b --load-format dummy \\
        --max-model-len 4096 --num-prompts 500 --image-size 448 --input-len 64 --output-len 128
CPU smoke run: tests/benchmarks/test_multimodal_bench.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

# config keys naming the token ids of image markers (LLaVA, Qwen2.5-VL, Gemma 3); each becomes a special token
SPECIAL_KEYS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                "vision_end_token_id", "boi_token_index", "eoi_token_index")
# the names each family's HF processor (and so vLLM) gives those tokens; other families: "<key>"
TOKEN_NAMES = {
    "qwen2_5_vl": {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                   "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"},
    "llava": {"image_token_id": "<image>", "image_token_index": "<image>"},
    "gemma3": {"image_token_index": "<image_soft_token>", "boi_token_index": "<start_of_image>",
               "eoi_token_index": "<end_of_image>"},
}
FILES = ("config.json", "preprocessor_config.json")
WARMUP = 8  # requests run before the timed ones (other words and images)
WARMUP_TOKENS = 4  # tokens each warm-up request generates


def special_ids(config: dict) -> dict[str, int]:
    """Token name -> id of every image marker the config names."""
    names = TOKEN_NAMES.get(config.get("model_type"), {})
    found = {key: config.get(key, (config.get("text_config") or {}).get(key)) for key in SPECIAL_KEYS}
    return {names.get(key, f"<{key}>"): int(value) for key, value in found.items() if isinstance(value, int)}


def placeholder(config: dict) -> str:
    """What a prompt holds for one image, as the family's chat template writes it: Qwen2.5-VL's image token
    between its vision markers, Gemma 3's begin-of-image token, else the image token."""
    names = {v: k for k, v in special_ids(config).items()}
    get = lambda key: names[config.get(key, (config.get("text_config") or {}).get(key))]  # noqa: E731
    if config.get("vision_start_token_id") is not None:
        return get("vision_start_token_id") + get("image_token_id") + get("vision_end_token_id")
    if config.get("boi_token_index") is not None:
        return get("boi_token_index")
    return get("image_token_id" if config.get("image_token_id") is not None else "image_token_index")


def image_requests(config: dict, count: int, input_len: int, image_size: int, seed: int) -> list[dict]:
    """``count`` requests: ``input_len`` random plain words, the image placeholder, one random RGB image each."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    words = min(special_ids(config).values())  # t0 .. t<words - 1> are plain words
    marker = placeholder(config)
    out = []
    for _ in range(count):
        text = " ".join(f"t{i}" for i in rng.integers(0, words, input_len))
        image = Image.fromarray(rng.integers(0, 255, (image_size, image_size, 3), dtype=np.uint8))
        out.append({"prompt": f"{text} {marker}", "multi_modal_data": {"image": image}})
    return out


def model_dir(config_dir: Path, dest: Path) -> Path:
    """Copy the config files into ``dest`` and write the synthetic tokenizer there."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = json.loads((config_dir / "config.json").read_text())
    vocab_size = int(config.get("vocab_size") or config["text_config"]["vocab_size"])
    specials = special_ids(config)
    vocab = {f"t{i}": i for i in range(vocab_size)}
    for name, token_id in specials.items():
        vocab.pop(f"t{token_id}")
        vocab[name] = token_id
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(specials))
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(config_dir / name, dest / name)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(dest)
    return dest


def timed_generate(llm, requests, params) -> float:
    from pagoda.bench.common import synchronize

    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start = time.perf_counter()
    llm.generate(requests, params, use_tqdm=False)
    synchronize(device)
    return time.perf_counter() - start


def run(args, folder: Path) -> dict:
    from pagoda import LLM, SamplingParams
    from pagoda.entrypoints.engine_args import engine_config

    config = engine_config(args, str(folder))
    start = time.perf_counter()
    llm = LLM(**vars(config))
    startup_s = time.perf_counter() - start
    hf_config = json.loads((folder / "config.json").read_text())
    requests = image_requests(hf_config, args.num_prompts, args.input_len, args.image_size, seed=0)
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    warmup = image_requests(hf_config, WARMUP, args.input_len, args.image_size, seed=1)  # no cache hits after it
    timed_generate(llm, warmup, SamplingParams(temperature=0, max_tokens=WARMUP_TOKENS, ignore_eos=True))
    prompt_len = len(llm.engine.process_images(requests[0]["prompt"], [requests[0]["multi_modal_data"]["image"]])
                     .prompt_token_ids)
    seconds = timed_generate(llm, requests, params)
    n = args.num_prompts
    return {"workload": f"{n} x ({args.input_len} words + one {args.image_size}x{args.image_size} image) / "
                        f"{args.output_len} out", "model": args.model, "startup_s": round(startup_s, 1),
            "prompt_tokens": prompt_len, "seconds": seconds, "requests_per_s": round(n / seconds, 3),
            "output_tokens_per_s": round(n * args.output_len / seconds, 1),
            "tokens_per_s": round(n * (prompt_len + args.output_len) / seconds, 1)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from pagoda.bench.common import add_common_args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=500)
    parser.add_argument("--input-len", type=int, default=64, help="random words beside the image")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=448, help="side of each square image, in pixels")
    parser.add_argument("--prepared", action="store_true",
                        help="MODEL already holds the synthetic tokenizer (a folder model_dir wrote): use it as it is")
    add_common_args(parser)
    return parser.parse_args(argv)


def main() -> None:
    from pagoda.bench.common import emit

    args = parse_args()
    if args.prepared:
        emit(run(args, Path(args.model)), args.result_file)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_dir(Path(args.model), Path(tmp) / "model")
        emit(run(args, folder), args.result_file)


if __name__ == "__main__":
    main()
