"""The offline pooling API of ``LLM`` (runner "pooling"): ``encode``, ``embed``, ``classify``, ``score``.

Names and return types follow vLLM's: ``llm.embed(prompts)[i].outputs.embedding``,
``llm.score(query, documents)[i].outputs.score``. Every prompt is one pooling request through
the same scheduler as generation (continuous batching; each request takes one step). Text
prompts (and text pairs) are tokenized in one batch call of the tokenizer.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence, Union

import torch
import torch.nn.functional as F

from pagoda.entrypoints.offline_run import run_requests
from pagoda.pooling.outputs import (ClassificationRequestOutput, EmbeddingRequestOutput, PoolingOutput,
                                    PoolingRequestOutput, ScoringRequestOutput)
from pagoda.pooling_params import PoolingParams

if TYPE_CHECKING:
    from pagoda.engine.engine import LLMEngine

Prompt = Union[str, list[int], dict[str, Any]]
Encoded = tuple[list[int], "str | None", PoolingParams]  # token ids, text, params of one request


class PoolingAPI:
    """Mixed into ``LLM``: needs its ``engine`` (an LLMEngine) and ``_encode(prompt) -> (ids, text)``."""

    engine: "LLMEngine"

    def encode(self, prompts: Prompt | Sequence[Prompt], pooling_params: PoolingParams | None = None,
               use_tqdm: bool = True, truncate_prompt_tokens: int | None = None) -> list[PoolingRequestOutput]:
        """Pooled hidden states of each prompt (``.outputs.data``, a tensor), not normalized unless asked."""
        return self._pool(_as_prompts(prompts), pooling_params, "encode", use_tqdm, truncate_prompt_tokens)

    def embed(self, prompts: Prompt | Sequence[Prompt], pooling_params: PoolingParams | None = None,
              use_tqdm: bool = True, truncate_prompt_tokens: int | None = None) -> list[EmbeddingRequestOutput]:
        """One embedding per prompt (``.outputs.embedding``): pooled, truncated to ``dimensions``, normalized."""
        self._require_classifier(False, "embed")
        outs = self._pool(_as_prompts(prompts), pooling_params, "embed", use_tqdm, truncate_prompt_tokens)
        return [EmbeddingRequestOutput.from_base(o) for o in outs]

    def classify(self, prompts: Prompt | Sequence[Prompt], pooling_params: PoolingParams | None = None,
                 use_tqdm: bool = True, truncate_prompt_tokens: int | None = None) -> list[ClassificationRequestOutput]:
        """Label probabilities of each prompt (``.outputs.probs``), for classifier models."""
        self._require_classifier(True, "classify")
        outs = self._pool(_as_prompts(prompts), pooling_params, "classify", use_tqdm, truncate_prompt_tokens)
        return [ClassificationRequestOutput.from_base(o) for o in outs]

    def score(self, text_1: str | Sequence[str], text_2: str | Sequence[str],
              pooling_params: PoolingParams | None = None, use_tqdm: bool = True,
              truncate_prompt_tokens: int | None = None) -> list[ScoringRequestOutput]:
        """A score per pair (``.outputs.score``): one ``text_1`` against each ``text_2``, or pairwise.

        A cross-encoder (a classifier) reads each pair as one input; an embedding model scores the
        cosine similarity of the two texts' embeddings.
        """
        pairs = score_pairs(text_1, text_2)
        if self._pooling_info().num_labels:
            return self._cross_encode(pairs, pooling_params, use_tqdm, truncate_prompt_tokens)
        return self._bi_encode(pairs, pooling_params, use_tqdm, truncate_prompt_tokens)

    # -- helpers ----------------------------------------------------------------------------
    def _pooling_info(self):
        info = self.engine.info
        if info.runner != "pooling" or info.pooling is None:
            raise ValueError("this LLM generates text (runner 'generate'); embed/encode/classify/score need a pooling "
                             "model: LLM(model, runner='pooling'), e.g. a BertModel or a decoder used for embeddings")
        return info.pooling

    def _require_classifier(self, wanted: bool, api: str) -> None:
        is_classifier = bool(self._pooling_info().num_labels)
        if is_classifier and not wanted:
            raise ValueError(f"{api}() needs an embedding model, and this one is a classifier (cross-encoder); use "
                             "classify() or score()")
        if wanted and not is_classifier:
            raise ValueError(f"{api}() needs a classifier (e.g. BertForSequenceClassification), and this is an "
                             "embedding model; use embed(), or score() for cosine similarity")

    def _pool(self, prompts: list[Prompt], params: PoolingParams | None, task: str, use_tqdm: bool,
              truncate: int | None) -> list[PoolingRequestOutput]:
        info = self._pooling_info()
        base = dataclasses.replace(params or PoolingParams(), task=task)
        if base.dimensions is not None and base.dimensions > info.hidden_size:
            raise ValueError(f"dimensions must be at most {info.hidden_size} (this model's embedding size), "
                             f"got {base.dimensions}")
        return self._run_pooling([(ids, text, base) for ids, text in self._encode_all(prompts, truncate)], use_tqdm)

    def _encode_all(self, prompts: list[Prompt], truncate: int | None) -> list[tuple[list[int], str | None]]:
        """Token ids and text of each prompt, cut to ``truncate``; the texts in one tokenizer call."""
        limit = truncation_limit(truncate, self.engine.max_model_len)
        tokenizer = self.engine.tokenizer
        texts = {} if tokenizer is None else {i: t for i, t in enumerate(map(_plain_text, prompts)) if t is not None}
        batch = iter(tokenizer(list(texts.values()), **ids_only_args(limit))["input_ids"] if texts else [])
        return [(next(batch), texts[i]) if i in texts else self._encode_truncated(p, limit)
                for i, p in enumerate(prompts)]

    def _encode_truncated(self, prompt: Prompt, limit: int | None) -> tuple[list[int], str | None]:
        ids, text = self._encode(prompt)
        if limit is None or len(ids) <= limit:
            return ids, text
        if text is not None:  # the tokenizer keeps its special tokens ([CLS] ... [SEP]) when it truncates
            return self.engine.tokenizer(text, **_truncation(limit))["input_ids"], text
        return ids[:limit], text

    def _run_pooling(self, items: list[Encoded], use_tqdm: bool) -> list[PoolingRequestOutput[PoolingOutput]]:
        # a prompt the engine refuses raises from its add, and run_requests aborts the ones queued before it
        adds = [partial(self.engine.add_pooling_request, prompt_token_ids=ids, params=params, prompt=text)
                for ids, text, params in items]
        return run_requests(self.engine, adds, use_tqdm, "Pooling", tokens=lambda out: len(out.prompt_token_ids))

    def _cross_encode(self, pairs: list[tuple[str, str]], params: PoolingParams | None, use_tqdm: bool,
                      truncate: int | None) -> list[ScoringRequestOutput]:
        base = dataclasses.replace(params or PoolingParams(), task="score")
        limit = truncation_limit(truncate, self.engine.max_model_len)
        items = [(ids, None, dataclasses.replace(base, segment_start=segment_start))
                 for ids, segment_start in encode_pairs(self.engine.tokenizer, pairs, limit)]
        return [ScoringRequestOutput.of(o.request_id, pair_score(o.outputs.data), o.prompt_token_ids)
                for o in self._run_pooling(items, use_tqdm)]

    def _bi_encode(self, pairs: list[tuple[str, str]], params: PoolingParams | None, use_tqdm: bool,
                   truncate: int | None) -> list[ScoringRequestOutput]:
        texts = list(dict.fromkeys(t for pair in pairs for t in pair))  # each distinct text embedded once
        outs = {t: o for t, o in zip(texts, self._pool(texts, params, "embed", use_tqdm, truncate))}
        scores = []
        for i, (a, b) in enumerate(pairs):
            score = cosine(outs[a].outputs.data, outs[b].outputs.data)
            ids = outs[a].prompt_token_ids + outs[b].prompt_token_ids
            scores.append(ScoringRequestOutput.of(f"score-{i}", score, ids))
        return scores


def score_pairs(text_1: str | Sequence[str], text_2: str | Sequence[str]) -> list[tuple[str, str]]:
    """``text_1`` x ``text_2`` as pairs: one against many, or pairwise for two lists of one length."""
    first = [text_1] if isinstance(text_1, str) else list(text_1)
    second = [text_2] if isinstance(text_2, str) else list(text_2)
    if not first or not second:
        raise ValueError("score() needs at least one text on each side")
    if len(first) == 1:
        first = first * len(second)
    if len(first) != len(second):
        raise ValueError(f"score() got {len(first)} texts for text_1 and {len(second)} for text_2: pass one text_1, "
                         "or as many as text_2 (scored pairwise)")
    for text in first + second:
        if not isinstance(text, str):
            raise TypeError(f"score() takes strings, got {type(text).__name__}")
    return list(zip(first, second))


def encode_pairs(tokenizer, pairs: list[tuple[str, str]], max_length: int | None) -> list[tuple[list[int], int | None]]:
    """Token ids of each text pair as a cross-encoder reads it, and where its second text starts, in one
    tokenizer call."""
    if tokenizer is None:
        raise ValueError("scoring text pairs needs the model's tokenizer; drop skip_tokenizer_init")
    encoded = tokenizer([a for a, _ in pairs], [b for _, b in pairs], **_truncation(max_length))
    types = encoded.get("token_type_ids") or [None] * len(pairs)
    return [(list(ids), t.index(1) if t and 1 in t else None) for ids, t in zip(encoded["input_ids"], types)]


def pair_score(data: torch.Tensor) -> float:
    """A cross-encoder's score of a pair: its one label's value (with two or more labels, the last
    one's, the "relevant" class of binary rerankers)."""
    return float(data.reshape(-1)[-1])


def cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    return F.cosine_similarity(x.reshape(1, -1).float(), y.reshape(1, -1).float()).item()


def truncation_limit(truncate: int | None, max_model_len: int) -> int | None:
    """``truncate_prompt_tokens``: None (off), -1 (the model's length) or a positive token count."""
    if truncate is None:
        return None
    if truncate == -1:
        return max_model_len
    if not isinstance(truncate, int) or truncate < 1:
        raise ValueError(f"truncate_prompt_tokens must be -1 (max_model_len) or an int >= 1, got {truncate!r}")
    return min(truncate, max_model_len)


def _truncation(max_length: int | None) -> dict:
    """The tokenizer's arguments that cut a text to ``max_length`` tokens (None: no cut)."""
    return {"truncation": True, "max_length": max_length} if max_length else {}


def ids_only_args(max_length: int | None) -> dict:
    """:func:`_truncation`, and no attention masks or token types (unused, and 5% of a batch call)."""
    return {**_truncation(max_length), "return_attention_mask": False, "return_token_type_ids": False}


def _plain_text(prompt: Prompt) -> str | None:
    """The text of a prompt given as text only (a string or ``{"prompt": text}``), else None."""
    if isinstance(prompt, dict) and "prompt_token_ids" not in prompt:
        prompt = prompt.get("prompt")
    return prompt if isinstance(prompt, str) else None


def _as_prompts(prompts) -> list[Prompt]:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]
    return list(prompts)
