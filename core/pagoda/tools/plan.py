"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` of one chat request -> what to do with them.

Shared by the server's ``/v1/chat/completions`` (``pagoda.server.chat_tools`` turns the errors into
400s) and the offline ``LLM.chat(tools=..., tool_choice=...)``:

- ``tools`` always go to the chat template (transformers' ``tools=``), whatever the choice.
- ``"none"``: the output is plain content.
- ``"auto"``: a tool-call parser (``--tool-call-parser`` / ``tool_parser=``) finds calls in the
  output; without one the request is refused, naming the setting.
- ``"required"`` or a named function: the output is constrained by guided decoding to a JSON
  schema built from the tools (:mod:`pagoda.tools.forced`) and read back as calls; no parser needed.

A tool with ``"strict": true`` asks that its calls' arguments match its ``parameters``: guided
decoding guarantees that for ``"required"`` and named choices; ``"auto"`` only parses what the model
wrote, so a strict tool under ``"auto"`` is refused rather than its guarantee ignored.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from pagoda.errors import RequestError
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.runtime import validate_guided
from pagoda.interfaces.reasoning_parser import ReasoningParser
from pagoda.interfaces.tool_parser import ToolParser
from pagoda.sampling_params import SamplingParams
from pagoda.tools.choice import ChoiceParser
from pagoda.tools.forced import NamedCallReader, RequiredCallsReader, named_schema, required_schema

# "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}
ToolChoice = Union[str, dict[str, Any], None]


class ToolRequestError(RequestError):
    """A tool request that cannot be honoured; ``param`` names the request field to fix."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ToolPlan:
    """How one request handles tools."""

    template_tools: Optional[list[dict]] = None  # for the chat template
    make_parser: Optional[Callable[[Any], ToolParser]] = None  # tokenizer -> the reader of one choice's calls
    guided: Optional[GuidedDecodingParams] = None  # tool_choice required / named
    tool_names: frozenset[str] = field(default_factory=frozenset)
    single_call: bool = False  # parallel_tool_calls false
    keep_special_tokens: bool = False  # the parser's markers are special tokens


def plan_tools(tools: Optional[list[dict]], tool_choice: ToolChoice, parallel_tool_calls: bool,
               parser_cls: Optional[type[ToolParser]], parser_hint: str) -> ToolPlan:
    """The request's tool handling; a ToolRequestError for a choice it cannot honour.

    ``tools``: OpenAI's ``[{"type": "function", "function": {"name": ..., "parameters": {...}}}]``.
    ``parser_hint``: how the caller picks a tool-call parser, e.g. ``"pass tool_parser=NAME"`` (for
    the error of ``"auto"`` without one).
    """
    functions = [_function(tool, i) for i, tool in enumerate(tools or [])]
    choice = _choice(tool_choice if tool_choice is not None else ("auto" if functions else "none"))
    if not functions:
        if choice in ("none", "auto"):
            return ToolPlan()
        raise ToolRequestError(f"tool_choice {_describe(choice)} needs the functions it may call: send them in "
                               "'tools'", "tool_choice")
    plan = ToolPlan([{"type": "function", "function": f} for f in functions],
                    tool_names=frozenset(f["name"] for f in functions), single_call=not parallel_tool_calls)
    if choice == "none":
        return plan
    if choice == "auto":
        return _auto(plan, functions, parser_cls, parser_hint)
    if choice == "required":
        schema = required_schema([(f["name"], f.get("parameters")) for f in functions], parallel_tool_calls)
        return _forced(plan, schema, lambda _: RequiredCallsReader(), choice)
    function = _named_function(functions, choice)
    return _forced(plan, named_schema(function.get("parameters")), lambda _: NamedCallReader(function["name"]),
                   choice)


def _function(tool: Any, number: int) -> dict:
    """The ``function`` of ``tools[number]``, checked (the server's pydantic models check it too)."""
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ToolRequestError(f"tools[{number}] must be {{'type': 'function', 'function': {{'name': ..., "
                               f"'parameters': {{...}}}}}}, got {tool!r}", "tools")
    if not isinstance(function.get("parameters") or {}, dict):
        raise ToolRequestError(f"tools[{number}].function.parameters must be a JSON schema object", "tools")
    return {key: value for key, value in function.items() if value is not None}


def _choice(choice: Any) -> Union[str, tuple[str, str]]:
    """``"none"``, ``"auto"``, ``"required"``, or ``("name", function name)`` for a named function."""
    if choice in ("none", "auto", "required"):
        return choice
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if isinstance(name, str) and choice.get("type", "function") == "function":
        return ("name", name)
    raise ToolRequestError(f"tool_choice must be 'none', 'auto', 'required' or {{'type': 'function', 'function': "
                           f"{{'name': ...}}}}, got {choice!r}", "tool_choice")


def _auto(plan: ToolPlan, functions: list[dict], parser_cls: Optional[type[ToolParser]], parser_hint: str) -> ToolPlan:
    strict = [f["name"] for f in functions if f.get("strict")]
    if strict:
        raise ToolRequestError(f"tool {strict[0]!r} is strict (its arguments must match its parameters), and "
                               '"auto" tool choice cannot guarantee that: the calls are parsed from free text. Send '
                               'tool_choice "required" or a named function (enforced by guided decoding), or '
                               '"strict": false', "tools")
    if parser_cls is None:
        names = ", ".join(parser_names("tool_parser")) or "none"
        raise ToolRequestError(f'"auto" tool choice needs a tool-call parser to find the calls in the output: '
                               f"{parser_hint} (available: {names}; see docs/tools.md), or send tool_choice "
                               '"required" or a named function, which need none', "tool_choice")
    plan.make_parser = parser_cls
    plan.keep_special_tokens = not parser_cls.skip_special_tokens
    return plan


def _forced(plan: ToolPlan, schema: dict, make_parser: Callable[[Any], ToolParser], choice) -> ToolPlan:
    try:
        plan.guided = GuidedDecodingParams(json=schema)
        validate_guided(plan.guided)
    except RequestError as exc:
        raise ToolRequestError(f"the tools' parameters cannot be enforced for tool_choice {_describe(choice)}: "
                               f"{exc}", "tools") from exc
    plan.make_parser = make_parser
    return plan


def _named_function(functions: list[dict], choice: tuple[str, str]) -> dict:
    for function in functions:
        if function["name"] == choice[1]:
            return function
    names = ", ".join(repr(f["name"]) for f in functions)
    raise ToolRequestError(f"tool_choice names the function {choice[1]!r}, which is not in tools ({names}); "
                           "name one of them", "tool_choice")


def _describe(choice) -> str:
    return repr(choice) if isinstance(choice, str) else f"{{'function': {{'name': {choice[1]!r}}}}}"


def apply_plan(params: SamplingParams, plan: ToolPlan) -> SamplingParams:
    """``params`` with the plan's grammar and detokenization; a ToolRequestError when the request
    constrains its output twice (a bad resulting value: the RequestError/ValueError of SamplingParams)."""
    if plan.guided is None and not plan.keep_special_tokens:
        return params
    if plan.guided is not None and params.guided_decoding is not None:
        raise ToolRequestError('tool_choice "required" or a named function constrains the output, and so does '
                               "response_format (or guided_*, guided_decoding): send only one of them", "tool_choice")
    changes: dict[str, Any] = {"guided_decoding": plan.guided} if plan.guided is not None else {}
    if plan.keep_special_tokens:
        changes["skip_special_tokens"] = False
    return dataclasses.replace(params, **changes)


def choice_parser_factory(plan: ToolPlan, reasoning_cls: Optional[type[ReasoningParser]], tokenizer,
                          guided: Optional[GuidedDecodingParams]) -> Optional[Callable[[], ChoiceParser]]:
    """Builds each choice's parser; None when the output is plain content (no parsing at all).

    Guided output (``guided``: a forced tool choice, response_format, guided_*) has no reasoning
    block to look for: the grammar holds from the first token. Output the request itself
    constrains to a JSON document (response_format, guided_json) is the answer, never a call.
    """
    use_reasoning = reasoning_cls is not None and guided is None
    json_answer = guided is not None and plan.guided is None and guided.kind in ("json", "json_object")
    make_tools = None if json_answer else plan.make_parser
    if make_tools is None and not use_reasoning:
        return None

    def make() -> ChoiceParser:
        tools = make_tools(tokenizer) if make_tools is not None else None
        return ChoiceParser(reasoning_cls(tokenizer) if use_reasoning else None, tools, plan.tool_names,
                            plan.single_call)

    return make


def template_arguments(arguments: Any) -> Any:
    """A history call's ``arguments`` as chat templates expect them: a dict when they are a JSON
    object (templates apply ``tojson``; a JSON string would be encoded twice), else as given."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else arguments
    return arguments


def parser_class(kind: str, name: Optional[str]) -> Optional[type]:
    """The registered ``tool_parser`` / ``reasoning_parser`` called ``name`` (UnknownChoiceError
    naming the registered ones); None for no name."""
    if name is None:
        return None
    from pagoda.plugins import get_plugin_manager

    return get_plugin_manager().registry(kind).get(name)


def parser_names(kind: str) -> list[str]:
    from pagoda.plugins import get_plugin_manager

    return get_plugin_manager().registry(kind).names()
