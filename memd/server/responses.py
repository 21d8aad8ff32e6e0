"""The OpenAI Responses door: ``POST /v1/responses`` (Codex, the ``openai`` SDK's
``client.responses``).

The same promise as the other doors, through the same engine: the request goes upstream
as the client sent it (``instructions``, ``input`` items, ``tools``, ``reasoning``,
``include``, ``store``, ``prompt_cache_key``, unknown fields), plus one memory block in
the user's newest message item (:mod:`memd.engine.responses` converts to and from the
one conversation model); the event stream is relayed as it arrives, and the final
``response.completed`` event gives the reply memd stores. A request that continues a
response stored upstream (``previous_response_id``) carries only its new items: memd
cannot see the conversation it continues, so it forwards it as sent, as a side request,
and its call record says so.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from memd.engine import responses as r
from memd.errors import InvalidInput
from memd.server import schemas as s
from memd.server.doors import DOOR_RESPONSES, checked_model, converse
from memd.server.failures import error_body
from memd.server.proxy import (
    Door,
    NoUpstream,
    body_of,
    forward_headers,
    token_field,
    upstream_client,
)

router = APIRouter()
RESPONSES = Door("responses", r.StreamReply, r.whole, forward_headers, field="input")


@router.post("/v1/responses", responses=DOOR_RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": s.RESPONSES_REQUEST}}}})
async def responses(request: Request) -> Response:
    """OpenAI Responses through memd: memory in, the model's answer out."""
    body = await body_of(request)
    if not isinstance(body.get("input"), str | list) or not body["input"]:
        raise InvalidInput("'input' is required: a string or a non-empty list of items")
    if isinstance(body["input"], list) and not all(isinstance(i, dict) for i in body["input"]):
        raise InvalidInput("'input' items must be objects")
    model = checked_model(body)
    max_tokens = token_field(body, "max_output_tokens")
    try:
        client = upstream_client(request)
    except NoUpstream as exc:
        return JSONResponse(error_body("upstream_not_configured", str(exc)), status_code=503)
    seen = r.view(body)
    return await converse(
        request, client, RESPONSES, body, model=model, messages=seen.messages,
        shape=r.side_body(body, seen), put_back=lambda placed: r.forward(body, seen, placed),
        max_tokens=max_tokens,
        side_because="continues a response stored upstream (previous_response_id)"
        if body.get("previous_response_id") else None)
