"""LoRA adapters over the API (docs/lora.md): a request selects one by its ``model`` field, ``/v1/models``
lists them beside the base model, and ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` change
them while the server runs (only with ``--allow-runtime-lora-updating``, as vLLM's switch).

The engine core keeps the adapters (``EngineCore.add_lora`` / ``remove_lora`` / ``list_loras``); each API
server keeps a copy of their names, read again on an unknown name and, with several API server
processes, when older than ``REFRESH_S`` (so a change made through one reaches the others within it).
"""

from __future__ import annotations

import time

from pagoda.lora_request import LoRARequest
from pagoda.server.errors import APIError

REFRESH_S = 1.0
REQUEST_ERRORS = ("LoRAAdapterError: ", "RequestError: ")  # utility errors that are the caller's (400)


class ServedAdapters:
    """The adapters one API server resolves model names to."""

    def __init__(self, engine, base_names: list[str], enabled: bool, runtime_updates: bool, shared: bool) -> None:
        self.engine = engine
        self.base_names = base_names
        self.enabled = enabled  # the engine runs with --enable-lora
        self.runtime_updates = runtime_updates  # --allow-runtime-lora-updating
        self.shared = shared  # other API server processes may change them
        self.by_name: dict[str, LoRARequest] = {}
        self._read_at = float("-inf")

    async def refresh(self) -> None:
        """Read the engine core's adapters."""
        if self.enabled:
            rows = await self.engine.call_utility("list_loras")
            self.by_name = {name: LoRARequest(name, lora_id, path) for name, lora_id, path in rows}
            self._read_at = time.monotonic()

    async def resolve(self, name: str) -> LoRARequest | None:
        """The adapter named ``name``, or None (not an adapter)."""
        stale = self.shared and time.monotonic() - self._read_at > REFRESH_S
        if self.enabled and (name not in self.by_name or stale):
            await self.refresh()
        return self.by_name.get(name)

    async def load(self, name: str, path: str) -> LoRARequest:
        """Load an adapter (400 naming what is wrong with it)."""
        self._check_updates()
        if name in self.base_names:
            raise APIError(400, f"'{name}' is the base model's name; give the adapter another lora_name",
                           param="lora_name")
        if await self.resolve(name) is not None:
            raise APIError(400, f"The lora adapter '{name}' has already been loaded; unload it first to load "
                                "another under this name", param="lora_name")
        row = await self._call("add_lora", name, path)
        self.by_name[name] = lora = LoRARequest(*row)
        return lora

    async def unload(self, name: str) -> None:
        """Unload an adapter (404 if it is not loaded)."""
        self._check_updates()
        lora = await self.resolve(name)
        if lora is None:
            raise APIError(404, f"The lora adapter '{name}' cannot be found; GET /v1/models lists the loaded ones",
                           param="lora_name", code="model_not_found")
        await self._call("remove_lora", lora.lora_int_id)
        self.by_name.pop(name, None)

    def _check_updates(self) -> None:
        if not self.enabled:
            raise APIError(400, "this server runs without LoRA adapters; start it with --enable-lora "
                                "--allow-runtime-lora-updating to load them at run time")
        if not self.runtime_updates:
            raise APIError(404, "loading and unloading LoRA adapters at run time is off; start the server with "
                                "--allow-runtime-lora-updating (and --enable-lora)", code="not_found")

    async def _call(self, method: str, *args):
        try:
            return await self.engine.call_utility(method, *args)
        except RuntimeError as exc:
            text = str(exc)
            for prefix in REQUEST_ERRORS:
                if text.startswith(prefix):
                    raise APIError(400, text.removeprefix(prefix)) from None
            raise
