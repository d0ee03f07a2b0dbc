"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat request -> what the route does.

The rules live in :mod:`pagoda.tools.plan` (shared with the offline ``LLM.chat``); this module
reads them off the request and answers what cannot be honoured with a 400 naming the field.
OpenAI's deprecated ``functions`` / ``function_call`` fields, and history messages in their shape
(an assistant ``function_call``, role ``function``), are refused with a 400 naming the
``tools`` / ``tool_choice`` / ``tool_calls`` equivalents (``pagoda.server.unsupported``).
"""

from __future__ import annotations

from typing import Optional

from pagoda.errors import RequestError
from pagoda.interfaces.tool_parser import ToolParser
from pagoda.sampling_params import SamplingParams
from pagoda.server.errors import APIError, bad_request
from pagoda.server.protocol import ChatCompletionRequest, ChatMessage
from pagoda.tools import plan as tool_plan
from pagoda.tools.plan import ToolPlan, ToolRequestError

SERVER_PARSER_HINT = "start the server with --tool-call-parser NAME"


def plan_tools(body: ChatCompletionRequest, parser_cls: Optional[type[ToolParser]]) -> ToolPlan:
    """The request's tool handling; a 400 for a choice it cannot honour."""
    tools = [tool.as_template_dict() for tool in body.tools] if body.tools else None
    choice = body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else body.tool_choice
    try:
        return tool_plan.plan_tools(tools, choice, body.parallel_tool_calls, parser_cls, SERVER_PARSER_HINT)
    except ToolRequestError as exc:
        raise APIError(400, str(exc), param=exc.param) from exc


def apply_plan(params: SamplingParams, plan: ToolPlan) -> SamplingParams:
    """``params`` with the plan's grammar and detokenization; a 400 when the request constrains
    its output twice."""
    try:
        return tool_plan.apply_plan(params, plan)
    except ToolRequestError as exc:
        raise APIError(400, str(exc), param=exc.param) from exc
    except (RequestError, ValueError) as exc:
        raise bad_request(exc) from exc


def check_history(messages: list[ChatMessage]) -> None:
    """400 for an assistant turn in OpenAI's deprecated ``function_call`` shape: the chat template
    renders ``tool_calls`` only, so the call would silently vanish from the prompt."""
    for number, message in enumerate(messages):
        if (message.model_extra or {}).get("function_call") is not None:
            raise APIError(400, f"messages[{number}].function_call is the deprecated shape of an assistant's call, "
                                "which the chat template would not see; send it as tool_calls: [{\"id\": ..., "
                                "\"type\": \"function\", \"function\": {\"name\": ..., \"arguments\": ...}}] and "
                                "its result as a role 'tool' message with that tool_call_id (docs/tools.md)",
                           param=f"messages.{number}.function_call", code="unsupported_parameter")
