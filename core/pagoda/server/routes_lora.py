"""``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (vLLM's routes and bodies; docs/lora.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from pagoda.server.openapi import ERRORS
from pagoda.server.state import ServerState

router = APIRouter()
ANSWERS = {**ERRORS, 200: {"description": "a line saying what was done",
                           "content": {"text/plain": {"schema": {"type": "string"}}}}}


class LoadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadLoRAAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None  # accepted as vLLM's body has it; the name decides


@router.post("/v1/load_lora_adapter", responses=ANSWERS)
async def load_lora_adapter(body: LoadLoRAAdapterRequest, request: Request) -> PlainTextResponse:
    """Load a LoRA adapter from a folder the server can read; requests then name it in ``model``."""
    state: ServerState = request.app.state.pagoda
    await state.adapters.load(body.lora_name, body.lora_path)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")


@router.post("/v1/unload_lora_adapter", responses=ANSWERS)
async def unload_lora_adapter(body: UnloadLoRAAdapterRequest, request: Request) -> PlainTextResponse:
    """Unload a LoRA adapter: new requests naming it get 404; running ones finish with it."""
    state: ServerState = request.app.state.pagoda
    await state.adapters.unload(body.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")
