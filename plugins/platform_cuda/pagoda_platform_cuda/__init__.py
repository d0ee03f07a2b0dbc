"""pagoda-platform-cuda: NVIDIA GPUs for Pagoda (see plugin.py for what it registers)."""

__version__ = "0.1.0"
