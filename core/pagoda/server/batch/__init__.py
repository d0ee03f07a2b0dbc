"""Batch files: OpenAI's Batch API JSONL run offline through the server's routes (docs/batch.md)."""
