"""Anthropic's Messages API over the chat pipeline (docs/api_anthropic.md)."""
