"""pagoda-attention-flash: FlashAttention-style CUDA attention for Pagoda (see plugin.py for what it registers)."""

__version__ = "0.1.0"
