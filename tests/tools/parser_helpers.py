"""Drive a ToolParser / ReasoningParser over text split into pieces, and sum up what it reported."""

from __future__ import annotations

import random

from pagoda.interfaces import ArgumentsPiece, CallStarted, ReasoningParser, TextPiece, ToolEvent, ToolParser


def splits(text: str, seed: int = 0) -> list[list[str]]:
    """Ways to stream ``text``: whole, one character at a time, and random chunkings."""
    rng = random.Random(seed)
    ways = [[text], list(text)]
    for _ in range(4):
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
        ways.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    return ways


def summarize(events: list[ToolEvent]) -> tuple[str, list[tuple[str, str]]]:
    """(content, [(name, arguments)]); checks the event contract on the way."""
    content, calls = "", []
    for event in events:
        if isinstance(event, TextPiece):
            content += event.text
        elif isinstance(event, CallStarted):
            assert event.index == len(calls), f"calls must start in order: {event}"
            calls.append([event.name, ""])
        else:
            assert isinstance(event, ArgumentsPiece) and event.index < len(calls), f"arguments before start: {event}"
            calls[event.index][1] += event.text
    return content, [tuple(call) for call in calls]


def run_tools(make_parser, chunks: list[str]) -> tuple[str, list[tuple[str, str]]]:
    parser: ToolParser = make_parser()
    events: list[ToolEvent] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    return summarize(events)


def run_reasoning(make_parser, chunks: list[str]) -> tuple[str, str]:
    parser: ReasoningParser = make_parser()
    reasoning = content = ""
    for piece in [parser.feed(chunk) for chunk in chunks] + [parser.finish()]:
        reasoning += piece.reasoning
        content += piece.content
    return reasoning, content
