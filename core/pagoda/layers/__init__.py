"""Pagoda's model building blocks: linear layers that delegate to a QuantizationMethod, norms, rotary, attention."""
