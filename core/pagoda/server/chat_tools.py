"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat request -> what the route does.

- ``tools`` always go to the chat template (transformers' ``tools=``), whatever the choice.
- ``"none"``: the output is plain content.
- ``"auto"`` (the default with tools): the server's ``--tool-call-parser`` finds calls in the
  output; without one the request is a 400 naming the flag.
- ``"required"`` or a named function: the output is constrained by guided decoding to a JSON
  schema built from the tools (:mod:`pagoda.tools.forced`) and read back as calls; no parser needed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pagoda.errors import RequestError
from pagoda.guided.params import GuidedDecodingParams
from pagoda.guided.runtime import validate_guided
from pagoda.interfaces.reasoning_parser import ReasoningParser
from pagoda.interfaces.tool_parser import ToolParser
from pagoda.sampling_params import SamplingParams
from pagoda.server.chat_output import ChoiceParser
from pagoda.server.errors import APIError, bad_request
from pagoda.server.protocol import ChatCompletionRequest, ChatTool, NamedToolChoice
from pagoda.tools.forced import NamedCallReader, RequiredCallsReader, named_schema, required_schema


@dataclass
class ToolPlan:
    """How one request handles tools."""

    template_tools: Optional[list[dict]] = None  # for the chat template
    make_parser: Optional[Callable[[Any], ToolParser]] = None  # tokenizer -> the reader of one choice's calls
    guided: Optional[GuidedDecodingParams] = None  # tool_choice required / named
    tool_names: frozenset[str] = field(default_factory=frozenset)
    single_call: bool = False  # parallel_tool_calls false
    keep_special_tokens: bool = False  # the parser's markers are special tokens


def plan_tools(body: ChatCompletionRequest, parser_cls: Optional[type[ToolParser]],
               parser_names: list[str]) -> ToolPlan:
    """The request's tool handling; a 400 for a choice it cannot honour."""
    choice = body.tool_choice or ("auto" if body.tools else "none")
    if not body.tools:
        if choice in ("none", "auto"):
            return ToolPlan()
        raise APIError(400, f"tool_choice {_describe(choice)} needs the functions it may call: send them in 'tools'",
                       param="tool_choice")
    plan = ToolPlan([tool.as_template_dict() for tool in body.tools],
                    tool_names=frozenset(tool.function.name for tool in body.tools),
                    single_call=not body.parallel_tool_calls)
    if choice == "none":
        return plan
    if choice == "auto":
        return _auto(plan, parser_cls, parser_names)
    if choice == "required":
        tools = [(tool.function.name, tool.function.parameters) for tool in body.tools]
        return _forced(plan, required_schema(tools, body.parallel_tool_calls), lambda _: RequiredCallsReader(), choice)
    tool = _named_tool(body.tools, choice)
    return _forced(plan, named_schema(tool.function.parameters), lambda _: NamedCallReader(tool.function.name),
                   choice)


def _auto(plan: ToolPlan, parser_cls: Optional[type[ToolParser]], parser_names: list[str]) -> ToolPlan:
    if parser_cls is None:
        raise APIError(400, '"auto" tool choice needs a tool-call parser to find the calls in the output: start the '
                            f"server with --tool-call-parser NAME (available: {', '.join(parser_names) or 'none'}; "
                            'see docs/tools.md), or send tool_choice "required" or a named function, which need none',
                       param="tool_choice")
    plan.make_parser = parser_cls
    plan.keep_special_tokens = not parser_cls.skip_special_tokens
    return plan


def _forced(plan: ToolPlan, schema: dict, make_parser: Callable[[Any], ToolParser], choice) -> ToolPlan:
    try:
        plan.guided = GuidedDecodingParams(json=schema)
        validate_guided(plan.guided)
    except RequestError as exc:
        raise APIError(400, f"the tools' parameters cannot be enforced for tool_choice {_describe(choice)}: {exc}",
                       param="tools") from exc
    plan.make_parser = make_parser
    return plan


def _named_tool(tools: list[ChatTool], choice: NamedToolChoice) -> ChatTool:
    for tool in tools:
        if tool.function.name == choice.function.name:
            return tool
    names = ", ".join(repr(tool.function.name) for tool in tools)
    raise APIError(400, f"tool_choice names the function {choice.function.name!r}, which is not in tools ({names}); "
                        "name one of them", param="tool_choice")


def _describe(choice) -> str:
    return repr(choice) if isinstance(choice, str) else f"{{'function': {{'name': {choice.function.name!r}}}}}"


def apply_plan(params: SamplingParams, plan: ToolPlan) -> SamplingParams:
    """``params`` with the plan's grammar and detokenization; a 400 when the request constrains
    its output twice."""
    if plan.guided is None and not plan.keep_special_tokens:
        return params
    if plan.guided is not None and params.guided_decoding is not None:
        raise APIError(400, 'tool_choice "required" or a named function constrains the output, and so does '
                            "response_format (or guided_*): send only one of them", param="tool_choice")
    changes = {"guided_decoding": plan.guided} if plan.guided is not None else {}
    if plan.keep_special_tokens:
        changes["skip_special_tokens"] = False
    try:
        return dataclasses.replace(params, **changes)
    except (RequestError, ValueError) as exc:
        raise bad_request(exc) from exc


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
