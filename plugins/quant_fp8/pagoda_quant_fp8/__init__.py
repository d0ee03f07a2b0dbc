"""pagoda-quant-fp8: FP8 W8A8 linear layers for Pagoda (see plugin.py for what it registers)."""

__version__ = "0.1.0"
