"""Tool calling: the built-in tool-call parsers and what the server needs to enforce ``tool_choice``.

Parsers implement :class:`pagoda.interfaces.ToolParser` and are registered through the
``register_tool_parsers`` hook (built-ins: ``hermes``, ``llama3_json``, ``mistral``); the server
picks one with ``--tool-call-parser`` (docs/tools.md).
"""
