"""OpenAI's Responses API over the chat pipeline (docs/api_responses.md)."""
