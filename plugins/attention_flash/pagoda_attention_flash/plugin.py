"""Pagoda plugin 'attention-flash' (distribution pagoda-attention-flash).

It will register the attention backend ``flash``: FlashAttention-style fused attention over the
paged KV cache, the fastest choice on GPUs that support it (highest ``auto`` priority there),
through the ``register_attention_backends`` hook; ``check()`` will say why it cannot run (no
supported GPU, an unsupported dtype or head size).

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'flash' fails with "installed but does not register 'flash' (yet)".
"""
