"""The parameters of one request, validated once when it arrives: :class:`SamplingParams`, the
:class:`GuidedDecodingParams` it may carry, and :class:`BeamSearchParams` (vLLM's module and names).

Names and defaults follow vLLM's ``SamplingParams`` (and so the OpenAI API where they overlap):
``temperature=0`` means greedy; ``top_k`` of 0 or -1 disables top-k; ``max_tokens=None`` means
"up to the model's context length"; ``logprobs=k`` asks for the top-k logprobs *besides* the
sampled token. Penalties use OpenAI semantics for presence/frequency and HF/vLLM semantics for
repetition (see ``pagoda.sampling.sampler``); ``logit_bias``, ``allowed_token_ids`` and ``bad_words``
are described in ``pagoda.sampling.token_controls``; ``best_of`` samples more sequences than it
returns (the front end keeps the n with the highest cumulative logprob). A bad value raises
``RequestError`` (a ValueError) naming the field and the allowed range, so the HTTP layer can
answer 400; token ids are checked against the vocabulary by :meth:`SamplingParams.check_vocab`
once the engine is known.
"""

from __future__ import annotations

import dataclasses
import json as jsonlib
import math
from dataclasses import dataclass, field
from typing import Any

from pagoda.errors import RequestError

GUIDED_KINDS = ("json", "json_object", "regex", "choice", "grammar")


@dataclass
class GuidedDecodingParams:
    """Constrain a request's output; names follow vLLM's ``GuidedDecodingParams``."""

    json: dict[str, Any] | str | None = None  # a JSON schema (a dict or its JSON text)
    json_object: bool = False  # any JSON object
    regex: str | None = None
    choice: list[str] | None = None  # the output is exactly one of these strings
    grammar: str | None = None  # an EBNF grammar (GBNF style, with a ``root`` rule)
    backend: str | None = None  # a registered guided decoding backend; None: the engine's choice

    def __post_init__(self) -> None:
        given = [k for k in GUIDED_KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise RequestError(f"guided decoding takes exactly one of {', '.join(GUIDED_KINDS)}; got "
                               f"{', '.join(given) if given else 'none'}: set one")
        if isinstance(self.json, str):
            self.json = _parse_schema(self.json)
        if self.json is not None and not isinstance(self.json, dict):
            raise RequestError(f"guided json must be a JSON schema object, got {type(self.json).__name__}")
        if self.choice is not None:
            self.choice = _check_choice(self.choice)
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise RequestError(f"guided {name} must be a non-empty string, got {value!r}")

    @property
    def kind(self) -> str:
        """Which of ``GUIDED_KINDS`` this is."""
        return next(k for k in GUIDED_KINDS if getattr(self, k) not in (None, False))


def _parse_schema(text: str) -> dict[str, Any]:
    try:
        schema = jsonlib.loads(text)
    except ValueError as exc:
        raise RequestError(f"guided json is not valid JSON ({exc}); send a JSON schema object") from exc
    if not isinstance(schema, dict):
        raise RequestError(f"guided json must be a JSON schema object, got {type(schema).__name__}")
    return schema


def _check_choice(choice: list[str]) -> list[str]:
    choice = list(choice) if isinstance(choice, (list, tuple)) else choice
    if not isinstance(choice, list) or not choice or not all(isinstance(c, str) and c for c in choice):
        raise RequestError(f"guided choice must be a non-empty list of non-empty strings, got {choice!r}")
    return choice


GREEDY_EPS = 1e-5  # temperatures below this sample greedily (vLLM's threshold)
MAX_LOGPROBS = 20  # the OpenAI API's bound on top logprobs


@dataclass
class SamplingParams:
    """How to pick the next tokens of one request, and when to stop."""

    n: int = 1
    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: disabled
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16  # None: up to max_model_len
    min_tokens: int = 0
    stop: list[str] | str | None = None  # normalised to a list
    stop_token_ids: list[int] | None = field(default=None)  # normalised to a list
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top logprobs besides the sampled token
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    guided_decoding: GuidedDecodingParams | None = None  # constrain the output (docs/structured_output.md)
    logit_bias: dict[int, float] | None = None  # token id -> bias added to its logit, each in [-100, 100] (OpenAI)
    allowed_token_ids: list[int] | None = None  # only these tokens may be sampled
    bad_words: list[str] | None = None  # words that may not be generated (vLLM; see pagoda.sampling.token_controls)
    bad_words_token_ids: list[list[int]] | None = None  # their token sequences: the front end fills them in
    best_of: int | None = None  # sample this many sequences, return the n with the highest cumulative logprob

    def __post_init__(self) -> None:
        self.stop = _normalise_stop(self.stop)
        self.stop_token_ids = _normalise_stop_token_ids(self.stop_token_ids)
        self._validate_numbers()
        self._validate_lengths()
        self.guided_decoding = _check_guided(self.guided_decoding)
        _validate_token_controls(self)
        self._validate_best_of()
        if self.guided_decoding is not None and self.min_tokens:
            raise RequestError("min_tokens cannot be combined with guided decoding: holding back the end of a "
                               "finished grammar would leave no allowed token; drop min_tokens")

    @property
    def is_greedy(self) -> bool:
        """True when sampling reduces to argmax (temperature below ``GREEDY_EPS``)."""
        return self.temperature < GREEDY_EPS

    @property
    def uses_top_k(self) -> bool:
        return self.top_k > 0

    def for_child(self, index: int) -> SamplingParams:
        """Params of the ``index``-th of the n sequences of a request: n=1, seed offset by index."""
        seed = None if self.seed is None else self.seed + index
        return dataclasses.replace(self, n=1, seed=seed)

    def check_vocab(self, vocab_size: int) -> None:
        """RequestError if a token id of logit_bias, allowed_token_ids or bad words is outside the vocabulary."""
        if not (self.logit_bias or self.allowed_token_ids or self.bad_words_token_ids):
            return  # the common case, e.g. every pooling request: nothing to check
        fields = {"logit_bias": list(self.logit_bias or ()), "allowed_token_ids": self.allowed_token_ids or [],
                  "bad_words": [t for seq in self.bad_words_token_ids or () for t in seq]}
        for name, ids in fields.items():
            outside = sorted({t for t in ids if t >= vocab_size})
            if outside:
                raise RequestError(f"{name} has token ids outside the vocabulary [0, {vocab_size}): {outside[:5]}; "
                                   f"use ids below {vocab_size}")

    def _validate_best_of(self) -> None:
        if self.best_of is None:
            return
        _check_int("best_of", self.best_of, self.n)
        if self.best_of > 1 and self.is_greedy:
            raise RequestError(f"best_of > 1 needs sampling (temperature > 0), got best_of={self.best_of} with greedy "
                               "sampling, whose sequences are all the same; set temperature or drop best_of")

    def _validate_numbers(self) -> None:
        _check_int("n", self.n, 1)
        _check_range("temperature", self.temperature, ">= 0", lambda v: v >= 0)
        _check_int("top_k", self.top_k, -1)
        _check_range("top_p", self.top_p, "in (0, 1]", lambda v: 0 < v <= 1)
        _check_range("min_p", self.min_p, "in [0, 1]", lambda v: 0 <= v <= 1)
        _check_range("presence_penalty", self.presence_penalty, "in [-2, 2]", lambda v: -2 <= v <= 2)
        _check_range("frequency_penalty", self.frequency_penalty, "in [-2, 2]", lambda v: -2 <= v <= 2)
        _check_range("repetition_penalty", self.repetition_penalty, "> 0", lambda v: v > 0)
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise RequestError(f"seed must be an int or None, got {self.seed!r}")

    def _validate_lengths(self) -> None:
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1)
        _check_int("min_tokens", self.min_tokens, 0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RequestError(
                f"min_tokens must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}"
            )
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None:
                _check_int(name, value, 0, MAX_LOGPROBS)


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(f"{name} must be an int {allowed}, got {value!r}")
    if value < low or (high is not None and value > high):
        raise RequestError(f"{name} must be {allowed}, got {value}")


def _check_range(name: str, value: object, allowed: str, ok) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{name} must be a number {allowed}, got {value!r}")
    if math.isnan(value) or not ok(value):  # NaN fails every range
        raise RequestError(f"{name} must be {allowed}, got {value}")


def _normalise_stop(stop: list[str] | str | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise RequestError(f"stop must be a non-empty string or a list of them, got {s!r}")
    return stops


def _normalise_stop_token_ids(ids: list[int] | None) -> list[int]:
    if ids is None:
        return []
    ids = list(ids)
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise RequestError(f"stop_token_ids must be ints >= 0, got {t!r}")
    return ids


def _validate_token_controls(p: SamplingParams) -> None:
    """Normalise and check logit_bias, allowed_token_ids and bad words (the vocabulary is checked later)."""
    if p.logit_bias is not None:
        p.logit_bias = _normalise_logit_bias(p.logit_bias)
    if p.allowed_token_ids is not None:
        p.allowed_token_ids = list(p.allowed_token_ids)
        if not p.allowed_token_ids:
            raise RequestError("allowed_token_ids must not be empty (nothing could be sampled); drop it to allow all")
        _check_token_ids("allowed_token_ids", p.allowed_token_ids)
    if p.bad_words is not None:
        words = [p.bad_words] if isinstance(p.bad_words, str) else list(p.bad_words)
        if not all(isinstance(w, str) and w.strip() for w in words):
            raise RequestError(f"bad_words must be a list of non-blank strings, got {p.bad_words!r}")
        p.bad_words = words
    if p.bad_words_token_ids is not None:
        p.bad_words_token_ids = [list(seq) for seq in p.bad_words_token_ids]
        for seq in p.bad_words_token_ids:
            if not seq:
                raise RequestError("bad_words_token_ids must hold non-empty token sequences")
            _check_token_ids("bad_words_token_ids", seq)


def _normalise_logit_bias(bias: object) -> dict[int, float]:
    if not isinstance(bias, dict):
        raise RequestError(f"logit_bias must map token ids to biases, got {type(bias).__name__}")
    out: dict[int, float] = {}
    for key, value in bias.items():
        token = int(key) if isinstance(key, str) and key.strip().isdigit() else key
        if not isinstance(token, int) or isinstance(token, bool) or token < 0:
            raise RequestError(f"logit_bias keys must be token ids (ints >= 0), got {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100 <= value <= 100:
            raise RequestError(f"logit_bias values must be numbers in [-100, 100], got {value!r} for token {token}")
        out[token] = float(value)
    return out


def _check_token_ids(name: str, ids: list) -> None:
    for t in ids:
        if not isinstance(t, int) or isinstance(t, bool) or t < 0:
            raise RequestError(f"{name} must hold token ids (ints >= 0), got {t!r}")


def _check_guided(guided: GuidedDecodingParams | dict | None) -> GuidedDecodingParams | None:
    """The guided decoding spec, its shape checked (its grammar is the backend's to check: the front end
    calls ``pagoda.guided.runtime.validate_guided`` before queueing the request)."""
    if guided is None:
        return None
    if isinstance(guided, dict):
        guided = GuidedDecodingParams(**guided)
    if not isinstance(guided, GuidedDecodingParams):
        raise RequestError(f"guided_decoding must be a GuidedDecodingParams, got {type(guided).__name__}")
    return guided


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
