"""``--speculative-config`` (vLLM's JSON): which proposer, how many draft tokens, its options."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from pagoda.errors import ConfigError


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str  # a registered proposer: "ngram", "draft", "eagle", or a plugin's
    num_speculative_tokens: int  # k: drafts verified per step
    prompt_lookup_max: int = 5  # ngram: longest suffix n-gram searched
    prompt_lookup_min: int = 2  # ngram: shortest
    model: str | None = None  # draft/eagle: the proposer's checkpoint
    backoff: bool = True  # per-request adaptive draft count and pauses (pagoda.spec_decode.backoff)
    options: dict[str, Any] = field(default_factory=dict)  # anything else, for plugin proposers


def parse_speculative_config(value: str | dict[str, Any] | None) -> SpeculativeConfig | None:
    """A JSON object (or dict) -> :class:`SpeculativeConfig`; ConfigError naming what is wrong."""
    if value is None or value == "":
        return None
    raw = json_object(value)
    known = {f.name for f in fields(SpeculativeConfig)} - {"options"}
    args = {key: raw.pop(key) for key in list(raw) if key in known}
    if "method" not in args or "num_speculative_tokens" not in args:
        raise ConfigError('--speculative-config needs "method" and "num_speculative_tokens", '
                          'e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    config = SpeculativeConfig(**args, options=raw)
    _check(config)
    return config


def json_object(value: str | dict[str, Any], flag: str = "--speculative-config") -> dict[str, Any]:
    """A flag's JSON object (or a dict, copied) as a dict; ConfigError naming ``flag`` for anything else."""
    if isinstance(value, dict):
        return dict(value)
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON ({exc.msg} at character {exc.pos}): {value!r}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{flag} must be a JSON object, got {type(raw).__name__}")
    return raw


def _check(config: SpeculativeConfig) -> None:
    k = config.num_speculative_tokens
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 16:
        raise ConfigError(f"num_speculative_tokens must be an integer from 1 to 16, got {k!r}")
    lo, hi = config.prompt_lookup_min, config.prompt_lookup_max
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ConfigError(f"prompt_lookup_min/max must be integers with 1 <= min <= max, got {lo!r}/{hi!r}")
    if not isinstance(config.backoff, bool):
        raise ConfigError(f"backoff must be true or false, got {config.backoff!r}")
    if not isinstance(config.method, str) or not config.method:
        raise ConfigError(f"method must be a proposer name such as \"ngram\", got {config.method!r}")
