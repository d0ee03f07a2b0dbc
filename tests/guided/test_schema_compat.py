"""xgrammar 0.2.8 lets length-bounded JSON strings hold raw control characters (invalid JSON);
Pagoda's schema rewrite closes that hole while keeping the bounds."""

from __future__ import annotations

import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string as accepts

from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.schema_compat import json_safe_schema
from pagoda.guided.xgrammar_backend import _grammar

SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "minLength": 1, "maxLength": 3},
                                           "b": {"type": "array", "items": {"type": "string", "maxLength": 2}},
                                           "c": {"const": {"type": "string", "maxLength": 1}}},
          "required": ["a", "b"]}


def test_bounded_strings_become_patterns_and_values_are_left_alone() -> None:
    safe = json_safe_schema(SCHEMA)
    assert safe["properties"]["a"] == {"type": "string", "pattern": "^[\\s\\S]{1,3}$"}
    assert safe["properties"]["b"]["items"] == {"type": "string", "pattern": "^[\\s\\S]{0,2}$"}
    assert safe["properties"]["c"] == SCHEMA["properties"]["c"] and SCHEMA["properties"]["a"]["maxLength"] == 3


def test_the_grammar_keeps_the_bounds_and_refuses_raw_control_characters() -> None:
    grammar = _grammar(xgr, GuidedDecodingParams(json=SCHEMA))
    assert accepts(grammar, '{"a": "abc", "b": ["", "xy"]}')
    for bad in ('{"a": "a\x0e", "b": []}', '{"a": "", "b": []}', '{"a": "abcd", "b": []}', '{"a": "a", "b": ["xyz"]}'):
        assert not accepts(grammar, bad), bad
