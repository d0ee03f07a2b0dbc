"""Reasoning parsers: ``<think>...</think>`` -> ``reasoning_content`` (built-ins: ``deepseek_r1``,
``qwen3``), registered through the ``register_reasoning_parsers`` hook and picked with
``--reasoning-parser`` (docs/tools.md)."""
