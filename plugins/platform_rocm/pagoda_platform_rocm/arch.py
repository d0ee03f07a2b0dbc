"""AMD GPU architectures (gfx targets) as Pagoda needs to know them."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GfxArch:
    name: str  # the gfx target, e.g. "gfx942"
    products: str  # for messages
    fp8: torch.dtype | None  # the FP8 e4m3 variant its matrix cores compute in, if any

    @property
    def wave64(self) -> bool:
        """CDNA (gfx9) runs 64-wide wavefronts, the width the csrc kernels are written for; RDNA runs 32."""
        return self.name.startswith("gfx9")


KNOWN_ARCHS = {
    a.name: a
    for a in (
        GfxArch("gfx908", "CDNA 1: MI100", None),
        GfxArch("gfx90a", "CDNA 2: MI210/MI250/MI250X", None),
        GfxArch("gfx942", "CDNA 3: MI300X/MI300A/MI325X", torch.float8_e4m3fnuz),
        GfxArch("gfx950", "CDNA 4: MI350X/MI355X", torch.float8_e4m3fn),
    )
}


def parse_arch(gcn_arch_name: str) -> GfxArch:
    """``"gfx90a:sramecc+:xnack-"`` (torch's ``gcnArchName``) -> the GfxArch of ``gfx90a``."""
    name = gcn_arch_name.split(":", 1)[0].strip()
    return KNOWN_ARCHS.get(name) or GfxArch(name, "an AMD GPU Pagoda has no table entry for", None)
