"""pagoda-quant-awq: AWQ 4-bit weights for Pagoda (see plugin.py for what it registers)."""

__version__ = "0.1.0"
