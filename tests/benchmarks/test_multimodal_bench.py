"""benchmarks/multimodal_throughput.py end to end on tiny Qwen2.5-VL and LLaVA configs with dummy weights: every
request is encoded (one image each, none repeated), and the rates are those of its own counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "multimodal"))

import multimodal_throughput  # noqa: E402
from tiny_vlm import FAMILIES  # noqa: E402

# image tokens of a 56x56 image: Qwen2.5-VL's 2x2 merged patches; LLaVA's 16 patches (any image)
IMAGE_TOKENS = {"qwen2_5_vl": 4, "llava": 16}


@pytest.mark.parametrize("family", list(IMAGE_TOKENS))
def test_every_request_encodes_its_image(family, tmp_path, monkeypatch) -> None:
    config, _, images, hf_class = FAMILIES[family]()
    config.architectures = [hf_class.__name__]
    config.save_pretrained(tmp_path / "config")
    images.save_pretrained(tmp_path / "config")
    result_file = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", ["multimodal_throughput.py", str(tmp_path / "config"), "--load-format", "dummy",
                                      "--dtype", "float32", "--num-prompts", "5", "--input-len", "6",
                                      "--output-len", "3", "--image-size", "56", "--result-file", str(result_file)])
    encoded = []
    from pagoda.multimodal.step import MultimodalStep

    real = MultimodalStep.encode_missing
    monkeypatch.setattr(MultimodalStep, "encode_missing",
                        lambda self, items: (encoded.extend(i.content_hash for i in items), real(self, items))[1])
    multimodal_throughput.main()
    result = json.loads(result_file.read_text())
    markers = 2 if family == "qwen2_5_vl" else 0  # <vision_start> and <vision_end>
    assert result["prompt_tokens"] == 6 + markers + IMAGE_TOKENS[family]
    assert len(set(encoded)) == 8 + 5  # the warm-up's images and the timed ones, each its own
    assert result["requests_per_s"] == pytest.approx(5 / result["seconds"], rel=1e-2)
