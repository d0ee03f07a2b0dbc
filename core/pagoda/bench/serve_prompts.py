"""Prompts for `pagoda bench serve`: random ones of a given token length, or read from a JSONL file."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import httpx

from pagoda.bench.serve_requests import RequestInput

WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education river mountain garden music light color paper energy market"
).split()


def load_prompts_file(path: str, num_prompts: int | None, output_len: int) -> list[RequestInput]:
    """JSONL lines: a string, or an object with "prompt" (and optional "output_len"/"max_tokens").

    With ``num_prompts`` larger than the file, the prompts repeat in order.
    """
    items = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if isinstance(record, str):
            record = {"prompt": record}
        if not isinstance(record, dict) or not isinstance(record.get("prompt"), str):
            raise ValueError(f"{path}:{number}: expected a string or an object with a \"prompt\" string")
        length = record.get("output_len", record.get("max_tokens", output_len))
        items.append(RequestInput(record["prompt"], int(length)))
    if not items:
        raise ValueError(f"{path} holds no prompts")
    count = len(items) if num_prompts is None else num_prompts
    return [RequestInput(i.prompt, i.output_len) for i in itertools.islice(itertools.cycle(items), count)]


def random_text(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(num_words))


class Tokenizer:
    """The server's /tokenize and /detokenize (vLLM's routes), or None-returning stubs when absent."""

    def __init__(self, base_url: str, model: str, client: httpx.Client) -> None:
        self.base_url, self.model, self.client = base_url.rstrip("/"), model, client
        self.available = self.tokenize("hello") is not None

    def tokenize(self, text: str) -> list[int] | None:
        body = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return list(body["tokens"]) if body and isinstance(body.get("tokens"), list) else None

    def detokenize(self, tokens: list[int]) -> str | None:
        body = self._post("/detokenize", {"model": self.model, "tokens": tokens})
        return body.get("prompt") if body else None

    def _post(self, route: str, payload: dict) -> dict | None:
        try:
            response = self.client.post(self.base_url + route, json=payload)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None


def random_prompts(tokenizer: Tokenizer | None, num_prompts: int, input_len: int, output_len: int,
                   seed: int) -> list[RequestInput]:
    """Random-word prompts of ``input_len`` tokens as the server counts them (when it can tokenize;
    otherwise ``input_len`` words, their token count left unknown)."""
    rng = random.Random(seed)
    if tokenizer is None or not tokenizer.available:
        return [RequestInput(random_text(rng, input_len), output_len) for _ in range(num_prompts)]
    return [_exact_length_prompt(tokenizer, rng, input_len, output_len) for _ in range(num_prompts)]


def _exact_length_prompt(tokenizer: Tokenizer, rng: random.Random, input_len: int, output_len: int) -> RequestInput:
    """Grow random text until it has at least ``input_len`` tokens, then cut the token ids back."""
    text = random_text(rng, input_len)
    tokens = tokenizer.tokenize(text) or []
    for _ in range(8):  # bounded: a server that stops tokenizing must not hang the benchmark
        if len(tokens) >= input_len:
            break
        text += " " + random_text(rng, input_len - len(tokens))
        tokens = tokenizer.tokenize(text) or []
    if len(tokens) > input_len:
        cut = tokenizer.detokenize(tokens[:input_len])
        if cut is not None:
            counted = tokenizer.tokenize(cut)
            return RequestInput(cut, output_len, len(counted) if counted is not None else input_len)
    return RequestInput(text, output_len, len(tokens))
