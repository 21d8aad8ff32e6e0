"""The Ollama door: Ollama's native API (``/api/chat`` and the routes its clients call
beside it), for chat UIs and editors that speak it (Open WebUI, Continue's ``ollama``
provider) and cannot point at an OpenAI base URL.

``/api/chat`` keeps the promise of the other doors, through the same engine: the request
goes upstream as the client sent it, plus one memory block before the text of the
user's newest message (:mod:`memd.engine.formats.ollama` converts to and from the one
conversation model); the answer, newline-delimited JSON when streaming (Ollama's
default) or one JSON object, is relayed as it arrives, its last line's timing fields
included, and a tee rebuilds the reply for storage. ``options.num_ctx``, when the client
sets it, is the window the model runs with, so it is the window memd fits its block in.

``/api/generate`` (a raw prompt, fill-in-the-middle) goes as sent, byte for byte, with no
memory, as a side request of no session: memd learns nothing from code being typed.
``/api/tags``, ``/api/show``, ``/api/version``, ``/api/ps`` and ``/api/embed`` are relayed
as they are. Upstream: ``upstream_ollama_url`` (default ``http://127.0.0.1:11434``).

Errors are answered as Ollama answers them, ``{"error": "..."}``, so its clients show
memd's message as they would the server's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from memd.engine.conversation.chat import prepare_side
from memd.engine.formats import ollama as o
from memd.errors import MemdError
from memd.server.bodies import Body, ollama_body, plain_body
from memd.server.deps import engine_of, user_of, workspace_of
from memd.server.doors import converse
from memd.server.failures import reply_for, status_for
from memd.server.fault_ollama import OLLAMA_FAULTS
from memd.server.ollama_schema import CHAT_REQUEST, OBJECT_REQUEST
from memd.server.proxy import Door, body_of, forward_headers, out_of_reach, relay
from memd.server.threads import in_thread
from memd.server.upstream import cached_client
from memd.types import WindowInfo

router = APIRouter()
# Ollama's error shape; what is refused before the door reads the request (a bad
# workspace, a missing key in team mode, a cross-site request) and a store out of reach
# have memd's
ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"anyOf": [
    {"type": "string"}, {"type": "object", "required": ["message"]}]}}}
_RELAYED = {"description": "The Ollama server's answer, relayed",
            "content": {"application/json": {}, "application/x-ndjson": {}}}
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: _RELAYED,
    "default": {"description": "An error, as Ollama gives it (the server's own, relayed, "
                               "or memd's: 400 bad input, 502/504 the server out of reach)",
                "content": {"application/json": {"schema": ERROR}}},
}


def _headers(request: Request) -> dict[str, str]:
    """The forwarded headers, never with memd's own upstream key: that key is the
    OpenAI-format model server's, and the Ollama server is another one. The client's
    credentials go on in local mode, as on every door."""
    out = forward_headers(request)
    settings = request.app.state.settings
    if settings.upstream_api_key:
        out.pop("authorization", None)
        mine = request.headers.get("authorization")
        if mine is not None and not settings.auth:
            out["authorization"] = mine
    return out


# Ollama streams unless the request says "stream": false
CHAT = Door("api/chat", o.StreamReply, o.whole, _headers, streams=True,
            faults=OLLAMA_FAULTS)
GENERATE = Door("api/generate", o.StreamReply, o.whole, _headers, streams=True)

def _client(request: Request) -> httpx.AsyncClient:
    return cached_client(request.app, "upstream_ollama",
                         request.app.state.settings.upstream_ollama_url)


def _ollama_error(answer: Response) -> Response:
    """memd's own error answer in Ollama's shape; anything else as it is."""
    if not isinstance(answer, JSONResponse) or answer.status_code < 400:
        return answer
    try:
        error = json.loads(bytes(answer.body)).get("error")
    except (ValueError, AttributeError):
        return answer
    if not isinstance(error, dict):
        return answer
    headers = {k: v for k, v in answer.headers.items()
               if k.lower() not in ("content-length", "content-type")}
    return JSONResponse({"error": str(error.get("message", ""))},
                        status_code=answer.status_code, headers=headers)


async def _answered(route: Callable[[], Awaitable[Response]]) -> Response:
    """``route``'s answer, its errors (raised or answered) in Ollama's shape; a store out
    of reach goes to the app's handler, which tracks the store's health."""
    try:
        return _ollama_error(await route())
    except MemdError as exc:
        if status_for(exc) >= 500:
            raise
        status, body, headers = reply_for(exc)
        return JSONResponse({"error": body["error"]["message"]}, status_code=status,
                            headers=headers)


@router.post("/api/chat", responses=RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": CHAT_REQUEST}}}})
async def chat(request: Request) -> Response:
    """Ollama chat through memd: memory in, the model's answer out (NDJSON unless
    ``"stream": false``)."""
    async def route() -> Response:
        sent = ollama_body(await body_of(request))
        limit = sent.num_ctx
        window = (WindowInfo(limit, "request", "options.num_ctx")
                  if limit is not None and "x-memd-context-window" not in request.headers
                  else None)
        if not sent.messages:
            return await _as_sent(request, sent, CHAT,
                                  "no messages (a request that loads the model)")
        return await converse(request, _client(request), CHAT, sent, window=window)

    return await _answered(route)


@router.post("/api/generate", responses=RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": OBJECT_REQUEST}}}})
async def generate(request: Request) -> Response:
    """A raw completion (a prompt, fill-in-the-middle): forwarded exactly as sent, with no
    memory and no session."""
    async def route() -> Response:
        sent = plain_body(await body_of(request))
        return await _as_sent(request, sent, GENERATE, "a text completion (/api/generate)")

    return await _answered(route)


async def _as_sent(request: Request, sent: Body, door: Door, reason: str) -> Response:
    """The request forwarded byte for byte, a side request of no session, for
    ``reason``."""
    call = await in_thread(prepare_side, engine_of(request), user_of(request),
                           workspace_of(request), sent.model, None, reason)
    return await relay(request, _client(request), call, sent, door)


async def _relayed(request: Request, method: str, path: str) -> Response:
    """The Ollama server's answer to the request, sent on as it came."""
    async def route() -> Response:
        content = None
        if method == "POST":
            await body_of(request)  # a JSON object, or a clear 400
            content = await request.body()
        try:
            resp = await _client(request).request(method, path, content=content,
                                                  headers=_headers(request))
        except httpx.HTTPError as exc:
            return out_of_reach(exc)
        return Response(content=resp.content, status_code=resp.status_code,
                        media_type=resp.headers.get("content-type", "application/json"))

    return await _answered(route)


@router.get("/api/tags", responses=RESPONSES)
async def tags(request: Request) -> Response:
    """The Ollama server's local models."""
    return await _relayed(request, "GET", "api/tags")


@router.get("/api/ps", responses=RESPONSES)
async def running(request: Request) -> Response:
    """The models the Ollama server has loaded."""
    return await _relayed(request, "GET", "api/ps")


@router.get("/api/version", responses=RESPONSES)
async def version(request: Request) -> Response:
    """The Ollama server's version."""
    return await _relayed(request, "GET", "api/version")


@router.post("/api/show", responses=RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": OBJECT_REQUEST}}}})
async def show(request: Request) -> Response:
    """A model's details (parameters, template, context length)."""
    return await _relayed(request, "POST", "api/show")


@router.post("/api/embed", responses=RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": OBJECT_REQUEST}}}})
async def embed(request: Request) -> Response:
    """Embeddings by the Ollama server's model."""
    return await _relayed(request, "POST", "api/embed")
