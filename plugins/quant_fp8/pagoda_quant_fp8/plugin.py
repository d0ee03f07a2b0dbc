"""Pagoda plugin 'quant-fp8' (distribution pagoda-quant-fp8).

It will register the quantization method ``fp8``: linear layers with FP8 (e4m3) weights and
per-tensor or per-channel scales, read from FP8 checkpoints or quantized at load time, through
the ``register_quantization_methods`` hook; ``check()`` will say why it cannot run ("fp8 needs
compute capability >= 8.9").

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'fp8' fails with "installed but does not register 'fp8' (yet)".
"""
