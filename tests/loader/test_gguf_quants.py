"""Pagoda's GGUF parsing and torch dequantization against the gguf package's reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="the reference dequantization is the gguf package's")

from pagoda.errors import ModelLoadError
from pagoda.loader import gguf_quants as gq
from pagoda.loader.gguf_file import GGUFFile

# byte offsets of the f16 scales in each block type: random bytes there could be inf/nan
F16_FIELDS = {gq.Q4_0: (0,), gq.Q4_1: (0, 2), gq.Q5_0: (0,), gq.Q5_1: (0, 2), gq.Q8_0: (0,), gq.Q2_K: (80, 82),
              gq.Q3_K: (108,), gq.Q4_K: (0, 2), gq.Q5_K: (0, 2), gq.Q6_K: (208,)}


def random_blocks(ggml_type: int, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    """Random bytes in the layout of ``ggml_type`` with finite f16 scales: [rows, blocks_per_row * block bytes]."""
    rng = np.random.default_rng(seed)
    _, size = gq.BLOCKS[ggml_type]
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, size), dtype=np.uint8)
    for at in F16_FIELDS[ggml_type]:
        scales = rng.uniform(-0.05, 0.05, size=rows * blocks_per_row).astype(np.float16)
        raw[:, at : at + 2] = scales.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, blocks_per_row * size)


def test_block_sizes_match_gguf():
    for ggml_type, sizes in gq.BLOCKS.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)] == sizes


@pytest.mark.parametrize("ggml_type", sorted(F16_FIELDS), ids=lambda t: gq.type_name(t))
def test_dequantize_equals_gguf_reference(ggml_type):
    raw = random_blocks(ggml_type, rows=5, blocks_per_row=3, seed=ggml_type)
    values = gq.BLOCKS[ggml_type][0]
    ours = gq.dequantize(raw, ggml_type, (5, 3 * values))
    reference = torch.from_numpy(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(ggml_type)).astype(np.float32))
    assert ours.dtype == torch.float32 and ours.shape == reference.shape
    assert reference.abs().max() > 0
    torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-7)


def test_plain_types_and_unsupported_type():
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    assert torch.equal(gq.dequantize(w.view(np.uint8), gq.F32, (3, 4)), torch.from_numpy(w))
    assert torch.equal(gq.dequantize(w.astype(np.float16).view(np.uint8), gq.F16, (3, 4)),
                       torch.from_numpy(w.astype(np.float16).astype(np.float32)))
    with pytest.raises(ModelLoadError, match=r"GGUF tensors of type 16 are not supported.*Q4_K_M or Q8_0"):
        gq.dequantize(np.zeros(66, dtype=np.uint8), 16, (256,))  # IQ2_XXS


def test_gguf_file_reads_what_the_gguf_writer_wrote(tmp_path):
    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_uint32("gemma3.block_count", 2)
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_token_list([f"tok{i}" for i in range(1000)])
    writer.add_token_scores([float(i) for i in range(1000)])
    weight = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    writer.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", weight[0])
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()
    f = GGUFFile(path)
    assert f.string("general.architecture") == "gemma3" and f.metadata["gemma3.block_count"] == 2
    assert f.metadata["tokenizer.ggml.tokens"][999] == "tok999" and f.metadata["tokenizer.ggml.scores"][7] == 7.0
    reference = gguf.GGUFReader(str(path))
    for tensor in reference.tensors:
        info = f.tensors[tensor.name]
        assert info.ggml_type == int(tensor.tensor_type)
        ours = gq.dequantize(f.raw(info), info.ggml_type, info.shape)
        theirs = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert torch.equal(ours, torch.from_numpy(np.array(theirs, dtype=np.float32)).reshape(info.shape))


def test_truncated_gguf_file_is_named(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x05" * 10)
    with pytest.raises(ModelLoadError, match="corrupt or truncated"):
        GGUFFile(path)
