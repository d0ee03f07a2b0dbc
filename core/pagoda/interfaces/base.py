"""What every registered capability (platform, backend, method, scheduler) declares."""

from __future__ import annotations

from typing import ClassVar


class Capability:
    """Class attributes read by the registry: a one-line description and an ``auto`` priority.

    ``auto`` selection picks, among the entries whose ``check(...)`` returns ``None`` (no reason
    against), the one with the highest ``priority``. Built-ins use priority 0; a faster plugin
    declares a larger number (e.g. triton 50, flash 100).
    """

    description: ClassVar[str] = ""
    priority: ClassVar[int] = 0
