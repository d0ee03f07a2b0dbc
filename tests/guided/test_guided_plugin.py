"""The guided decoding plugin kind without a model: registration, the bitmask format, a fake
backend driving GuidedSampling, and front-end validation errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pagoda.request import Request
from pagoda.engine.engine import resolve_params
from pagoda.errors import RequestError
from pagoda.guided import runtime
from pagoda.guided.bitmask import allocate_bitmask, apply_bitmask
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.runtime import GuidedSampling
from pagoda.hookspecs import hookimpl
from pagoda.interfaces import GrammarMatcher, GuidedDecodingBackend
from pagoda.plugins.manager import PluginManager
from pagoda.sampling_params import SamplingParams

VOCAB = 70  # not a multiple of 32: the last word is partly padding


class EvenMatcher(GrammarMatcher):
    """Allows even tokens only; terminates after 3 accepted tokens."""

    def __init__(self) -> None:
        self.accepted: list[int] = []

    def accept(self, token_id: int) -> bool:
        if token_id % 2:
            return False
        self.accepted.append(token_id)
        return True

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        allowed = torch.zeros(bitmask.shape[1] * 32, dtype=torch.bool)
        allowed[0:VOCAB:2] = True
        bitmask[row] = _pack(allowed)

    def is_terminated(self) -> bool:
        return len(self.accepted) >= 3


class EvenBackend(GuidedDecodingBackend):
    description = "test: even token ids only"
    priority = 100

    @classmethod
    def validate(cls, params: GuidedDecodingParams) -> None:
        if params.regex == "bad":
            raise RequestError("regex 'bad' is bad")

    def new_matcher(self, params: GuidedDecodingParams) -> GrammarMatcher:
        return EvenMatcher()


class EvenPlugin:
    @hookimpl
    def register_guided_decoding_backends(self, register) -> None:
        register("even", EvenBackend)


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """Bools [words * 32] -> int32 words, bit t % 32 of word t // 32 (the documented format)."""
    bits = allowed.view(-1, 32).to(torch.int64) << torch.arange(32)
    return bits.sum(dim=1).to(torch.int64).apply_(lambda v: v - (1 << 32) if v >= 1 << 31 else v).to(torch.int32)


@pytest.fixture
def even_registered(monkeypatch: pytest.MonkeyPatch) -> PluginManager:
    pm = PluginManager(modules={"even-grammar": EvenPlugin()}, entry_points=False, allow=None, block="")
    monkeypatch.setattr("pagoda.plugins.manager._MANAGER", pm)
    return pm


def test_the_kind_registers_xgrammar_and_rejects_non_backends() -> None:
    class Bad:
        @hookimpl
        def register_guided_decoding_backends(self, register) -> None:
            register("bad", object)

    pm = PluginManager(modules={"bad": Bad()}, entry_points=False, allow=None, block="")
    assert pm.plugins["builtin"].registers["guided_decoding"] == ["xgrammar"]
    assert pm.plugins["bad"].status == "failed"
    assert "must be a subclass of pagoda.interfaces.GuidedDecodingBackend" in pm.plugins["bad"].errors[0]


def test_apply_bitmask_masks_exactly_the_cleared_bits() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, VOCAB)
    allowed = torch.rand(2, VOCAB) < 0.3
    bitmask = allocate_bitmask(2, VOCAB)
    for i in range(2):
        padded = torch.zeros(bitmask.shape[1] * 32, dtype=torch.bool)
        padded[:VOCAB] = allowed[i]
        bitmask[i] = _pack(padded)
    expected = logits.clone()
    expected[0] = expected[0].masked_fill(~allowed[0], float("-inf"))  # rows 0 and 2 are guided
    expected[2] = expected[2].masked_fill(~allowed[1], float("-inf"))
    apply_bitmask(logits, bitmask, [0, 2])
    assert torch.equal(logits, expected)


def test_a_plugin_backend_masks_logits_and_follows_accepted_tokens(even_registered) -> None:
    guided = GuidedSampling(tokenizer=None, vocab_size=VOCAB, stop_token_ids=[0], default_backend="auto")
    params = SamplingParams(guided_decoding=GuidedDecodingParams(regex="x"))
    free = Request("free", [1, 2], SamplingParams())
    req = Request("g", [1, 2], params)
    logits = torch.zeros(2, VOCAB)
    guided.mask(logits, [free, req])
    assert torch.isfinite(logits[0]).all()  # the unguided row is untouched
    assert torch.isfinite(logits[1, ::2]).all() and torch.isinf(logits[1, 1::2]).all()
    for token in (4, 6, 8):
        req.append_token(token)
    logits = torch.zeros(1, VOCAB)
    guided.mask(logits, [req])  # caught up with 3 tokens: terminated, so the row is left free
    assert guided.states["g"].matcher.accepted == [4, 6, 8] and torch.isfinite(logits).all()
    guided.release("g")
    assert "g" not in guided.states


def resolved(**spec) -> SamplingParams:
    """A request's params as the front end checks them before queueing (the backend checks the grammar)."""
    return resolve_params(SamplingParams(guided_decoding=GuidedDecodingParams(**spec)), None, VOCAB)


def test_validation_errors_name_the_problem(even_registered) -> None:
    with pytest.raises(RequestError, match="regex 'bad' is bad"):
        resolved(regex="bad")
    with pytest.raises(RequestError, match="Unknown guided decoding backend 'nope'"):
        resolved(regex="a", backend="nope")


@pytest.mark.parametrize("spec, needle", [
    ({"regex": "("}, "guided regex is not valid for xgrammar: Regex parsing error"),
    ({"grammar": "root ::= foo"}, 'Rule "foo" is not defined'),
    ({"json": {"type": "nonsense"}}, 'Unsupported type "nonsense"'),
    ({"json": "{not json"}, "guided json is not valid JSON"),
    ({"choice": []}, "non-empty list"),
    ({"regex": "a", "choice": ["x"]}, "exactly one of json, json_object, regex, choice, grammar; got regex, choice"),
    ({}, "got none"),
])
def test_bad_specs_are_request_errors(spec, needle) -> None:
    with pytest.raises(RequestError, match=needle.replace("(", r"\(").replace('"', '"')):
        resolved(**spec)


def test_backend_class_resolves_auto_to_xgrammar() -> None:
    assert runtime.backend_class("auto").__name__ == "XgrammarBackend"



def test_guided_requests_need_a_tokenizer_and_no_min_tokens(tmp_path) -> None:
    """Refused with the reason, never run unconstrained."""
    from pagoda import LLM, SamplingParams

    with pytest.raises(RequestError, match="min_tokens cannot be combined"):
        SamplingParams(min_tokens=2, guided_decoding=GuidedDecodingParams(choice=["a", "b"]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
    from tiny_models import make_tiny_model

    make_tiny_model(tmp_path, "llama")
    llm = LLM(model=str(tmp_path), skip_tokenizer_init=True, kv_cache_memory=1 << 20)
    with pytest.raises(RequestError, match="needs the model's tokenizer"):
        llm.generate([[1, 2, 3]], SamplingParams(guided_decoding=GuidedDecodingParams(choice=["a", "b"])),
                     use_tqdm=False)
