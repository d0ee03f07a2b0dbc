"""Prefill chunks keep an image's placeholder run whole for models whose image tokens see their whole image."""

from __future__ import annotations

from pagoda.multimodal_inputs import MultimodalItem
from pagoda.request import Request
from pagoda.sampling_params import SamplingParams


def request(whole: bool) -> Request:
    item = MultimodalItem("image", offset=10, length=4, content_hash="h", tensors={})  # tokens [10, 14)
    return Request("r", list(range(20)), SamplingParams(), mm_items=[item], whole_image_runs=whole)


def test_a_chunk_ends_before_the_run_or_waits_for_room():
    req = request(whole=True)
    assert req.chunk_size(8, 4, step_tokens=8) == 2  # would end at 12, inside: ends at the run instead
    assert req.chunk_size(10, 3, step_tokens=8) == 0  # the run starts the chunk and does not fit now: wait
    assert req.chunk_size(12, 1, step_tokens=8) == 0  # resumed inside the run (a prefix-cache hit): the rest whole
    assert req.chunk_size(8, 6, step_tokens=8) == 6  # ends with the run
    assert req.chunk_size(14, 3, step_tokens=8) == 3  # after it
    assert req.chunk_size(10, 3, step_tokens=3) == 3  # a run longer than any step is cut all the same


def test_other_models_cut_anywhere():
    assert request(whole=False).chunk_size(8, 4, step_tokens=8) == 4
