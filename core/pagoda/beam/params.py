"""What a beam search request asks for (``LLM.beam_search`` offline, ``use_beam_search`` on the server)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams

EARLY_STOPPING = (True, False, "never")


@dataclass
class BeamSearchParams:
    """Deterministic beam search with HF transformers' semantics (``generate(num_beams=..., do_sample=False)``).

    ``length_penalty`` and ``early_stopping`` mean what they mean in HF: a finished sequence of
    ``L`` generated tokens (its EOS included) scores ``sum of its logprobs / L ** length_penalty``;
    ``early_stopping=True`` stops once ``beam_width`` sequences have finished, ``False`` stops when
    the best running beam, scored at its current length, cannot beat the worst finished one, and
    ``"never"`` scores it at ``max_tokens`` instead when ``length_penalty > 0``. See docs/beam_search.md.
    """

    beam_width: int
    max_tokens: int | None = 16  # None: up to the context length
    ignore_eos: bool = False
    length_penalty: float = 1.0
    early_stopping: bool | str = False

    def __post_init__(self) -> None:
        for name, low in (("beam_width", 1), ("max_tokens", 1)):
            value = getattr(self, name)
            if value is None and name == "max_tokens":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise RequestError(f"{name} must be an int >= {low}, got {value!r}")
        penalty = self.length_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not math.isfinite(penalty):
            raise RequestError(f"length_penalty must be a finite number, got {penalty!r}")
        if self.early_stopping not in EARLY_STOPPING or not isinstance(self.early_stopping, (bool, str)):
            raise RequestError(f"early_stopping must be true, false or \"never\", got {self.early_stopping!r}")

    def output_params(self, logprobs: int | None = 0) -> SamplingParams:
        """The SamplingParams the front end tracks the ``beam_width`` returned sequences with
        (``logprobs=k``: k top logprobs per token; 0 keeps only each chosen token's)."""
        return SamplingParams(n=self.beam_width, temperature=0.0, max_tokens=self.max_tokens,
                              ignore_eos=self.ignore_eos, logprobs=logprobs)
