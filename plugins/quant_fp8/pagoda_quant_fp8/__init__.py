"""pagoda-quant-fp8: FP8 weights for Pagoda (see plugin.py for what it registers)."""

__version__ = "0.1.0"
