"""pagoda-fake-attention: a plugin registering the attention backend 'fake-attn' (priority 10)."""
