"""The kv-write, decode and split-reduction kernels compile for sm_90 as programmatic dependents: with
``PDL`` their PTX waits for the kernel before them (``griddepcontrol.wait``) before any global load and
lets the next one start (``griddepcontrol.launch_dependents``) before that wait; without it, neither. Compiled here, no GPU needed, in a
subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile). The GPU run
(``launch_pdl``) is covered by the kernel tests on an sm_90 device."""

from __future__ import annotations

import json
import sys

import pytest

from pagoda.testing import compiled_in_subprocess, dependent_launch_facts

pytest.importorskip("triton")

P16, I32, I64, F32 = "*bf16", "i32", "i64", "fp32"


def kernels() -> dict:
    """name -> (kernel, argument types, constants other than PDL)."""
    from pagoda_attention_triton.decode import _decode_kernel, _reduce_kernel
    from pagoda_attention_triton.kv_write import _kv_write_kernel

    return {
        "kv_write": (
            _kv_write_kernel,
            dict(key_ptr=P16, value_ptr=P16, cache_ptr=P16, slot_ptr="*i64", k_scale_ptr=P16, v_scale_ptr=P16,
                 stride_kt=I64, stride_kh=I64, stride_vt=I64, stride_vh=I64, stride_c_kv=I64, stride_c_slot=I64,
                 stride_c_head=I64),
            dict(NUM_HEADS=8, HEAD=128, HEADS_P=8, HEAD_P=128, QUANT=False, FMAX=0.0, MBITS=0, EMIN=0, GRID_ROUND=False),
        ),
        "decode": (
            _decode_kernel,
            dict(q_ptr=P16, o_ptr=P16, part_o_ptr="*fp32", part_lse_ptr="*fp32", cache_ptr=P16, bt_ptr="*i32",
                 seq_lens_ptr="*i32", qsl_ptr="*i32", k_scale_ptr=P16, v_scale_ptr=P16, seq_base=I32, token_base=I32, stride_qt=I64, stride_qh=I64, stride_ot=I64, stride_oh=I64, stride_kv=I64,
                 stride_blk=I64, stride_tok=I64, stride_head=I64, stride_bt=I64, scale_log2e=F32, window=I32,
                 num_heads=I32),
            dict(GROUP=4, GROUP_P=4, ROWS=16, NUM_SPLITS=4, BLOCK_N=128, PAGE=16, HEAD=128, HEAD_P=128, USE_WINDOW=False,
                 DOT_PREC="tf32", UPCAST=False, KV_FP8=False),
        ),
        "reduce": (
            _reduce_kernel,
            dict(o_ptr=P16, part_o_ptr="*fp32", part_lse_ptr="*fp32", token_base=I32, stride_ot=I64, stride_oh=I64,
                 num_heads=I32),
            dict(NUM_SPLITS=4, HEAD=128, HEAD_P=128),
        ),
    }


def sm90_ptx(name: str, pdl: bool) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, constants = kernels()[name]
    constants = {**constants, "PDL": pdl}
    source = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constants}}, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


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
