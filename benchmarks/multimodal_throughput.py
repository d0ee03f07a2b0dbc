"""Offline throughput of a vision-language model on prompts with one image each (docs/multimodal.md).

``--num-prompts`` requests, each ``--input-len`` random words and one random RGB image of ``--image-size``
pixels square, ``--output-len`` tokens (greedy, EOS ignored). Every image differs, so every request runs
the vision encoder; the time includes the front end's image processing, as users see it. MODEL is a
config folder (config.json and the image processor's preprocessor_config.json, e.g.
benchmarks/configs/qwen2.5-vl-7b) for ``--load-format dummy``: a copy gets a synthetic tokenizer (word
``t<i>`` is token i; the model's image tokens are special tokens at their ids).

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

from pagoda.bench.common import add_common_args, emit, synchronize
from pagoda.entrypoints.engine_args import engine_config

# config keys naming the token ids of image markers (LLaVA, Qwen2.5-VL, Gemma 3); each becomes a special token
SPECIAL_KEYS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                "vision_end_token_id", "boi_token_index", "eoi_token_index")
FILES = ("config.json", "preprocessor_config.json")
WARMUP = 8  # requests run before the timed ones


def special_ids(config: dict) -> dict[str, int]:
    """``<key>`` -> id of every image marker the config names."""
    found = {key: config.get(key, (config.get("text_config") or {}).get(key)) for key in SPECIAL_KEYS}
    return {f"<{key}>": int(value) for key, value in found.items() if isinstance(value, int)}


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


def prompts(llm, hf_config, args, count: int, seed: int) -> list[dict]:
    """``count`` prompts: random words, the model's image placeholder (with Qwen2.5-VL's markers), one random
    image each."""
    from PIL import Image

    model_cls = type(llm.engine.core.parts.model)
    placeholder = model_cls.image_placeholder(hf_config, llm.get_tokenizer())
    start = getattr(hf_config, "vision_start_token_id", None)
    if start is not None:  # as Qwen2.5-VL's chat template writes an image
        placeholder = f"<vision_start_token_id>{placeholder}<vision_end_token_id>"
    rng = np.random.default_rng(seed)
    words = min(special_ids(hf_config.to_dict()).values())  # t0 .. t<words - 1> are plain words
    size = args.image_size
    out = []
    for _ in range(count):
        text = " ".join(f"t{i}" for i in rng.integers(0, words, args.input_len))
        image = Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))
        out.append({"prompt": f"{text} {placeholder}", "multi_modal_data": {"image": image}})
    return out


def timed_generate(llm, requests, params) -> float:
    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start = time.perf_counter()
    llm.generate(requests, params, use_tqdm=False)
    synchronize(device)
    return time.perf_counter() - start


def run(args, folder: Path) -> dict:
    from pagoda import LLM, SamplingParams

    config = engine_config(args, str(folder))
    start = time.perf_counter()
    llm = LLM(**vars(config))
    startup_s = time.perf_counter() - start
    hf_config = llm.engine.core.parts.hf_config
    requests = prompts(llm, hf_config, args, args.num_prompts, seed=0)
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    warmup = prompts(llm, hf_config, args, WARMUP, seed=1)  # other words and images: no cache hits after it
    timed_generate(llm, warmup, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    prompt_len = len(llm.engine.process_images(requests[0]["prompt"], [requests[0]["multi_modal_data"]["image"]])
                     .prompt_token_ids)
    seconds = timed_generate(llm, requests, params)
    n = args.num_prompts
    return {"workload": f"{n} x ({args.input_len} words + one {args.image_size}x{args.image_size} image) / "
                        f"{args.output_len} out", "model": args.model, "startup_s": round(startup_s, 1),
            "prompt_tokens": prompt_len, "seconds": seconds, "requests_per_s": round(n / seconds, 3),
            "output_tokens_per_s": round(n * args.output_len / seconds, 1),
            "tokens_per_s": round(n * (prompt_len + args.output_len) / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=500)
    parser.add_argument("--input-len", type=int, default=64, help="random words beside the image")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=448, help="side of each square image, in pixels")
    add_common_args(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_dir(Path(args.model), Path(tmp) / "model")
        emit(run(args, folder), args.result_file)


if __name__ == "__main__":
    main()
