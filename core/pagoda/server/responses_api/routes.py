"""OpenAI's Responses API: ``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}`` and
``POST /v1/responses/{id}/cancel`` (docs/api_responses.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.chat_pipeline import start_chat
from pagoda.server.errors import APIError
from pagoda.server.openapi import ERRORS, typed_event_stream
from pagoda.server.responses_api.exchange import Exchange
from pagoda.server.responses_api.protocol import ResponsesRequest, check_fields
from pagoda.server.responses_api.schema import DeletedResponse, ResponseObject, ResponseStreamEvent
from pagoda.server.responses_api.store import ResponseStore
from pagoda.server.responses_api.translate import translate
from pagoda.server.state import ServerState
from pagoda.server.streaming import unless_disconnected
from pagoda.server.translation import refuse

router = APIRouter()


def response_store(request: Request) -> ResponseStore:
    return request.app.state.responses_store


@router.post("/v1/responses", response_model=ResponseObject, responses=typed_event_stream(ResponseStreamEvent))
async def create_response(body: ResponsesRequest, request: Request):
    """A model response: ``input`` after ``instructions`` (and ``previous_response_id``'s conversation),
    answered as typed output items; ``stream`` for events, ``background`` to poll for it."""
    state: ServerState = request.app.state.pagoda
    store = response_store(request)
    check_fields(body)
    stored = _stored(body, store)
    history = None
    if body.previous_response_id is not None:
        previous = store.get(body.previous_response_id, param="previous_response_id")
        if previous.running:
            raise APIError(400, f"response '{body.previous_response_id}' is still in progress; continue it once it "
                                "has finished", param="previous_response_id")
        history = previous.conversation
    translated = translate(body, history)
    try:
        run = await start_chat(state, translated.chat, prefix="resp")
    except APIError as exc:
        raise translated.rename(exc) from None
    exchange = Exchange(body, translated, run, store if stored else None, _token_counter(state))
    if body.stream:
        return StreamingResponse(exchange.stream(), media_type="text/event-stream")
    if body.background:
        return exchange.start_background()
    return await unless_disconnected(request, exchange.whole())


def _stored(body: ResponsesRequest, store: ResponseStore) -> bool:
    if body.store is False:
        if body.background:
            raise APIError(400, "a background response must be stored (its result is fetched later): remove "
                                "store=false", param="store")
        return False
    if not store.enabled:
        if body.store or body.background:
            raise refuse("store" if body.store else "background", "this server keeps no responses "
                         "(--responses-store-size 0)", "send store=false, or ask the operator to set "
                         "--responses-store-size")
        return False
    return True


def _token_counter(state: ServerState):
    tokenizer = state.tokenizer
    if tokenizer is None:
        return lambda text: 0
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


@router.get("/v1/responses/{response_id}", response_model=ResponseObject, responses=ERRORS)
async def retrieve_response(response_id: str, request: Request, stream: bool = False) -> dict:
    """A stored response as it is now (a background one: in progress until it finishes)."""
    if stream:
        raise refuse("stream", "replaying a response's events is not implemented", "fetch it without stream")
    return response_store(request).get(response_id).response


@router.delete("/v1/responses/{response_id}", response_model=DeletedResponse, responses=ERRORS)
async def delete_response(response_id: str, request: Request) -> dict:
    """Forget a stored response (a running background one is cancelled)."""
    response_store(request).delete(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.post("/v1/responses/{response_id}/cancel", response_model=ResponseObject, responses=ERRORS)
async def cancel_response(response_id: str, request: Request) -> dict:
    """Stop a background response (its engine request is aborted); a finished one is returned as it is."""
    entry = response_store(request).get(response_id)
    if not entry.response.get("background"):
        raise APIError(400, f"response '{response_id}' was not created with background=true; only background "
                            "responses can be cancelled", param="response_id")
    task = entry.task
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except BaseException:  # noqa: BLE001 - the task records its own end
            pass
    return entry.response
