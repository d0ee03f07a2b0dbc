"""A LoRA server for the tests: the server tests' uvicorn-in-a-thread server over an engine core process
that loads ``--lora-modules`` through the serve command's own factory and slows its steps a little."""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path

from pagoda.config import EngineConfig
from pagoda.engine_core.core import EngineCore
from pagoda.server.app import LoRAServing
from pagoda.server.lora_modules import core_with_lora_modules

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_helpers import RunningServer, start_server  # noqa: E402

API_KEY = "lora-key"
BASE_NAME = "tiny-base"
STEP_DELAY_S = 0.01  # streams of a few dozen tokens stay in flight while a test loads and unloads adapters


def slow_core(modules: list[tuple[str, str]], config: EngineConfig) -> EngineCore:
    """The serve command's core factory with slower steps (module level: pickled into the core process)."""
    core = core_with_lora_modules(modules, config)
    step = core.step

    def slow_step():
        time.sleep(STEP_DELAY_S)
        return step()

    core.step = slow_step
    return core


def start_lora_server(base: str, modules: list[tuple[str, str]], runtime_updates: bool = True,
                      **engine) -> RunningServer:
    config = EngineConfig(model=base, dtype="float32", block_size=8, enable_lora=True, **engine)
    return start_server(config, API_KEY, BASE_NAME, core_factory=partial(slow_core, modules),
                        lora=LoRAServing(True, runtime_updates))
