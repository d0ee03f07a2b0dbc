"""JSON schemas the guided decoding tests generate against (each output must validate).

Numbers are bounded: sampled at temperature 1, a model may write digits until max_tokens, and a
grammar cannot end an unbounded integer for it.
"""

from __future__ import annotations

SHORT = {"type": "string", "maxLength": 6}
INT = {"type": "integer", "minimum": -999, "maximum": 999}

SCHEMAS: dict[str, dict] = {
    "flat": {"type": "object", "properties": {"name": SHORT, "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"]},
    "bounded_numbers": {"type": "object", "properties": {
        "count": {"type": "integer", "minimum": 3, "maximum": 9},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["count", "ratio"]},
    "enum": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "array": {"type": "object", "properties": {"tags": {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 3}},
              "required": ["tags"]},
    "nested": {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
        "required": ["id", "flags"]}}, "required": ["user"]},
    "optional": {"type": "object", "properties": {"a": INT, "b": SHORT}, "required": ["a"]},
    "ref": {"$defs": {"point": {"type": "object", "properties": {"x": INT, "y": INT},
                                "required": ["x", "y"]}},
            "type": "object", "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
            "required": ["start", "end"]},
    "const_and_null": {"type": "object", "properties": {"kind": {"const": "event"}, "note": {"type": "null"}},
                       "required": ["kind", "note"]},
    "any_of": {"type": "object", "properties": {"v": {"anyOf": [INT, {"type": "boolean"}]}},
               "required": ["v"]},
    "top_level_array": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 4},
    "pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
                "required": ["code"]},
    "string_lengths": {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}},
                       "required": ["s"]},
    "negative_bounds": {"type": "object", "properties": {
        "low": {"type": "integer", "minimum": -40, "maximum": -10},
        "temp": {"type": "number", "minimum": -5.5, "maximum": 5.5}}, "required": ["low", "temp"]},
    "array_of_objects": {"type": "object", "properties": {"lines": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "object", "properties": {"sku": SHORT, "qty": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["sku", "qty"]}}}, "required": ["lines"]},
    "array_of_arrays": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 1, "maxItems": 2}},
    "one_of": {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"r": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["r"],
         "additionalProperties": False},
        {"type": "object", "properties": {"w": {"type": "integer", "minimum": 1, "maximum": 9},
                                          "h": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["w", "h"], "additionalProperties": False}]}}, "required": ["shape"]},
    "nullable": {"type": "object", "properties": {"x": {"type": ["integer", "null"], "minimum": 0, "maximum": 99}}, "required": ["x"]},
    "closed_optional": {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": ["p", "q"]}},
                        "required": ["a"], "additionalProperties": False},
    "ref_in_array": {"$defs": {"tag": {"enum": ["x", "y", "z"]}}, "type": "object",
                     "properties": {"tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3}},
                     "required": ["tags"]},
    "deep_nesting": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "integer", "minimum": 10, "maximum": 99}}, "required": ["c"]}},
        "required": ["b"]}}, "required": ["a"]},
}
assert len(SCHEMAS) == 20
