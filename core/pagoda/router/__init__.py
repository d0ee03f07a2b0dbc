"""``pagoda router``: disaggregated prefill in front of Pagoda servers (docs/kv_offload.md)."""
