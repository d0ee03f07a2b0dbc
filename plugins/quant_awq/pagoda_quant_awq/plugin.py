"""Pagoda plugin 'quant-awq' (distribution pagoda-quant-awq).

It will register the quantization method ``awq``: linear layers with 4-bit AWQ weights
(``qweight``, ``qzeros``, ``scales`` in groups), dequantized or computed by fused kernels on
GPUs, through the ``register_quantization_methods`` hook; ``check()`` will say why it cannot run
(no supported GPU, an unsupported group size).

It registers nothing yet: the capability lands in a later release, and until then this module
implements no hook, so ``pagoda plugins`` lists it as loaded with nothing registered, and
selecting 'awq' fails with "installed but does not register 'awq' (yet)".
"""
