"""Pagoda plugin 'platform-rocm' (distribution pagoda-platform-rocm).

It will register the platform ``rocm``: AMD GPUs through torch's HIP build, with the ``csrc/``
kernels hipified for ROCm, free-memory-based KV cache sizing and HIP graphs for decode steps,
through the ``register_platforms`` hook; ``check()`` will say why it cannot run (no ROCm device,
a torch build without HIP).

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'rocm' fails with "installed but does not register 'rocm' (yet)".
"""
