"""JSON schemas the guided decoding tests generate against (each output must validate)."""

from __future__ import annotations

SHORT = {"type": "string", "maxLength": 6}

SCHEMAS: dict[str, dict] = {
    "flat": {"type": "object", "properties": {"name": SHORT, "age": {"type": "integer"}}, "required": ["name", "age"]},
    "bounded_numbers": {"type": "object", "properties": {
        "count": {"type": "integer", "minimum": 3, "maximum": 9},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["count", "ratio"]},
    "enum": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "array": {"type": "object", "properties": {"tags": {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 3}},
              "required": ["tags"]},
    "nested": {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
        "required": ["id", "flags"]}}, "required": ["user"]},
    "optional": {"type": "object", "properties": {"a": {"type": "integer"}, "b": SHORT}, "required": ["a"]},
    "ref": {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                "required": ["x", "y"]}},
            "type": "object", "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
            "required": ["start", "end"]},
    "const_and_null": {"type": "object", "properties": {"kind": {"const": "event"}, "note": {"type": "null"}},
                       "required": ["kind", "note"]},
    "any_of": {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}},
               "required": ["v"]},
    "top_level_array": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 4},
}
