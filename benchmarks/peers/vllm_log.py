"""What vLLM chose, read from its log: attention backend, FlashAttention version, compilation mode, CUDA-graph
mode and capture sizes, scheduler limits, KV cache size. Each value keeps the line it came from; a value the
log does not state stays absent (formats as vLLM 0.26 prints them; a later version may word them otherwise)."""

from __future__ import annotations

import re

# name -> pattern whose first group is the value (the first matching line wins)
PATTERNS = {
    "version": r"vLLM(?: API)? server version ([^\s,]+)|Initializing a V1 LLM engine \(v(\S+?)\)",
    "attention_backend": r"Using (\S+) attention backend|Using (?:AttentionBackendEnum\.)?(\w+) backend\b",
    "flash_attn_version": r"Using FlashAttention version (\d+)",
    "compilation_mode": r"'mode': <CompilationMode\.(\w+)|compilation_config=\{'level': (\d+)",
    "cudagraph_mode": r"'cudagraph_mode': <CUDAGraphMode\.(\w+)",
    "cudagraph_capture_sizes": r"'cudagraph_capture_sizes': \[([\d, ]*)\]",
    "max_num_batched_tokens": r"max_num_batched_tokens=(\d+)|'max_num_batched_tokens': (\d+)",
    "max_num_seqs": r"max_num_seqs=(\d+)|'max_num_seqs': (\d+)",
    "kv_cache_tokens": r"KV cache size: ([\d,]+) tokens",
    "graph_capture": r"Graph capturing finished in (\d+ secs?, took [\d.]+ GiB)",
    "compile_seconds": r"torch\.compile takes ([\d.]+) s in total",
}
CAPTURE_PROGRESS = re.compile(r"Capturing CUDA graphs \(([^)]*)\)[^|]*\|[^|]*\|\s*(\d+)/(\d+)")


def parse(text: str) -> dict:
    """{name: {"value": ..., "line": ...}} for each PATTERNS entry the log states, plus "cuda_graphs_captured":
    the graph counts of each capture pass ({"PIECEWISE": 51, "FULL": 51}, from its progress bars)."""
    found: dict = {}
    for line in text.splitlines():
        for name, pattern in PATTERNS.items():
            if name in found:
                continue
            match = re.search(pattern, line)
            if match:
                value = next(g for g in match.groups() if g is not None)
                found[name] = {"value": _typed(name, value), "line": line.strip()[:400]}
    captured: dict[str, int] = {}
    for match in CAPTURE_PROGRESS.finditer(text):
        captured[match.group(1)] = max(captured.get(match.group(1), 0), int(match.group(3)))
    if captured:
        found["cuda_graphs_captured"] = {"value": captured, "line": "Capturing CUDA graphs (...) progress bars"}
    return found


def _typed(name: str, value: str):
    if name == "cudagraph_capture_sizes":
        return [int(v) for v in value.replace(" ", "").split(",") if v]
    if name in ("max_num_batched_tokens", "max_num_seqs", "flash_attn_version"):
        return int(value)
    if name == "kv_cache_tokens":
        return int(value.replace(",", ""))
    return value


def values(parsed: dict) -> dict:
    """{name: value} of parse()'s result (what the report shows)."""
    return {name: entry["value"] for name, entry in parsed.items()}
