"""Whether Triton kernels can run: core does not depend on triton (the triton attention plugin and the
test extras bring it), so code that has a Triton kernel and a torch path asks here first."""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pagoda.interfaces.platform import Platform


@lru_cache(maxsize=1)
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """``TRITON_INTERPRET=1``: Triton kernels run on CPU tensors (tests)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def dependent_launch(platform: "Platform") -> bool:
    """Whether Triton kernels on ``platform`` launch as programmatic dependents (``launch_pdl``): the platform
    allows it and the kernels are compiled, not interpreted."""
    return platform.dependent_launch() and not interpreting()
