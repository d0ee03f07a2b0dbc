"""``POST /start_profile`` and ``POST /stop_profile``, as vLLM's: the torch profiler on every rank of the
engine (pagoda.runner.torch_profiler). Served only when ``PAGODA_TORCH_PROFILER_DIR`` is set."""

from __future__ import annotations

from fastapi import APIRouter, Request

from pagoda.server.errors import APIError
from pagoda.server.openapi import ERRORS

router = APIRouter()
STOP_TIMEOUT_S = 600.0  # every rank writes its trace before the answer


async def _call(request: Request, method: str, timeout: float) -> dict:
    try:
        await request.app.state.pagoda.engine.call_utility(method, timeout=timeout)
    except RuntimeError as exc:  # already running, not running, a folder that cannot be written
        raise APIError(400, str(exc)) from exc
    return {}


@router.post("/start_profile", responses=ERRORS)
async def start_profile(request: Request) -> dict:
    """Start the torch profiler on every rank; the traces go to PAGODA_TORCH_PROFILER_DIR."""
    return await _call(request, "start_profile", 60.0)


@router.post("/stop_profile", responses=ERRORS)
async def stop_profile(request: Request) -> dict:
    """Stop it; answers once every rank wrote its trace."""
    return await _call(request, "stop_profile", STOP_TIMEOUT_S)
