"""Pagoda plugin 'attention-triton' (distribution pagoda-attention-triton).

It will register the attention backend ``triton``: paged attention over the block tables for
mixed prefill/decode batches, written in Triton (it runs on CPU under ``TRITON_INTERPRET=1`` for
tests), through the ``register_attention_backends`` hook; ``check()`` will say why it cannot run
("triton needs a GPU or TRITON_INTERPRET=1", an unsupported head size).

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'triton' fails with "installed but does not register 'triton' (yet)".
"""
