"""`pagoda generate [MODEL] PROMPT...`: complete prompts from the terminal.

Also home of the sampling flags and the model/flag checks that `pagoda chat` shares: every flag is
validated (SamplingParams, EngineConfig, registry choices, the model path) before a model loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from pagoda.entrypoints.engine_args import DEFAULT_MODEL_HELP, add_engine_args, engine_config
from pagoda.plugins import get_plugin_manager

GENERATE_EPILOG = """\
examples:
  pagoda generate "The three primary colors are"
  pagoda generate ./my-llama "Once upon a time" "The capital of France is" --max-tokens 32
  pagoda generate model.gguf "Name a river." --chat --temperature 0.8 --n 3 --seed 7
  pagoda generate "Count: one, two," --stop "five" --json

A single prompt with --n 1 prints the prompt followed by its completion (with --chat: the reply
only). Several prompts or samples print a '--- prompt I, sample J ---' header above each.
Errors in flags exit with status 2 and a one-line reason, before any model is loaded."""


def add_sampling_args(parser: argparse.ArgumentParser, temperature: float, max_tokens: int | None) -> None:
    """The SamplingParams flags of `generate` and `chat` (the engine's --seed seeds sampling)."""
    g = parser.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=max_tokens,
                   help=f"most new tokens per completion (default {max_tokens}; the context length caps it too)")
    g.add_argument("--min-tokens", type=int, default=0, help="fewest new tokens before EOS or a stop may end it")
    g.add_argument("--temperature", type=float, default=temperature,
                   help=f"softmax temperature; 0 = greedy (default {temperature})")
    g.add_argument("--top-p", type=float, default=1.0, help="sample from the smallest set of tokens with this mass (0, 1]")
    g.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0 = all)")
    g.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min-p x the top token's probability")
    g.add_argument("--repetition-penalty", type=float, default=1.0, help="> 1 discourages repeating tokens (1 = off)")
    g.add_argument("--stop", action="append", metavar="TEXT",
                   help="end a completion at this text (left out of the output); repeat for several")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past the end-of-sequence token")


def sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """SamplingParams fields from the flags of :func:`add_sampling_args`."""
    return dict(
        max_tokens=args.max_tokens, min_tokens=args.min_tokens, temperature=args.temperature,
        top_p=args.top_p, top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        stop=args.stop, ignore_eos=args.ignore_eos,
    )


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "generate",
        parents=[parent],
        help="complete one or more prompts",
        description="Complete prompts with a model. If the first of several arguments is an existing path "
                    "or the default model's name it is the model (or pass --model); " + DEFAULT_MODEL_HELP + ".",
        epilog=GENERATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("args", nargs="+", metavar="[MODEL] PROMPT", help="optional model, then one or more prompts")
    p.add_argument("--model", help="the model, when the first argument should not be read as one")
    p.add_argument("--n", type=int, default=1, help="completions per prompt (sampled; use --temperature > 0)")
    p.add_argument("--chat", action="store_true",
                   help="wrap each prompt as a user message in the tokenizer's chat template; print the reply")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per prompt: prompt, outputs [{text, token_ids, finish_reason}]")
    add_sampling_args(p, temperature=0.0, max_tokens=64)
    add_engine_args(p, get_plugin_manager())
    p.set_defaults(func=run)


def split_model(args: list[str]) -> tuple[str | None, list[str]]:
    """`[MODEL] PROMPT...`: the first argument is the model if it is a path or the default model's name."""
    from pagoda.loader import DEFAULT_MODEL_NAME

    if len(args) > 1 and (os.path.exists(args[0]) or args[0] == DEFAULT_MODEL_NAME):
        return args[0], args[1:]
    return None, args


def looks_like_path(text: str) -> bool:
    """True for arguments meant as a model path (so a missing one is an error, not a prompt)."""
    return text.startswith(("/", "./", "../", "~")) or text.endswith(".gguf")


def check_model(model: str | None) -> None:
    """Raise ValueError for a model path that does not exist (before anything loads)."""
    if model is None:
        return
    from pagoda.loader import DEFAULT_MODEL_NAME

    if model != DEFAULT_MODEL_NAME and not os.path.exists(os.path.expanduser(model)):
        raise ValueError(f"model {model!r} not found: pass a local HF folder, a .gguf file, or {DEFAULT_MODEL_NAME}")


def resolve_inputs(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """The model and the prompts of `generate`; raises ValueError for a missing model path."""
    if args.model is not None:
        model, prompts = args.model, list(args.args)
    else:
        model, prompts = split_model(args.args)
        if model is None and len(prompts) > 1 and looks_like_path(prompts[0]):
            model, prompts = prompts[0], prompts[1:]
    check_model(model)
    return model, prompts


def fail(command: str, exc: Exception) -> int:
    """Print a one-line reason and return the exit status of a usage error."""
    print(f"pagoda {command}: error: {exc}", file=sys.stderr)
    return 2


def build_llm(config, command: str):
    """The LLM for ``config``, or the exit status 1 after a one-line reason (bad checkpoint, unknown
    architecture, no memory for the KV cache...)."""
    from pagoda import LLM
    from pagoda.errors import PagodaError

    try:
        return LLM(**vars(config))
    except (ValueError, PagodaError) as exc:
        print(f"pagoda {command}: error: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    from pagoda.sampling_params import SamplingParams

    try:
        model, prompts = resolve_inputs(args)
        params = SamplingParams(n=args.n, **sampling_kwargs(args))
        config = engine_config(args, model)
    except ValueError as exc:
        return fail("generate", exc)
    llm = build_llm(config, "generate")
    if isinstance(llm, int):
        return llm
    try:
        if args.chat:
            outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params, use_tqdm=False)
        else:
            outputs = llm.generate(prompts, params, use_tqdm=False)
    except ValueError as exc:  # a prompt too long for the context, a tokenizer without a chat template
        return fail("generate", exc)
    print_outputs(prompts, outputs, chat=args.chat, as_json=args.json)
    return 0


def print_outputs(prompts: list[str], outputs: list, chat: bool, as_json: bool) -> None:
    """Plain text (prompt + completion, headers when there are several) or JSON lines."""
    if as_json:
        for prompt, out in zip(prompts, outputs):
            samples = [{"text": o.text, "token_ids": o.token_ids, "finish_reason": o.finish_reason} for o in out.outputs]
            print(json.dumps({"prompt": prompt, "outputs": samples}, ensure_ascii=False))
        return
    several = len(prompts) > 1 or len(outputs[0].outputs) > 1
    for i, (prompt, out) in enumerate(zip(prompts, outputs)):
        for j, sample in enumerate(out.outputs):
            if several:
                print(f"--- prompt {i + 1}, sample {j + 1} ({sample.finish_reason}) ---")
            print(sample.text if chat else prompt + sample.text)
