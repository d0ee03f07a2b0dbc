"""Beam search (``LLM.beam_search``, ``use_beam_search`` on the server): HF transformers' rules,
beams forking by sharing KV blocks. See docs/beam_search.md."""

from pagoda.sampling_params import BeamSearchParams

__all__ = ["BeamSearchParams"]
