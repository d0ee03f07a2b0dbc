"""Registers the quantization method 'first-int8' (the unquantized method under another name)."""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl
from pagoda.quantization.unquantized import UnquantizedMethod


class FirstInt8(UnquantizedMethod):
    description = "test fixture: dense weights under the name 'first-int8'"


@hookimpl
def register_quantization_methods(register: Register) -> None:
    register("first-int8", FirstInt8)
