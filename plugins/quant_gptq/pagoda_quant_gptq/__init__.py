"""pagoda-quant-gptq: GPTQ and compressed-tensors weight-only int4/int8 weights for Pagoda (see plugin.py)."""

__version__ = "0.1.0"
