"""The Anthropic Messages door: ``POST /v1/messages`` (Claude Code, the ``anthropic`` SDK).

The same promise as the Chat Completions door (:mod:`memd.server.proxy`), through the
same engine: the request goes upstream as the client sent it (``system``, ``tools``,
thinking blocks and their signatures, ``cache_control`` breakpoints, unknown fields, the
query string, ``anthropic-version`` and ``anthropic-beta``), plus one memory block in the
user's newest typed turn (:mod:`memd.engine.anthropic` converts to and from the one
conversation model); the event stream is relayed as it arrives, never re-framed, and a
tee rebuilds the reply for storage. Side requests (a title asked for as JSON, a client's
own prompts) go as sent with no memory and no session.

Upstream: ``upstream_anthropic_url`` (a base URL as ``ANTHROPIC_BASE_URL`` takes), else
``upstream_url`` for model servers that serve both APIs. With an upstream key of memd's
own it goes as ``x-api-key``; otherwise, in local mode, the client's credentials go on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from memd.engine import anthropic as a
from memd.engine import side, validate
from memd.engine.chat import prepare_chat, prepare_side
from memd.engine.identity import client_family
from memd.engine.side import side_reason
from memd.errors import InvalidInput
from memd.models.tokens import count_text
from memd.server import schemas as s
from memd.server.deps import engine_of, user_of, workspace_of
from memd.server.proxy import (
    CHAT_ERRORS,
    NO_UPSTREAM,
    Door,
    NoUpstream,
    body_of,
    forward_headers,
    out_of_reach,
    relay,
    token_field,
    upstream_client,
    window_of,
)
from memd.server.security import error_body

router = APIRouter()


def _upstream(request: Request) -> tuple[httpx.AsyncClient, str]:
    """The client to the Anthropic-format upstream and the Messages path under it."""
    app = request.app
    settings = app.state.settings
    if not settings.upstream_anthropic_url:
        return upstream_client(request), "messages"
    client: httpx.AsyncClient | None = getattr(app.state, "upstream_anthropic", None)
    if client is None:
        client = httpx.AsyncClient(
            transport=app.state.upstream_transport,
            base_url=settings.upstream_anthropic_url.rstrip("/") + "/",
            timeout=httpx.Timeout(settings.upstream_timeout, connect=10.0),
        )
        app.state.upstream_anthropic = client
    return client, "v1/messages"


def _anthropic_headers(request: Request) -> dict[str, str]:
    """The forwarded headers, with memd's own upstream key as Anthropic takes it."""
    out = forward_headers(request)
    key = request.app.state.settings.upstream_api_key
    if key:
        out.pop("authorization", None)
        out["x-api-key"] = key
    return out


def _whole(data: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None,
                                          dict[str, Any] | None]:
    """A whole Messages answer's (reply, stop reason, usage)."""
    stop = data.get("stop_reason")
    reply = a.assistant(data["content"]) if isinstance(data.get("content"), list) else None
    return (validate.sanitized(reply) if reply is not None else None,
            validate.clean_chars(stop) if isinstance(stop, str) else None,
            a.usage(data.get("usage")))


def _path(request: Request, path: str, suffix: str = "") -> str:
    """The upstream path with the client's query string (Claude Code sends
    ``?beta=true``)."""
    query = request.url.query
    return path + suffix + ("?" + query if query else "")


@router.post(
    "/v1/messages", responses={
        200: {"description": "The model server's answer, relayed (SSE when streaming)",
              "content": {"application/json": {}, "text/event-stream": {}}},
        **CHAT_ERRORS},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": s.MESSAGES_REQUEST}}}},
)
async def messages(request: Request) -> Response:
    """Anthropic Messages through memd: memory in, the model's answer out."""
    engine = engine_of(request)
    body = await body_of(request)
    if not isinstance(body.get("messages"), list):
        raise InvalidInput("'messages' is required and must be a list")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidInput("'stream' must be a boolean")
    if "model" in body and not isinstance(body["model"], str):
        raise InvalidInput(f"'model' must be a string, not {type(body['model']).__name__}")
    model = validate.clean_chars(body["model"]) if "model" in body else None
    max_tokens = token_field(body, "max_tokens")
    try:
        client, path = _upstream(request)
    except NoUpstream:
        return JSONResponse(error_body("upstream_not_configured", NO_UPSTREAM),
                            status_code=503)
    user, workspace = user_of(request), workspace_of(request)
    window = await window_of(request, model)
    seen = a.view(body)
    agent = request.headers.get("user-agent")
    reason = side_reason(a.side_body(body, seen), request.headers.get(side.HEADER),
                         user_id=user, client=client_family(agent) or "",
                         recent=engine.recent_turns, now=engine.now())
    if reason is not None:
        call = await run_in_threadpool(prepare_side, engine, user, workspace, model,
                                       seen.messages, reason, window)
    else:
        call = await run_in_threadpool(
            prepare_chat, engine, user, workspace, seen.messages, model=model,
            max_response_tokens=max_tokens, tools=body.get("tools"), window=window,
            placement="user", client=agent)
    plain = body["messages"]
    placed = a.forward(body, seen, call.forward) if call.memory_added else None
    call = replace(call, forward=placed if placed is not None else plain, plain=plain)
    door = Door(_path(request, path), a.StreamReply, _whole, _anthropic_headers)
    return await relay(request, client, call, body, model, door)


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
