"""AutoAWQ's packing: the test quantizer against the documented bit order on known values, the
plugin's unpacking/dequantization against the quantizer's integers, and the config checks."""

from __future__ import annotations

import pytest
import torch
from awq_quantizer import pack_columns, quantize

from pagoda.errors import ModelLoadError
from pagoda_quant_awq.config import AwqConfig
from pagoda_quant_awq.packing import dequantize, pack_int4, unpack_int4


def test_pack_follows_the_documented_nibble_order() -> None:
    # columns 0..7 holding their own index: nibble i holds column [0,2,4,6,1,3,5,7][i]
    assert pack_columns(torch.arange(8)[None]).item() == 0x75316420
    for column, bits in ((0, 0), (1, 16), (2, 4), (3, 20), (4, 8), (5, 24), (6, 12), (7, 28)):
        one_hot = torch.zeros(1, 8, dtype=torch.long)
        one_hot[0, column] = 0xF
        word = pack_columns(one_hot).item() & 0xFFFFFFFF
        assert word == 0xF << bits, f"column {column} must sit at bits {bits}..{bits + 3}"
    top = torch.zeros(1, 16, dtype=torch.long)
    top[0, 15] = 9  # column 7 of the second word: the sign nibble
    assert pack_columns(top).tolist() == [[0, 0x90000000 - 2**32]]  # the same bits as a signed int32


def test_unpack_inverts_the_quantizer() -> None:
    g = torch.Generator().manual_seed(0)
    values = torch.randint(0, 16, (12, 48), generator=g)
    assert torch.equal(unpack_int4(pack_columns(values)).long(), values)


def test_pack_int4_equals_the_quantizers_packing() -> None:
    values = torch.randint(0, 16, (12, 48), generator=torch.Generator().manual_seed(1))
    values[0, 7] = 15  # the sign nibble set
    assert torch.equal(pack_int4(values), pack_columns(values))


@pytest.mark.parametrize("group", [32, 64, 128])
def test_dequantize_matches_the_quantizer(group: int) -> None:
    g = torch.Generator().manual_seed(group)
    weight = torch.randn(40, 256, generator=g) * 0.1  # [out, in]
    quant = quantize(weight, group)
    assert torch.equal(unpack_int4(quant.qweight).long(), quant.q)
    assert torch.equal(unpack_int4(quant.qzeros).long(), quant.zeros)
    exact = quant.dequantized(group)  # float64 [in, out]
    assert torch.equal(dequantize(quant.qweight, quant.qzeros, quant.scales, group, torch.float64), exact)
    assert torch.equal(dequantize(quant.qweight, quant.qzeros, quant.scales, group, torch.float32), exact.float())
    step = quant.scales.double().repeat_interleave(group, 0)
    error = (exact - weight.double().t()).abs()
    assert (error <= step + 1e-6).all(), "rounding (<= half a step) plus the zero point's rounding at the ends"
    assert (error <= step / 2 + 1e-6).float().mean() > 0.9


def test_config_accepts_autoawq_gemm() -> None:
    cfg = AwqConfig.from_dict({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True,
                               "version": "GEMM", "modules_to_not_convert": None})
    assert (cfg.group_size, cfg.bits, cfg.zero_point, cfg.pack_factor) == (64, 4, True, 8)
    for dense in (None, {}):
        with pytest.raises(ModelLoadError, match="--quantization awq needs an AWQ checkpoint.*llama-3.1-8b-awq"):
            AwqConfig.from_dict(dense)


@pytest.mark.parametrize("change, message", [
    ({"bits": 8}, "bits=8: only 4-bit"),
    ({"quant_method": "fp8"}, "quant_method 'fp8' is not 'awq'; pass --quantization fp8"),
    ({"group_size": 256}, "group_size=256: supported group sizes are 32, 64, 128"),
    ({"group_size": -1}, "group_size=-1"),
    ({"zero_point": False}, "zero_point=false"),
    ({"desc_act": True}, "act-order"),
    ({"version": "gemv"}, "only AutoAWQ's GEMM layout"),
    ({"modules_to_not_convert": ["visual"]}, "modules_to_not_convert=['visual']"),
])
def test_config_rejects_unsupported_settings(change: dict, message: str) -> None:
    qc = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, **change}
    with pytest.raises(ModelLoadError, match="Unsupported AWQ checkpoint") as info:
        AwqConfig.from_dict(qc)
    assert message in str(info.value)
