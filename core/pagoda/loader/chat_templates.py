"""Chat templates for tokenizers that arrive without one (e.g. GGUF files converted without it, or
vision-language checkpoints that keep theirs for the processor, beside the tokenizer).

A template is chosen by the special tokens the vocabulary holds, so it applies only to the family
whose turn format it writes. Gemma (1-3) turns: ``<start_of_turn>user\\n...<end_of_turn>\\n``,
the assistant's role spelled ``model``, a system message folded into the first user turn, and
``<start_of_turn>model\\n`` as the generation prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GEMMA_TURNS = """{{- bos_token -}}
{%- set ns = namespace(prefix='') -%}
{%- set turns = messages -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set ns.prefix = messages[0]['content'] ~ '\\n\\n' -%}
  {%- set turns = messages[1:] -%}
{%- endif -%}
{%- for m in turns -%}
  {%- if (m['role'] == 'user') != (loop.index0 is even) -%}
    {{- raise_exception('Gemma chat turns must alternate user, assistant, user, ... (after an optional system message)') -}}
  {%- endif -%}
  {%- set text = m['content'] if m['content'] is string else m['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') -%}
  {{- '<start_of_turn>' ~ ('model' if m['role'] == 'assistant' else m['role']) ~ '\\n' -}}
  {{- (ns.prefix if loop.first else '') ~ text | trim ~ '<end_of_turn>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"""

TEMPLATES_BY_TOKENS = ((("<start_of_turn>", "<end_of_turn>"), GEMMA_TURNS),)


def fallback_chat_template(tokenizer: Any) -> str | None:
    """The template of the family whose turn tokens ``tokenizer`` holds, or None."""
    vocab = tokenizer.get_vocab()
    for tokens, template in TEMPLATES_BY_TOKENS:
        if all(t in vocab for t in tokens):
            return template
    return None


def processor_chat_template(folder: str | None) -> str | None:
    """The chat template a model folder keeps beside the tokenizer for its processor (vision-language
    checkpoints such as LLaVA-1.5's: ``chat_template.jinja``, or ``chat_template.json``'s ``chat_template``)."""
    if folder is None:
        return None
    jinja, data = Path(folder) / "chat_template.jinja", Path(folder) / "chat_template.json"
    if jinja.is_file():
        return jinja.read_text()
    if data.is_file():
        template = json.loads(data.read_text()).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def ensure_chat_template(tokenizer: Any, folder: str | None = None) -> Any:
    """Give ``tokenizer`` a chat template if it has none: its model folder's processor template, else the
    fallback of its family (if one fits); returns it."""
    if not getattr(tokenizer, "chat_template", None):
        template = processor_chat_template(folder) or fallback_chat_template(tokenizer)
        if template is not None:
            tokenizer.chat_template = template
    return tokenizer
