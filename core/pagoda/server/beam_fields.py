"""vLLM's ``use_beam_search`` on the completions and chat routes -> BeamSearchParams.

``n`` is the beam width (and the number of sequences returned); ``length_penalty`` and
``early_stopping`` have HF transformers' meaning (docs/beam_search.md). Beam search is
deterministic and scores the model's raw logprobs, so a request that also asks for something
that shapes sampling (a temperature other than 0 or 1, top-p, penalties, stop strings, guided
decoding, ...) gets a 400 naming that field rather than a reply that ignores it; so does
``length_penalty`` or ``early_stopping`` without ``use_beam_search``.
"""

from __future__ import annotations

from typing import Any

from pagoda.sampling_params import BeamSearchParams
from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams
from pagoda.server.errors import APIError
from pagoda.server.protocol import SamplingFields

# request field -> the values beam search leaves meaning nothing (None: not sent)
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "temperature": (None, 0, 1), "top_p": (None, 1), "top_k": (None, 0, -1), "min_p": (None, 0),
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "repetition_penalty": (None, 1),
    "stop": (None, "", []), "stop_token_ids": (None, []), "min_tokens": (0,), "logit_bias": (None, {}),
    "allowed_token_ids": (None, []), "bad_words": (None, []), "best_of": (None, 1),
}


def beam_search_params(req: SamplingFields, params: SamplingParams) -> BeamSearchParams | None:
    """The request's beam search (None without ``use_beam_search``); 400 for a field it cannot honour."""
    if not req.use_beam_search:
        for name, neutral in (("length_penalty", 1.0), ("early_stopping", False)):
            if getattr(req, name) != neutral:
                raise APIError(400, f"'{name}' applies to beam search only; send use_beam_search=true, or remove "
                                    f"'{name}'", param=name, code="unsupported_parameter")
        return None
    for name, neutral in NEUTRAL.items():
        value = getattr(req, name, None)
        if value not in neutral:
            raise APIError(400, f"'{name}' cannot be combined with use_beam_search: beam search is deterministic and "
                                f"ranks sequences by the model's raw logprobs; remove '{name}' or use_beam_search",
                           param=name)
    if params.guided_decoding is not None:
        raise APIError(400, "structured output (response_format, guided_*, a required tool call) cannot be combined "
                            "with use_beam_search; remove one of them", param="use_beam_search")
    if params.prompt_logprobs is not None:
        raise APIError(400, "echo with logprobs (the prompt's logprobs) cannot be combined with use_beam_search; "
                            "drop logprobs or use_beam_search", param="use_beam_search")
    try:
        return BeamSearchParams(beam_width=params.n, max_tokens=params.max_tokens, ignore_eos=params.ignore_eos,
                                length_penalty=req.length_penalty, early_stopping=req.early_stopping)
    except RequestError as exc:
        raise APIError(400, str(exc), param=str(exc).split(" ", 1)[0]) from exc
