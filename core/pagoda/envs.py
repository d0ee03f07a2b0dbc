"""The environment variables Pagoda reads, in one place: each a typed accessor with its default and a
check of its value (docs/environment.md is the table for users).

Settings of an engine are ``EngineConfig`` fields with CLI flags; what stays here is for operators and
debugging (an API key, plugin lists, addresses and timeouts of tensor-parallel ranks, trace folders,
kernel build switches). Nothing else in Pagoda or its plugins reads a ``PAGODA_*`` variable; C++ kernels
get their values from Python. Each accessor reads the environment when called, so a variable set after
import (by a launcher, or a test) counts. An empty value counts as unset. A bad value raises
:class:`EnvVarError` naming the variable, the value and what it takes.

Standard library only: the GPU plugins' ``setup.py`` load this file by path to read their build
switches, before pagoda is importable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

try:
    from pagoda.errors import ConfigError as _Base
except ImportError:  # loaded by path from a plugin's setup.py, before pagoda is importable
    _Base = ValueError


class EnvVarError(_Base):
    """A ``PAGODA_*`` variable holds a value it does not take."""


@dataclass(frozen=True)
class Variable:
    """A variable's name and the value an unset one means (as docs/environment.md shows it; "" for none)."""

    name: str
    default: str = ""

    def raw(self) -> str | None:
        """The value as set, or None where it is unset or empty."""
        return os.environ.get(self.name) or None

    def _bad(self, value: str, allowed: str) -> EnvVarError:
        return EnvVarError(f"{self.name}={value!r}: expected {allowed} (unset: {self.default or 'none'})")


@dataclass(frozen=True)
class Text(Variable):
    """Any text (an address, a folder, a key, a list of names); None where unset."""

    def get(self) -> str | None:
        return self.raw()


@dataclass(frozen=True)
class Switch(Variable):
    """On or off: 1/true/yes/on or 0/false/no/off (any case); the default where unset."""

    def get(self) -> bool:
        value = self.raw()
        if value is None:
            return self.default == "1"
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
        raise self._bad(value, "1 or 0 (true/false, yes/no, on/off)")


@dataclass(frozen=True)
class Seconds(Variable):
    """A positive number of seconds."""

    def get(self) -> float:
        value = self.raw() or self.default
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not seconds > 0:  # also NaN
            raise self._bad(value, "a positive number of seconds")
        return seconds


@dataclass(frozen=True)
class Choice(Variable):
    """One of a few words."""

    choices: tuple[str, ...] = ()

    def get(self) -> str:
        value = self.raw() or self.default
        if value not in self.choices:
            raise self._bad(value, "one of " + ", ".join(self.choices))
        return value


# The server
API_KEY = Text("PAGODA_API_KEY")  # `pagoda serve`'s --api-key when the flag is not given
LOG_FORMAT = Choice("PAGODA_LOG_FORMAT", "text", ("text", "json"))  # --log-format; every process of a command reads it

# Plugins (comma-separated plugin names; the --plugins / --disable-plugins flags win)
PLUGINS = Text("PAGODA_PLUGINS")  # load only these
DISABLE_PLUGINS = Text("PAGODA_DISABLE_PLUGINS")  # load all but these
ALLOW_PLUGIN_OVERRIDES = Text("PAGODA_ALLOW_PLUGIN_OVERRIDES")  # names (NAME or KIND:NAME) a plugin may take over

# Tensor-parallel ranks
HOST_IP = Text("PAGODA_HOST_IP")  # this host's address as the other hosts reach it
DIST_TIMEOUT_S = Seconds("PAGODA_DIST_TIMEOUT_S", "600")  # how long a collective waits for the other ranks

# Traces
CACHE_DIR = Text("PAGODA_CACHE_DIR")  # what Pagoda keeps between runs (a GGUF file's tokenizer); default ~/.cache/pagoda
TRACE_DIR = Text("PAGODA_TRACE_DIR")  # JSON-lines timing traces of steps and requests
TORCH_PROFILER_DIR = Text("PAGODA_TORCH_PROFILER_DIR")  # torch profiler traces (start_profile / stop_profile)

# The GPU plugins' compiled kernels
CUDA_KERNELS = Switch("PAGODA_CUDA_KERNELS", "1")  # 0: pagoda-platform-cuda runs the torch ops instead
ROCM_KERNELS = Switch("PAGODA_ROCM_KERNELS", "1")  # 0: pagoda-platform-rocm runs the torch ops instead
CUDA_BUILD = Choice("PAGODA_CUDA_BUILD", "auto", ("auto", "0", "1"))  # at pip install: build the kernels?
ROCM_BUILD = Choice("PAGODA_ROCM_BUILD", "auto", ("auto", "0", "1"))
CUDA_BUILD_VERBOSE = Switch("PAGODA_CUDA_BUILD_VERBOSE", "0")  # 1: show the compiler of a first-use build
ROCM_BUILD_VERBOSE = Switch("PAGODA_ROCM_BUILD_VERBOSE", "0")

VARIABLES: tuple[Variable, ...] = (
    API_KEY, LOG_FORMAT, PLUGINS, DISABLE_PLUGINS, ALLOW_PLUGIN_OVERRIDES, HOST_IP, DIST_TIMEOUT_S, CACHE_DIR, TRACE_DIR,
    TORCH_PROFILER_DIR, CUDA_KERNELS, ROCM_KERNELS, CUDA_BUILD, ROCM_BUILD, CUDA_BUILD_VERBOSE, ROCM_BUILD_VERBOSE,
)
