"""`pagoda generate [MODEL] PROMPT...`: complete prompts from the terminal."""

from __future__ import annotations

import argparse
import os
import sys

from pagoda.cli.engine_args import DEFAULT_MODEL_HELP, add_engine_args, engine_config
from pagoda.plugins import get_plugin_manager


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "generate",
        parents=[parent],
        help="complete one or more prompts",
        description="Complete prompts with a model. If the first argument is an existing path or a known "
                    "model name it is the model; " + DEFAULT_MODEL_HELP + ".",
    )
    p.add_argument("args", nargs="+", metavar="[MODEL] PROMPT", help="optional model, then one or more prompts")
    p.add_argument("--max-tokens", type=int, default=64, help="most new tokens per prompt")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0 = all)")
    p.add_argument("--chat", action="store_true", help="wrap each prompt as a user message in the chat template")
    add_engine_args(p, get_plugin_manager())
    p.set_defaults(func=run)


def split_model(args: list[str]) -> tuple[str | None, list[str]]:
    """`[MODEL] PROMPT...`: the first argument is the model if it is a path or the default model's name."""
    from pagoda.loader import DEFAULT_MODEL_NAME

    if len(args) > 1 and (os.path.exists(args[0]) or args[0] == DEFAULT_MODEL_NAME):
        return args[0], args[1:]
    return None, args


def run(args: argparse.Namespace) -> int:
    from pagoda import LLM, SamplingParams

    model, prompts = split_model(args.args)
    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)
        config = engine_config(args, model)
    except ValueError as exc:
        print(f"pagoda generate: {exc}", file=sys.stderr)
        return 2
    llm = LLM(**vars(config))
    if args.chat:
        outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params, use_tqdm=False)
    else:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        print(out.outputs[0].text if args.chat else prompt + out.outputs[0].text)
        if len(prompts) > 1:
            print()
    return 0
