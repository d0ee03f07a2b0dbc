"""Registers the platform 'fake-platform', usable only when FAKE_PLATFORM_AVAILABLE=1."""

from __future__ import annotations

import os

from pagoda.hookspecs import Register, hookimpl
from pagoda.platforms.cpu import CpuPlatform

ENV = "FAKE_PLATFORM_AVAILABLE"


class FakePlatform(CpuPlatform):
    """The CPU platform under another name, with a ``check()`` that can refuse."""

    description = "test fixture: a platform that needs an environment variable"
    priority = -1

    @classmethod
    def check(cls) -> str | None:
        if os.environ.get(ENV) != "1":
            return f"the fake device is absent (set {ENV}=1)"
        return None


@hookimpl
def register_platforms(register: Register) -> None:
    register("fake-platform", FakePlatform)
