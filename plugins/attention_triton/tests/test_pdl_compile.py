"""The kv-write, decode and split-reduction kernels compile for sm_90 as programmatic dependents: with
``PDL`` their PTX waits for the kernel before them (``griddepcontrol.wait``) before any global load and
lets the next one start (``griddepcontrol.launch_dependents``) before that wait; without it, neither. Compiled here, no GPU needed, in a
subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile). The GPU run
(``launch_pdl``) is covered by the kernel tests on an sm_90 device."""

from __future__ import annotations

import json
import sys

import pytest

from pagoda.testing import compile_triton, compiled_in_subprocess, dependent_launch_facts
from triton_attention_kernels import kernels

pytest.importorskip("triton")

def sm90_ptx(name: str, pdl: bool) -> str:
    return compile_triton(*kernels(pdl=pdl)[name])


def compiled_facts(name: str) -> dict[str, bool]:
    """Compiles ``name`` with and without PDL in a fresh interpreter that compiles (no TRITON_INTERPRET)."""
    return compiled_in_subprocess(__file__, name, timeout=600)


@pytest.mark.parametrize("name", ["kv_write", "decode", "reduce"])
def test_dependent_launch_instructions(name: str) -> None:
    facts = compiled_facts(name)
    f = facts["pdl"]
    assert f["wait"] and f["launch_dependents"], facts
    assert f["wait_before_first_load"], facts
    assert f["trigger_before_wait"], facts
    assert not facts["any_without_pdl"], facts


if __name__ == "__main__":
    print(json.dumps({"pdl": dependent_launch_facts(sm90_ptx(sys.argv[1], True)),
                      "any_without_pdl": "griddepcontrol" in sm90_ptx(sys.argv[1], False)}))
