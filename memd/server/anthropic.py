"""The Anthropic Messages door: ``POST /v1/messages`` (Claude Code, the ``anthropic`` SDK).

The same promise as the Chat Completions door (:mod:`memd.server.proxy`), through the
same engine: the request goes upstream as the client sent it (``system``, ``tools``,
thinking blocks and their signatures, ``cache_control`` breakpoints, unknown fields, the
query string, ``anthropic-version`` and ``anthropic-beta``), plus one memory block in the
user's newest typed turn (:mod:`memd.engine.formats.anthropic` converts to and from the one
conversation model); the event stream is relayed as it arrives, never re-framed, and a
tee rebuilds the reply for storage. Side requests (a title asked for as JSON, a client's
own prompts) go as sent with no memory and no session.

Upstream: ``upstream_anthropic_url`` (a base URL as ``ANTHROPIC_BASE_URL`` takes), else
``upstream_url`` for model servers that serve both APIs. With an upstream key of memd's
own it goes as ``x-api-key``; otherwise, in local mode, the client's credentials go on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from memd.engine.formats import anthropic as a
from memd.engine.validate import is_count
from memd.models.tokens import count_text
from memd.server import schemas as s
from memd.server.bodies import messages_body
from memd.server.doors import DOOR_RESPONSES, converse
from memd.server.failures import error_body
from memd.server.fault_formats import MESSAGES_FAULTS
from memd.server.proxy import CHAT_ERRORS, Door, body_of, forward_headers, out_of_reach
from memd.server.upstream import NO_UPSTREAM, NoUpstream, cached_client, upstream_client

router = APIRouter()


def _upstream(request: Request) -> tuple[httpx.AsyncClient, str]:
    """The client to the Anthropic-format upstream and the Messages path under it."""
    app = request.app
    settings = app.state.settings
    if not settings.upstream_anthropic_url:
        return upstream_client(request), "messages"
    return cached_client(app, "upstream_anthropic", settings.upstream_anthropic_url), \
        "v1/messages"


def _anthropic_headers(request: Request) -> dict[str, str]:
    """The forwarded headers, with memd's own upstream key as Anthropic takes it."""
    out = forward_headers(request)
    key = request.app.state.settings.upstream_api_key
    if key:
        out.pop("authorization", None)
        out["x-api-key"] = key
    return out


def _path(request: Request, path: str, suffix: str = "") -> str:
    """The upstream path with the client's query string (Claude Code sends
    ``?beta=true``)."""
    query = request.url.query
    return path + suffix + ("?" + query if query else "")


@router.post("/v1/messages", responses=DOOR_RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": s.MESSAGES_REQUEST}}}})
async def messages(request: Request) -> Response:
    """Anthropic Messages through memd: memory in, the model's answer out."""
    sent = messages_body(await body_of(request))
    try:
        client, path = _upstream(request)
    except NoUpstream:
        return JSONResponse(error_body("upstream_not_configured", NO_UPSTREAM),
                            status_code=503)
    door = Door(_path(request, path), a.StreamReply, a.whole, _anthropic_headers,
                faults=MESSAGES_FAULTS)
    return await converse(request, client, door, sent,
                          count=_counter(request, client, path, sent.model))


def _counter(request: Request, client: httpx.AsyncClient, path: str,
             model: str | None) -> Callable[[str], Awaitable[int | None]]:
    """The model server's count of the prompt tokens of one user message holding a
    text, asked with this request's credentials: None when it has no count_tokens
    route or gives no count; an error status past 499 raises, to be asked again later."""
    async def count(text: str) -> int | None:
        resp = await client.post(
            path + "/count_tokens", headers=_anthropic_headers(request),
            json={"model": model, "messages": [{"role": "user", "content": text}]})
        if resp.status_code >= 500:
            resp.raise_for_status()
        try:
            n = resp.json().get("input_tokens") if resp.is_success else None
        except (ValueError, AttributeError):
            return None
        return n if is_count(n) else None

    return count


@router.post("/v1/messages/count_tokens", responses={
    200: {"description": "The model server's count"}, **CHAT_ERRORS},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "additionalProperties": True}}}}})
async def count_tokens(request: Request) -> Response:
    """The model server's token count of a Messages request, asked as sent (memd adds
    nothing to it); memd's own count when the model server has no such route."""
    body = await body_of(request)
    try:
        client, path = _upstream(request)
        resp = await client.post(_path(request, path, "/count_tokens"),
                                 content=await request.body(),
                                 headers=_anthropic_headers(request))
    except NoUpstream:
        resp = None
    except httpx.HTTPError as exc:
        return out_of_reach(exc)
    if resp is None or resp.status_code in (404, 405):
        return JSONResponse({"input_tokens": _own_count(body)})
    return Response(content=resp.content, status_code=resp.status_code,
                    media_type=resp.headers.get("content-type", "application/json"))


def _own_count(body: dict[str, Any]) -> int:
    """The request's prompt tokens by memd's counter: its system, tools and messages."""
    model = body.get("model") if isinstance(body.get("model"), str) else None
    prompt = [body.get(k) for k in ("system", "tools", "messages") if body.get(k)]
    return count_text(json.dumps(prompt, ensure_ascii=False), model)
