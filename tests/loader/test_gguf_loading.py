"""GGUF loading on a tiny Llama written as llama.cpp writes it (q/k rows permuted, mixed tensor types)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf", reason="GGUF loading needs the gguf package (a pagoda dependency)")

from pagoda.errors import ModelLoadError
from pagoda.loader import ModelSource, load_model, resolve_model
from pagoda.loader.gguf_reader import GLOBAL_NAMES, LAYER_NAMES, unpermute_qk
from pagoda.models import model_class
from hf_tiny import build_ctx, hf_config, hf_logits, hf_model, run_prefill

Q = gguf.GGMLQuantizationType
PROMPT = [7, 1, 60, 33, 33, 12, 90, 4, 41, 2]
# Relative error bound per type (vs. the largest weight); a row swap would give ~1.
TYPE_TOLERANCE = {Q.F32: 0.0, Q.F16: 1e-3, Q.Q8_0: 0.01, Q.Q4_0: 0.15, Q.Q4_1: 0.15}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter: per head, rotate-halves row order -> interleaved pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf: str) -> str:
    inverse = {v: k for k, v in {**GLOBAL_NAMES, **LAYER_NAMES}.items()}
    stem, suffix = hf.rsplit(".", 1)
    if stem.startswith("model.layers."):
        layer, rest = stem[len("model.layers."):].split(".", 1)
        return f"blk.{layer}.{inverse[rest]}.{suffix}"
    return f"{inverse[stem]}.{suffix}"


def write_gguf(model, path, types: list) -> dict[str, object]:
    """Write ``model`` as a llama GGUF, cycling matrices through ``types``; returns name -> type."""
    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(cfg.num_hidden_layers)
    chosen = {}
    for i, (name, tensor) in enumerate(model.state_dict().items()):
        w = tensor.numpy()
        if ".q_proj." in name:
            w = llama_cpp_permute(w, cfg.num_attention_heads)
        elif ".k_proj." in name:
            w = llama_cpp_permute(w, cfg.num_key_value_heads)
        qtype = types[i % len(types)] if w.ndim == 2 else Q.F32
        data = w.astype(np.float16) if qtype == Q.F16 else gguf.quants.quantize(w, qtype) if qtype != Q.F32 else w
        writer.add_tensor(gguf_name(name), data, raw_dtype=qtype)
        chosen[name] = qtype
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return chosen


def load_gguf(path, config):
    source = ModelSource(path.parent, path.name, "tiny")
    ctx = build_ctx(config)
    model = load_model(source, config, ctx, model_class("LlamaForCausalLM"), "auto", "cpu", progress=False)
    return model, ctx


@pytest.fixture(scope="module")
def tiny():
    config = hf_config("llama", hidden_size=64, intermediate_size=96, num_key_value_heads=2)  # 32-multiples
    return hf_model(config)


def test_unpermute_inverts_llama_cpp_permutation():
    w = torch.randn(3 * 8, 5)  # 3 heads of dim 8
    assert torch.equal(unpermute_qk(torch.from_numpy(llama_cpp_permute(w.numpy(), 3)), 3), w)


def test_f32_gguf_matches_transformers_exactly(tiny, tmp_path):
    path = tmp_path / "tiny-f32.gguf"
    write_gguf(tiny, path, [Q.F32])
    model, ctx = load_gguf(path, tiny.config)
    assert (run_prefill(model, ctx, [PROMPT]) - hf_logits(tiny, PROMPT)).abs().max().item() < 1e-4


def test_quantized_types_dequantize_into_the_right_rows(tiny, tmp_path):
    path = tmp_path / "tiny-mixed.gguf"
    chosen = write_gguf(tiny, path, [Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.F16])
    assert {Q.Q4_0, Q.Q4_1, Q.Q8_0, Q.F16} <= set(chosen.values())
    model, ctx = load_gguf(path, tiny.config)
    ours = dict(model.named_parameters())
    q, k = tiny.config.num_attention_heads * 16, tiny.config.num_key_value_heads * 16
    for name, ref in tiny.state_dict().items():
        fused, rows = name, slice(None)
        for src, start, size in (("q_proj", 0, q), ("k_proj", q, k), ("v_proj", q + k, k)):
            if f".{src}." in name:
                fused, rows = name.replace(src, "qkv_proj"), slice(start, start + size)
        if name == "lm_head.weight" or ".gate_proj." in name or ".up_proj." in name:
            continue  # gate/up layout is covered by the F32 parity test
        err = (ours[fused][rows] - ref).abs().max().item() / ref.abs().max().item()
        assert err <= TYPE_TOLERANCE[chosen[name]] + 1e-7, (name, chosen[name], err)
    assert torch.isfinite(run_prefill(model, ctx, [PROMPT])).all()


def test_reading_only_named_tensors_dequantizes_only_those(tiny, tmp_path, monkeypatch):
    """A reader asked for two tensors (a proposer beside a TP target wants the vocabulary ones)
    dequantizes those two, equal to what a full read gives them, and no other."""
    import pagoda.loader.gguf_reader as reader_module
    from pagoda.loader.gguf_reader import GGUFReader

    path = tmp_path / "tiny-q8.gguf"
    write_gguf(tiny, path, [Q.Q8_0])
    everything = dict(GGUFReader(path, tiny.config).tensors())
    calls = []
    dequantize = reader_module.dequantize
    monkeypatch.setattr(reader_module, "dequantize", lambda *a: calls.append(a) or dequantize(*a))
    wanted = {"model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight"}
    some = dict(GGUFReader(path, tiny.config).tensors(only=wanted))
    assert set(some) == wanted and len(calls) == 2
    assert all(torch.equal(some[name], everything[name]) for name in wanted)


def test_truncated_gguf_is_named(tiny, tmp_path):
    path = tmp_path / "broken.gguf"
    write_gguf(tiny, path, [Q.F32])
    path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(ModelLoadError, match=r"broken\.gguf"):
        load_gguf(path, tiny.config)


def test_resolve_gguf_file_and_folder(tiny, tmp_path):
    path = tmp_path / "only.gguf"
    write_gguf(tiny, path, [Q.F32])
    by_file, by_folder = resolve_model(str(path)), resolve_model(str(tmp_path))
    assert by_file == by_folder and by_file.gguf_path == path.resolve()
    (tmp_path / "second.gguf").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="several .gguf files"):
        resolve_model(str(tmp_path))
