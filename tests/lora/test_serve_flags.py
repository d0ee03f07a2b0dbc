"""``pagoda serve`` LoRA flags: --lora-modules as NAME=PATH or vLLM's JSON, refused without --enable-lora, a
repeated or base-model name refused; an adapter that cannot load fails the engine's start with its reason."""

from __future__ import annotations

import argparse
from functools import partial

import pytest

from lora_models import make_base
from pagoda.cli import serve_cmd
from pagoda.config import EngineConfig
from pagoda.engine_core.client import CoreProcess, EngineStartError
from pagoda.plugins import get_plugin_manager
from pagoda.server.lora_modules import core_with_lora_modules, parse_lora_modules


def _args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    serve_cmd.add_parser(sub, argparse.ArgumentParser(add_help=False))
    return parser.parse_args(["serve", "m", "--served-model-name", "base", *flags])


def test_modules_as_pairs_or_json():
    assert parse_lora_modules(["a=/x/a", '{"name": "b", "path": "/x/b"}'], ["base"]) == [("a", "/x/a"), ("b", "/x/b")]


@pytest.mark.parametrize("values, message", [
    (["a"], "NAME=PATH"), (["=/x"], "NAME=PATH"), (['{"name": "a"}'], "NAME=PATH"), (["{bad"], "not valid JSON"),
    (["a=/x", "a=/y"], "twice"), (["base=/x"], "base model's served name")])
def test_bad_modules(values, message):
    with pytest.raises(ValueError, match=message):
        parse_lora_modules(values, ["base"])


@pytest.mark.parametrize("flags", [("--lora-modules", "a=/x"), ("--allow-runtime-lora-updating",)])
def test_lora_flags_need_enable_lora(flags):
    with pytest.raises(ValueError, match="needs --enable-lora"):
        serve_cmd.check_lora_args(_args(*flags), enable_lora=False)
    assert get_plugin_manager()  # the parser built with the registries


def test_flags_reach_the_engine_config():
    args = _args("--enable-lora", "--max-loras", "3", "--max-lora-rank", "32", "--lora-modules", "a=/x")
    assert serve_cmd.check_lora_args(args, True) == [("a", "/x")]
    assert (args.enable_lora, args.max_loras, args.max_lora_rank) == (True, 3, 32)


def test_an_adapter_that_cannot_load_fails_the_start(tmp_path):
    base = make_base(tmp_path / "base", "llama")
    config = EngineConfig(model=str(base), dtype="float32", enable_lora=True)
    with pytest.raises(EngineStartError, match="LoRA adapter 'gone'.*no folder"):
        CoreProcess(config, partial(core_with_lora_modules, [("gone", str(tmp_path / "gone"))]), log_level="WARNING")
