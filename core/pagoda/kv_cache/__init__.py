"""The paged KV cache's bookkeeping: the block pool (ref counts, prefix-cache hashes, free-block LRU)
and the manager that hands blocks to requests."""
