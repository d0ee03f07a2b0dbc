"""The kinds ``pagoda plugins new --kind`` can generate, and what their README says about each.

Registry kinds take their label, hook and flag from :data:`pagoda.plugins.catalog.KINDS`;
``command`` (a ``pagoda`` subcommand, hook ``register_commands``) is not a registry kind, and
``multimodal_model`` is a second template of the ``model`` kind (a vision-language family).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pagoda.plugins.catalog import KINDS


@dataclass(frozen=True)
class TemplateKind:
    """A kind the template can generate: the module it adds, the class it defines, its README lines."""

    key: str  # what --kind takes: the registry key (pagoda.plugins.catalog.KINDS), "command", or a variant
    module: str  # module of the generated package holding the class
    class_suffix: str  # ``Backend`` -> ``MyAttnBackend``
    starts_as: str  # README: what the generated plugin does as generated ({placeholders} allowed)
    tests: str  # README: what its tests check beyond registration
    variant_of: str | None = None  # a variant's registry key (``multimodal_model`` registers a ``model``)
    variant_label: str | None = None  # README: a variant's own name for what it registers

    @property
    def registry(self) -> str:
        """The registry key the generated plugin registers in (``command``: none)."""
        return self.variant_of or self.key

    @property
    def label(self) -> str:
        if self.variant_label:
            return self.variant_label
        return KINDS[self.registry].label if self.registry in KINDS else "CLI command"

    @property
    def hook(self) -> str:
        return KINDS[self.registry].hook if self.registry in KINDS else "register_commands"

    @property
    def flag(self) -> str:
        return (KINDS[self.registry].flag or "") if self.registry in KINDS else ""


TEMPLATE_KINDS: dict[str, TemplateKind] = {
    k.key: k
    for k in (
        TemplateKind("attention", "backend", "Backend",
                     "It starts as Pagoda's `torch` reference backend (`forward` calls it): put your kernel in "
                     "`forward` and its real limits in `check()`.",
                     "its output and cache writes against the torch reference on random paged batches"),
        TemplateKind("platform", "platform", "Platform",
                     "It starts as Pagoda's CPU platform: make `check()` detect your device, `device()` return it "
                     "and `kv_cache_bytes()` measure its memory.",
                     "the Platform methods Pagoda calls"),
        TemplateKind("quantization", "method", "Method",
                     "It starts as Pagoda's unquantized method (dense weights): register your packed parameters in "
                     "`create_weights`, repack them in `process_weights_after_loading`, compute in `apply`.",
                     "a linear layer's output against a float64 matmul of its weights"),
        TemplateKind("model", "model", "ForCausalLM",
                     "It is a complete Llama-style decoder built from Pagoda's layers (each linear layer takes the "
                     "quantization method, each attention layer the attention backend), registered as the "
                     "architecture `{registered}`: change its layers for your family.",
                     "greedy tokens and logprobs equal to HF transformers' on a tiny random checkpoint"),
        TemplateKind("multimodal_model", "model", "ForConditionalGeneration",
                     "It is a complete LLaVA-style vision-language model: a CLIP vision tower and an MLP projector "
                     "written from Pagoda's layers, in front of Pagoda's Llama decoder, registered as the "
                     "architecture `{registered}`; each of the four steps of an image (processing, placeholder "
                     "expansion, encoder forward, embedding merge) is one method: change them for your family.",
                     "greedy tokens and logprobs equal to HF transformers' LLaVA on a tiny random checkpoint, for "
                     "prompts with 0, 1 and 2 images batched together, and placeholder expansion equal to its "
                     "processor's", variant_of="model", variant_label="vision-language model architecture"),
        TemplateKind("scheduler", "scheduler", "Scheduler",
                     "It starts as first come, first served, written as a `SchedulingPolicy` (waiting order, "
                     "admission, running order, preemption victim) on Pagoda's `PolicyScheduler`: change the "
                     "policy, the mechanics (token budget, chunked prefill, KV blocks) stay Pagoda's.",
                     "admission and preemption order; outputs equal to `fcfs`'s on a tiny model"),
        TemplateKind("proposer", "proposer", "Proposer",
                     "It starts as Pagoda's n-gram (prompt lookup) proposer: replace `propose` with your guess. The "
                     "engine verifies every draft, so a proposer changes speed, never outputs.",
                     "drafts within each budget; greedy outputs unchanged by speculating on a tiny model"),
        TemplateKind("guided_decoding", "backend", "Backend",
                     "It is a small complete grammar engine for `choice` constraints (the output is one of a list "
                     "of strings): extend `validate` and `new_matcher` to what your engine supports.",
                     "the matcher's allowed tokens; a tiny model's sampled outputs are always one of the choices"),
        TemplateKind("tool_parser", "parser", "ToolParser",
                     "It starts as a copy of the built-in `hermes` format "
                     "(`<tool_call>{{\"name\": ..., \"arguments\": ...}}</tool_call>`): change it to your model's.",
                     "a known output read whole and one character at a time"),
        TemplateKind("reasoning_parser", "parser", "ReasoningParser",
                     "It starts as the built-in `deepseek_r1` format (reasoning until `</think>`): change the "
                     "markers to your model's.",
                     "known outputs read whole and one character at a time"),
        TemplateKind("kv_connector", "connector", "Connector",
                     "It is a complete KV connector that keeps blocks in host memory (at most `max_blocks`, the least "
                     "recently used dropped first): replace its dictionary with your store; Pagoda moves the blocks "
                     "between the device and host memory, and recomputes any block `read` cannot supply.",
                     "its store; on a tiny model, a prefix evicted from the device cache comes back from the "
                     "connector with greedy tokens unchanged"),
        TemplateKind("command", "command", "Command",
                     "It adds `pagoda {name}`, which prints what the installed plugins register: replace its "
                     "arguments and `run` with your command.",
                     "the command's output"),
    )
}

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*")  # "ToolParser" -> Tool, Parser; "ForCausalLM" -> ..., LM


def class_names(name: str, suffix: str) -> tuple[str, str]:
    """``(base, class)`` for plugin ``name``: ``my-platform`` + ``Platform`` -> ``("My", "MyPlatform")``.

    Trailing words of ``name`` that repeat the end of ``suffix`` are dropped before the suffix is
    added, so the kind is not named twice (unless nothing else would remain)."""
    words = name.split("-")
    suffix_words = [w.lower() for w in _WORDS.findall(suffix)]
    for k in range(min(len(words) - 1, len(suffix_words)), 0, -1):
        if words[-k:] == suffix_words[-k:]:
            words = words[:-k]
            break
    base = "".join(w.capitalize() for w in words)
    return base, base + suffix


def select_hint(kind: str, values: dict[str, str]) -> str:
    """The README's paragraph on how users pick the capability, and what ``auto`` does with it."""
    name, flag = values["registered"], values["flag"]
    if kind == "command":
        return f"Run it: `pagoda {name} --help`."
    if kind == "model":  # the text and the vision-language templates
        return (f"Pagoda uses it for every checkpoint whose config.json lists `\"{name}\"` in `architectures`; "
                "no flag is needed.")
    if kind == "proposer":  # chosen by the JSON of --speculative-config, never by `auto`
        return (f"Select it with `--speculative-config '{{\"method\": \"{name}\", \"num_speculative_tokens\": 4}}'`; "
                "`auto` never turns speculation on.")
    if kind == "kv_connector":
        return (f"Select it with `--kv-transfer-config '{{\"kv_connector\": \"{name}\", \"kv_role\": \"kv_both\"}}'` "
                "(options in `kv_connector_extra_config`); `auto` never picks a KV connector, name it.")
    if kind == "quantization":
        return (f"Select it with `{flag} {name}`, or ship checkpoints whose config.json declares "
                f"`\"quantization_config\": {{\"quant_method\": \"{name}\"}}`. `auto` (the default) means what the "
                "checkpoint declares, else `none`: a method never quantizes a model no one asked to quantize.")
    where = " (on `pagoda serve`, or the same argument of `LLM.chat`)" if kind.endswith("_parser") else ""
    if not KINDS[kind].auto:
        return f"Select it with `{flag} {name}`{where}; `auto` never picks a {values['kind_label']}, name it."
    return (f"Select it with `{flag} {name}`{where}. `auto` picks the highest-priority usable "
            f"{values['kind_label']}; this one declares `priority = -1`, below the built-ins (0), so installing "
            "it changes no default run. Raise the priority only once `check()` refuses every case it cannot run.")
