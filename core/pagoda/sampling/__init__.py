"""Sampling a step's logits: temperature, top-k/top-p/min-p, penalties, seeds, logprobs, token controls."""
