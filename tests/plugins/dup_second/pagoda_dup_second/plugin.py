"""Registers the quantization method 'second-int8' (the unquantized method under another name)."""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl
from pagoda.quantization.unquantized import UnquantizedMethod


class SecondInt8(UnquantizedMethod):
    description = "test fixture: dense weights under the name 'second-int8'"


@hookimpl
def register_quantization_methods(register: Register) -> None:
    register("second-int8", SecondInt8)
