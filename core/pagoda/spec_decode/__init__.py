"""Speculative decoding: configuration, the built-in n-gram proposer, and exact rejection sampling."""
