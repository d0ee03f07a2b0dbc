"""A small AWQ quantizer for the tests: round-to-nearest 4-bit values with one scale and one zero
point per group of inputs, packed in AutoAWQ's GEMM layout, and tiny AWQ checkpoints written with it.

Written from the format's description (AutoAWQ / its readers in vLLM and transformers): for each
run of eight output columns, nibble ``i`` of the int32 (bits ``4i..4i+3``) holds column
``DOCUMENTED_ORDER[i]``; ``qweight`` is ``[in, out/8]``, ``qzeros`` ``[in/group, out/8]`` (the zero
points themselves, not minus one), ``scales`` fp16 ``[in/group, out]``; ``W = (q - z) * s``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

DOCUMENTED_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble i holds column DOCUMENTED_ORDER[i] of its eight
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def pack_columns(values: torch.Tensor) -> torch.Tensor:
    """``[rows, cols]`` ints in 0..15 -> ``[rows, cols/8]`` int32, eight columns per word."""
    rows, cols = values.shape
    words = torch.zeros(rows, cols // 8, dtype=torch.int64)
    for nibble, column in enumerate(DOCUMENTED_ORDER):
        words |= values[:, column::8].to(torch.int64) << (4 * nibble)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # the same 32 bits, signed


@dataclass
class Quantized:
    qweight: torch.Tensor  # [in, out/8] int32
    qzeros: torch.Tensor  # [in/group, out/8] int32
    scales: torch.Tensor  # [in/group, out] fp16
    q: torch.Tensor  # [in, out] int64 values 0..15
    zeros: torch.Tensor  # [in/group, out] int64 values 0..15

    def dequantized(self, group: int) -> torch.Tensor:
        """float64 ``[in, out]`` weights that the quantized values stand for."""
        z = self.zeros.repeat_interleave(group, 0)
        s = self.scales.double().repeat_interleave(group, 0)
        return (self.q - z).double() * s


def quantize(weight: torch.Tensor, group: int) -> Quantized:
    """``weight`` [out, in] (an nn.Linear's) -> AWQ tensors, round-to-nearest per (group, column)."""
    w = weight.detach().double().t().contiguous()  # [in, out]
    k, n = w.shape
    grouped = w.reshape(k // group, group, n)
    lo = grouped.amin(1).clamp(max=0.0)  # [in/group, out]; the range holds 0 so zero points fit 0..15
    hi = grouped.amax(1).clamp(min=0.0)
    scales = ((hi - lo) / 15).clamp(min=1e-6).half()  # stored fp16: quantize with the stored value
    s = scales.double()
    zeros = torch.round(-lo / s).clamp(0, 15).long()
    q = (torch.round(grouped / s[:, None, :]) + zeros[:, None, :]).clamp(0, 15).long().reshape(k, n)
    return Quantized(pack_columns(q), pack_columns(zeros), scales, q, zeros)


def awq_quantization_config(group: int) -> dict:
    return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": None}


def write_awq_checkpoint(hf_model, folder: Path, group: int, dense_folder: Path | None = None) -> None:
    """Save ``hf_model`` to ``folder`` with every decoder linear layer AWQ-quantized; if
    ``dense_folder`` is given, also save there the same model with the dequantized weights (fp32)."""
    def awq_tensors(module: str, weight: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        quant = quantize(weight, group)
        return {"qweight": quant.qweight, "qzeros": quant.qzeros, "scales": quant.scales}, quant.dequantized(group).t()

    write_quantized_checkpoint(hf_model, folder, awq_tensors, awq_quantization_config(group), dense_folder)


def write_quantized_checkpoint(hf_model, folder: Path, tensors_of, quantization_config: dict,
                               dense_folder: Path | None = None) -> None:
    """Save ``hf_model`` to ``folder`` with each decoder linear layer's ``weight`` replaced by the tensors
    ``tensors_of(module name, weight)`` returns (named without the module prefix) with the [out, in]
    weights they stand for, which the model then holds (saved to ``dense_folder`` if given, fp32); the
    config gets ``quantization_config``. Shared with pagoda-quant-gptq's tests."""
    from safetensors.torch import save_file

    hf_model.save_pretrained(folder)
    for stale in folder.glob("*.safetensors*"):
        stale.unlink()
    tensors: dict[str, torch.Tensor] = {}
    for name, param in hf_model.state_dict().items():
        module = name.rpartition(".")[0]
        if module.rpartition(".")[2] in LINEARS and name.endswith(".weight"):
            quantized, weight = tensors_of(module, param)
            tensors.update({f"{module}.{key}": value for key, value in quantized.items()})
            with torch.no_grad():
                param.copy_(weight.float())  # the model now holds the dequantized weights
        else:
            tensors[name] = param.detach().contiguous().clone()
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    if dense_folder is not None:
        hf_model.save_pretrained(dense_folder)


def tiny_llama():
    """A tiny random Llama (tests/engine/tiny_models.py's config), weights larger than the default init."""
    import transformers
    from tiny_models import CONFIGS

    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS["llama"](), dtype=torch.float32).eval()
    with torch.no_grad():  # larger than the default init: greedy decoding is less flat
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    return model


def write_tiny_awq_llama(root: Path, group: int):
    """A tiny random Llama (tests/engine/tiny_models.py's config, with a word tokenizer) saved AWQ-quantized
    to ``root/awq`` and with its dequantized fp32 weights to ``root/dense``; returns (awq, dense, the
    HF model holding the dequantized weights)."""
    return write_tiny_pair(root / "awq", root / "dense",
                           lambda model, quant, dense: write_awq_checkpoint(model, quant, group, dense_folder=dense))


def write_tiny_pair(quant: Path, dense: Path, write) -> tuple[Path, Path, object]:
    """:func:`tiny_llama` written by ``write(model, quant, dense)`` (quantized, and with the weights it
    dequantizes to), both with a word tokenizer; returns (quant, dense, the model)."""
    from tiny_models import save_word_tokenizer

    model = tiny_llama()
    write(model, quant, dense)
    for folder in (quant, dense):
        save_word_tokenizer(folder)
    return quant, dense, model


def logprob_gap(awq: Path, dense: Path, prompt: list[int], new_tokens: int, **llm_kwargs) -> float:
    """Greedy-decode ``new_tokens`` with the AWQ checkpoint (logprob of each token), score the same
    tokens teacher-forced with the dense one (prompt logprobs); the largest absolute difference."""
    from pagoda import LLM, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, logprobs=0)
    out = LLM(model=str(awq), **llm_kwargs).generate([prompt], params, use_tqdm=False)[0].outputs[0]
    tokens = out.token_ids
    quantized = [step[token].logprob for step, token in zip(out.logprobs, tokens)]
    forced = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    ref = LLM(model=str(dense), **llm_kwargs).generate([prompt + tokens[:-1]], forced, use_tqdm=False)[0]
    scored = [ref.prompt_logprobs[len(prompt) + i][token].logprob for i, token in enumerate(tokens[:-1])]
    return max(abs(a - b) for a, b in zip(quantized, scored))
