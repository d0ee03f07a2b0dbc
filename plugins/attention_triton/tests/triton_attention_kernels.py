"""The plugin's Triton kernels with argument types and constants as the backend launches them (bfloat16 queries,
128-wide heads, a group of 4 query heads per KV head), for the compile tests: ``kernels(fmt)`` -> name ->
(kernel, argument types, constants). ``fmt`` ``"e4m3"`` / ``"e5m2"`` makes the KV cache FP8 (float32 scales);
``pdl`` is the ``PDL`` constant of the kernels that take one."""

from __future__ import annotations

P16, I32, I64, F32, PF32 = "*bf16", "i32", "i64", "fp32", "*fp32"
FORMATS = {"e4m3": ("*fp8e4nv", 448.0, 3, -6), "e5m2": ("*fp8e5", 57344.0, 2, -14)}
STRIDES = dict(stride_kv=I64, stride_blk=I64, stride_tok=I64, stride_head=I64, stride_bt=I64)


def kernels(fmt: str | None = None, pdl: bool = False) -> dict[str, tuple]:
    from pagoda_attention_triton.decode import _decode_kernel, _reduce_kernel
    from pagoda_attention_triton.kv_write import _kv_write_kernel
    from pagoda_attention_triton.mla import _mla_kernel, _write_latent_kernel
    from pagoda_attention_triton.prefill import _prefill_kernel

    cache, fmax, mbits, emin = FORMATS[fmt] if fmt else (P16, 0.0, 0, 0)
    scale = PF32 if fmt else P16
    common = dict(cache_ptr=cache, k_scale_ptr=scale, v_scale_ptr=scale)
    tiles = dict(GROUP=4, GROUP_P=4, PAGE=16, HEAD=128, HEAD_P=128, USE_WINDOW=False, UPCAST=False,
                 KV_FP8=fmt is not None)
    return {
        "kv_write": (_kv_write_kernel, dict(key_ptr=P16, value_ptr=P16, slot_ptr="*i64", stride_kt=I64, stride_kh=I64,
                                            stride_vt=I64, stride_vh=I64, stride_c_kv=I64, stride_c_slot=I64,
                                            stride_c_head=I64, **common),
                     dict(NUM_HEADS=8, HEAD=128, HEADS_P=8, HEAD_P=128, PDL=pdl, QUANT=fmt is not None, FMAX=fmax,
                          MBITS=mbits, EMIN=emin, GRID_ROUND=False)),
        "decode": (_decode_kernel, dict(q_ptr=P16, o_ptr=P16, part_o_ptr=PF32, part_lse_ptr=PF32, bt_ptr="*i32",
                                        seq_lens_ptr="*i32", qsl_ptr="*i32", seq_base=I32, token_base=I32,
                                        stride_qt=I64, stride_qh=I64, stride_ot=I64, stride_oh=I64, scale_log2e=F32,
                                        window=I32, num_heads=I32, **STRIDES, **common),
                   dict(ROWS=16, NUM_SPLITS=4, BLOCK_N=128, PDL=pdl, **tiles)),
        "reduce": (_reduce_kernel, dict(o_ptr=P16, part_o_ptr=PF32, part_lse_ptr=PF32, token_base=I32, stride_ot=I64,
                                        stride_oh=I64, num_heads=I32),
                   dict(NUM_SPLITS=4, HEAD=128, HEAD_P=128, PDL=pdl)),
        "prefill": (_prefill_kernel, dict(q_ptr=P16, o_ptr=P16, bt_ptr="*i32", qsl_ptr="*i32", seq_lens_ptr="*i32",
                                          seq_lo=I32, seq_hi=I32, stride_qt=I64, stride_qh=I64, stride_ot=I64,
                                          stride_oh=I64, scale_log2e=F32, window=I32, **STRIDES, **common),
                    dict(BLOCK_Q=16, BLOCK_N=32, **tiles)),
        # DeepSeek-V3's latent (rank 512) and rope (64) widths, a decode tile of 16 heads
        "mla": (_mla_kernel, dict(q_ptr=P16, o_ptr=P16, part_o_ptr=PF32, part_lse_ptr=PF32, cache_ptr=P16,
                                  bt_ptr="*i32", seq_lens_ptr="*i32", qsl_ptr="*i32", seq_lo=I32, seq_hi=I32,
                                  token_base=I32, stride_qt=I64, stride_qh=I64, stride_ot=I64, stride_oh=I64,
                                  stride_blk=I64, stride_tok=I64, stride_bt=I64, scale_log2e=F32, num_heads=I32),
                dict(DECODE=True, BLOCK_T=1, BLOCK_H=16, ROWS=16, NUM_SPLITS=4, BLOCK_N=32, PAGE=16, RANK=512,
                     RANK_P=512, ROPE=64, ROPE_P=64, UPCAST=False, PDL=pdl)),
        "write_latent": (_write_latent_kernel, dict(latent_ptr=P16, cache_ptr=P16, slot_ptr="*i64", stride_lt=I64),
                         dict(D=576, D_P=1024, PDL=pdl)),
    }
