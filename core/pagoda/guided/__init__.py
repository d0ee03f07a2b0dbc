"""Guided decoding (structured output): request params, the bitmask format, the runner-side state and
the built-in xgrammar backend. See docs/structured_output.md."""

from pagoda.sampling_params import GuidedDecodingParams

__all__ = ["GuidedDecodingParams"]
