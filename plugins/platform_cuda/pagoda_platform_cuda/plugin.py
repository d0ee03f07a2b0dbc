"""Pagoda plugin 'platform-cuda' (distribution pagoda-platform-cuda).

It will register the platform ``cuda``: NVIDIA GPUs through torch.cuda, with the fused CUDA
kernels built from ``csrc/`` (RMSNorm, rotary embedding, SiLU-and-mul, KV-cache writes),
free-memory-based KV cache sizing and CUDA graphs for decode steps, through the
``register_platforms`` hook; ``check()`` will say why it cannot run (no CUDA device, a CPU-only
torch build).

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'cuda' fails with "installed but does not register 'cuda' (yet)".
"""
