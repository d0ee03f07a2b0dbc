"""Part `lora`: many LoRA adapters over one base model, Pagoda (benchmarks/lora_throughput.py) and vLLM
(vllm_lora.py) on the same adapters, written once to a folder both engines load (PEFT format, rank 16 on every
projection, lora_throughput.write_adapters).

Both scripts write the same keys: the base model's requests/s in an engine without LoRA and in the LoRA engine,
with the requests spread over 1, 8 and 32 adapters (`max_loras` 8: 32 adapters swap through 8 slots), and the
decode step at batch 1 and 64, base and one adapter. Each figure becomes a row both ways (workloads lora_base,
lora_engine_base, lora_adapters_N, lora_step_bB_base, lora_step_bB_adapter): Pagoda / vLLM, and each engine against
its own base (`vs_own_base`: requests/s over the engine without LoRA; `step_vs_own_base`: one adapter's decode
step over the base step, lower is better).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import engines
import report
from steps import read_json
from workloads import MATCHED_MAX_NUM_SEQS

BENCHMARKS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LoRAWorkload:
    """num_prompts x input_len/output_len, the requests spread round-robin over each adapter count."""

    name: str = "lora"  # rows: lora_base, lora_engine_base, lora_adapters_8, lora_step_b64_adapter, ...
    num_prompts: int = 1000
    input_len: int = 256
    output_len: int = 256
    rank: int = 16
    adapter_counts: tuple[int, ...] = (1, 8, 32)
    max_loras: int = 8
    batch_sizes: tuple[int, ...] = (1, 64)

    def quick(self) -> "LoRAWorkload":
        return replace(self, name="quick_" + self.name, num_prompts=12, input_len=16, output_len=16,
                       adapter_counts=(1, 2, 10), batch_sizes=(1, 4))  # 10 adapters through 8 slots: swaps


LORA = LoRAWorkload()


def warmup_flags(s: engines.Settings) -> list[str]:
    """The same warm-up on both sides: a full batch of other prompts (the limits' max_num_seqs), 8 tokens each."""
    seqs = MATCHED_MAX_NUM_SEQS if s.limits == "matched" else engines.PAGODA_DEFAULT_MAX_NUM_SEQS
    return ["--warmup-prompts", str(seqs), "--warmup-output-len", "8"]


def workload_flags(w: LoRAWorkload) -> list[str]:
    return ["--num-prompts", str(w.num_prompts), "--input-len", str(w.input_len), "--output-len", str(w.output_len),
            "--rank", str(w.rank), "--adapter-counts", ",".join(map(str, w.adapter_counts)),
            "--batch-sizes", ",".join(map(str, w.batch_sizes))]


def pagoda_cmd(s: engines.Settings, w: LoRAWorkload, adapter_dir: Path, result: Path) -> list[str]:
    return [s.python, str(BENCHMARKS / "lora_throughput.py"), str(s.model_dir), *engines.shared_flags(),
            *s.limit_flags(), *s.pagoda_flags, *workload_flags(w), "--max-loras", str(w.max_loras),
            "--max-lora-rank", str(w.rank), "--adapter-dir", str(adapter_dir), *warmup_flags(s),
            "--result-file", str(result)]


def vllm_cmd(s: engines.Settings, w: LoRAWorkload, phase: str, adapter_dir: Path, result: Path) -> list[str]:
    return [s.python, str(engines.HERE / "vllm_lora.py"), "--model", str(s.model_dir), "--phase", phase,
            "--adapter-dir", str(adapter_dir), *workload_flags(w), "--max-loras", str(w.max_loras),
            "--limits", s.limits, *warmup_flags(s), "--result-file", str(result),
            *[f"--engine-flag={f}" for f in s.vllm_flags]]


def write_adapters(model_dir: Path, folder: Path, w: LoRAWorkload) -> list[Path]:
    """The adapters both engines load, written by lora_throughput.py's writer (kept when already there)."""
    from transformers import AutoConfig

    sys.path.insert(0, str(BENCHMARKS))
    import lora_throughput

    return lora_throughput.write_adapters(AutoConfig.from_pretrained(model_dir), folder, w.rank, max(w.adapter_counts))


def measurements(engine: str, raw: dict, w: LoRAWorkload, limits: str) -> list[dict]:
    """One measurement per figure of the raw results (lora_throughput.py's or vllm_lora.py's, merged phases)."""
    out = []
    base = raw.get("base_req_per_s")
    runs = {"engine_base": raw.get("lora_engine_base_req_per_s"),
            **{f"adapters_{n}": raw.get(f"adapters_{n}_req_per_s") for n in w.adapter_counts}}
    if base:
        out.append(report.measurement(f"{w.name}_base", "offline", engine, {"requests_per_s": base}, limits))
    for run, rate in runs.items():
        if rate:
            metrics = {"requests_per_s": rate, **({"vs_own_base": rate / base} if base else {})}
            out.append(report.measurement(f"{w.name}_{run}", "offline", engine, metrics, limits))
    base_steps, adapter_steps = raw.get("base_step_ms") or {}, raw.get("one_adapter_step_ms") or {}
    for batch in w.batch_sizes:
        base_ms, adapter_ms = base_steps.get(str(batch), base_steps.get(batch)), adapter_steps.get(str(batch),
                                                                                                   adapter_steps.get(batch))
        if base_ms:
            out.append(report.measurement(f"{w.name}_step_b{batch}_base", "offline", engine, {"step_ms": base_ms}, limits))
        if adapter_ms:
            metrics = {"step_ms": adapter_ms, **({"step_vs_own_base": adapter_ms / base_ms} if base_ms else {})}
            out.append(report.measurement(f"{w.name}_step_b{batch}_adapter", "offline", engine, metrics, limits))
    return out


def run(r) -> None:
    """The part's steps on run.py's Run: adapters once, Pagoda's two engines in one process, vLLM's two phases."""
    w = LORA.quick() if r.args.quick else LORA
    raw_dir, adapter_dir = r.work / "raw", r.work / "lora_adapters"
    raw_dir.mkdir(exist_ok=True)
    write_adapters(r.model_dir, adapter_dir, w)
    if "pagoda" in r.engines:
        rec = r.step(w.name, "pagoda", pagoda_cmd(r.s, w, adapter_dir, raw_dir / "pagoda_lora.json"), 480)
        rec.result = read_json(raw_dir / "pagoda_lora.json")
        r.measurements += measurements("pagoda", rec.result, w, r.s.limits)
    if "vllm" in r.engines:
        merged = {}
        for phase, cap in (("base", 240), ("lora", 420)):
            path = raw_dir / f"vllm_lora_{phase}.json"
            rec = r.step(f"{w.name}_{phase}", "vllm", vllm_cmd(r.s, w, phase, adapter_dir, path), cap)
            rec.result = read_json(path)  # written after each figure: partial on timeout
            merged.update(rec.result)
        r.measurements += measurements("vllm", merged, w, r.s.limits)

