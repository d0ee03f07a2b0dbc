"""Part `vlm`: a vision-language model on prompts with one image each, Pagoda (benchmarks/multimodal_throughput.py)
and vLLM (vllm_vlm.py) on the same model folder and the same requests.

The folder is written once (`multimodal_throughput.model_dir`: the config, its image processor's
preprocessor_config.json and a synthetic tokenizer whose image markers carry the names the HF processor looks
for); both sides build the same requests from it (`multimodal_throughput.image_requests`: 64 random words, the
family's image placeholder, one random 448x448 image each, seed 0) and run the same warm-up. max_model_len 4096 on
both (as the `multimodal` device suite), the run's scheduler limits on both.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import engines
import report
from steps import read_json

BENCHMARKS = Path(__file__).resolve().parents[1]
VLM_MAX_MODEL_LEN = 4096
METRICS = ("requests_per_s", "output_tokens_per_s", "tokens_per_s", "prompt_tokens")


@dataclass(frozen=True)
class VLMWorkload:
    name: str = "vlm_500x(64w+448px)x128"
    num_prompts: int = 500
    input_len: int = 64
    output_len: int = 128
    image_size: int = 448

    def quick(self) -> "VLMWorkload":
        return replace(self, name="quick_" + self.name, num_prompts=8, input_len=16, output_len=8, image_size=112)


VLM = VLMWorkload()


def with_max_model_len(flags: list[str], length: int) -> list[str]:
    """The shared engine flags with max_model_len set to ``length``."""
    out = list(flags)
    out[out.index("--max-model-len") + 1] = str(length)
    return out


def workload_flags(w: VLMWorkload) -> list[str]:
    return ["--num-prompts", str(w.num_prompts), "--input-len", str(w.input_len), "--output-len", str(w.output_len),
            "--image-size", str(w.image_size)]


def pagoda_cmd(s: engines.Settings, w: VLMWorkload, model_dir: Path, result: Path) -> list[str]:
    return [s.python, str(BENCHMARKS / "multimodal_throughput.py"), str(model_dir), "--prepared",
            *with_max_model_len(engines.shared_flags(), VLM_MAX_MODEL_LEN), *s.limit_flags(), *s.pagoda_flags,
            *workload_flags(w), "--result-file", str(result)]


def vllm_cmd(s: engines.Settings, w: VLMWorkload, model_dir: Path, result: Path) -> list[str]:
    return [s.python, str(engines.HERE / "vllm_vlm.py"), "--model", str(model_dir), *workload_flags(w),
            "--limits", s.limits, f"--engine-flag=--max-model-len={VLM_MAX_MODEL_LEN}", "--result-file", str(result),
            *[f"--engine-flag={f}" for f in s.vllm_flags]]


def build_model_dir(config_dir: Path, dest: Path) -> Path:
    sys.path.insert(0, str(BENCHMARKS))
    import multimodal_throughput

    return multimodal_throughput.model_dir(config_dir, dest)


def measurements(engine: str, raw: dict, w: VLMWorkload, limits: str) -> list[dict]:
    metrics = {k: raw[k] for k in METRICS if k in raw}
    return [report.measurement(w.name, "offline", engine, metrics, limits)] if "requests_per_s" in metrics else []


def run(r) -> None:
    """The part's steps on run.py's Run: the model folder once, then each engine's offline run."""
    w = VLM.quick() if r.args.quick else VLM
    raw_dir = r.work / "raw"
    raw_dir.mkdir(exist_ok=True)
    model_dir = build_model_dir(Path(r.args.vlm_config), r.work / "vlm_model")
    for engine, cmd in (("pagoda", pagoda_cmd), ("vllm", vllm_cmd)):
        if engine in r.engines:
            path = raw_dir / f"{engine}_vlm.json"
            rec = r.step(w.name, engine, cmd(r.s, w, model_dir, path), 360)
            rec.result = read_json(path)
            r.measurements += measurements(engine, rec.result, w, r.s.limits)
