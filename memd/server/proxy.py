"""The OpenAI-compatible memory proxy: ``POST /v1/chat/completions`` and friends.

A call: resolve user, workspace and session; store what is new; resolve the model's
context window (:mod:`memd.server.windows`); add memory (a client that sends its history
gets every message forwarded unchanged plus one memory block within the window's
headroom; a client that sends only its newest turn gets the compiled context: see
:mod:`memd.engine.conversation.chat`); forward the request with every other field unchanged (tools,
tool_choice, response_format, temperature, unknown fields); relay the answer (SSE chunks
are passed through byte for byte as they arrive, never buffered); then store the reply,
usage and cost. If the client goes away mid-stream, what arrived is kept, marked
incomplete. Upstream errors keep their status and body, except that a request memd added
memory to and the model server refuses as too long for its context goes again without
the memory, once: memd never turns a request that would have worked into one that fails.
Every response carries ``X-Memd-Session`` and ``X-Memd-Call``; ``GET /v1/calls/{id}``
shows what was injected and why.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx
from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from memd.engine import validate
from memd.engine.conversation.chat import (
    PreparedCall,
    finish_chat,
    prepare_chat,
    prepare_side,
)
from memd.engine.conversation.side import side_reason
from memd.engine.formats import completions as c
from memd.engine.memory import Memd
from memd.errors import Conflict, InvalidInput
from memd.server import faults
from memd.server import schemas as s
from memd.server.bodies import Body, completions_body, plain_body
from memd.server.caller import Caller
from memd.server.deps import engine_of, later_of, user_of, workspace_of
from memd.server.failures import error_body
from memd.server.fault_formats import CHAT_FAULTS, FaultFormat
from memd.server.later import answer_then_store
from memd.server.security import PARSED_BODY, strict_parse
from memd.server.threads import in_thread
from memd.server.upstream import (
    NoUpstream,
    encode_body,
    upstream_client,
    window_of,
    windows_of,
)

log = logging.getLogger("memd.proxy")
router = APIRouter()


# What model servers say when a prompt is over the context window (OpenAI's error code,
# vLLM's and llama.cpp's messages, and the usual wordings of others).
_TOO_LONG = ("context_length_exceeded", "context length", "context size", "context window",
             "maximum context", "exceed_context_size", "prompt is too long",
             "too many tokens", "exceeds the available context")


def _too_long(status: int, content: bytes) -> bool:
    if status not in (400, 413, 422, 500):
        return False
    text = content[:4096].decode("utf-8", "replace").lower()
    return any(marker in text for marker in _TOO_LONG)


# Headers that are the connection's, not the request's (hop-by-hop), or that describe
# the request to memd rather than to the model server (its host, body framing, encoding,
# a browser's origin and cookies).
_NOT_FORWARDED = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host",
    "content-length", "content-type", "accept-encoding", "cookie", "origin", "referer",
})
# Credentials: the client's go on only in local mode without an upstream key of memd's
# own (in auth mode they are the memd key, which the model server must never see).
_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key"})


def forward_headers(request: Request) -> dict[str, str]:
    """What goes upstream with a forwarded request: every end-to-end header the client
    sent (its User-Agent, session and affinity headers that keep a provider's prompt
    cache on one machine, an SDK's ``x-stainless-*``), except the ones above and memd's
    own ``X-Memd-*``, with the credentials of the mode."""
    settings = request.app.state.settings
    listed = {h.strip().lower() for h in request.headers.get("connection", "").split(",")}
    out = {name: value for name, value in request.headers.items()
           if name not in _NOT_FORWARDED and name not in _CREDENTIALS
           and name not in listed and not name.startswith(("x-memd-", "sec-fetch-"))}
    out["accept-encoding"] = "identity"  # memd reads the body it relays
    out["content-type"] = "application/json"
    key = settings.upstream_api_key
    if key:
        out["authorization"] = f"Bearer {key}"
    elif not settings.auth:
        out.update((name, value) for name, value in request.headers.items()
                   if name in _CREDENTIALS)
    return out


def _memd_headers(call: PreparedCall) -> dict[str, str]:
    if call.session is None:  # a side request, or a turn while learning is paused
        flag = "X-Memd-Paused" if call.report.get("paused") else "X-Memd-Side"
        return {"X-Memd-Call": call.call_id, flag: "true"}
    return {"X-Memd-Session": call.session.id, "X-Memd-Call": call.call_id}


async def body_of(request: Request) -> dict[str, Any]:
    parsed = request.scope.get(PARSED_BODY)  # the guard parses every write's body
    body = parsed[0] if parsed is not None else strict_parse(await request.body())
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body




async def _unreachable(engine: Memd, call: PreparedCall, exc: httpx.HTTPError,
                       headers: dict[str, str], model: str | None) -> JSONResponse:
    """The upstream could not be reached or timed out: close the call, answer 502/504."""
    answer = out_of_reach(exc, headers)
    await in_thread(finish_chat, engine, call, status=answer.status_code, reply=None,
                    finish_reason=None, usage=None, model=model)
    return answer


def out_of_reach(exc: httpx.HTTPError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The answer when the model server cannot be reached (502) or timed out (504)."""
    if isinstance(exc, httpx.TimeoutException):
        return JSONResponse(error_body("upstream_timeout", f"the model server timed out: {exc}"),
                            status_code=504, headers=headers)
    return JSONResponse(error_body("upstream_unreachable",
                                   f"cannot reach the model server: {exc}"),
                        status_code=502, headers=headers)


class Accumulator(Protocol):
    """Rebuilds a reply from a streamed answer as it passes through."""

    done: bool
    finish_reason: str | None
    model: str | None

    @property
    def usage(self) -> dict[str, Any] | None: ...

    def feed(self, data: bytes) -> None: ...

    def reply(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Door:
    """How one API's request goes upstream and its answer is read back for storage:
    the upstream path, a streamed answer's accumulator, a whole answer's (reply, finish
    reason, usage), the headers, and the field that holds the conversation."""

    path: str
    stream: Callable[[], Accumulator]
    whole: Callable[[dict[str, Any]], tuple[dict[str, Any] | None, str | None,
                                             dict[str, Any] | None]]
    headers: Callable[[Request], dict[str, str]]
    field: str = "messages"  # the body's field memd adds its block to
    streams: bool = False  # whether a request that says nothing of "stream" streams
    faults: FaultFormat | None = None  # the format memd's memory tools go in, if served


CHAT = Door("chat/completions", c.StreamReply, c.whole, forward_headers,
            faults=CHAT_FAULTS)
COMPLETIONS = Door("completions", c.StreamReply, c.whole, forward_headers)

CHAT_ERRORS: dict[int | str, dict[str, Any]] = {
    **s.ERRORS,
    502: {"model": s.ErrorResponse, "description": "The model server cannot be reached"},
    503: {"model": s.ErrorResponse, "description": "No model server is configured"},
    504: {"model": s.ErrorResponse, "description": "The model server timed out"},
}


@router.post(
    "/v1/chat/completions", responses={
        200: {"description": "The model server's answer, relayed (SSE when streaming)",
              "content": {"application/json": {}, "text/event-stream": {}}},
        **CHAT_ERRORS},
    openapi_extra={
        "parameters": [{
            "name": "X-Memd-Session", "in": "header", "required": False,
            "description": "Pin the call to this session (created if new); memd then "
                           "owns its history.",
            "schema": {"type": "string", "pattern": validate.OPTIONAL_ID_PATTERN,
                       "maxLength": 128},
        }, {
            "name": "X-Memd-Memory", "in": "header", "required": False,
            "description": "'off': a side request of the client's (a title, summary or "
                           "compaction call): forwarded as sent, no memory, no session, "
                           "nothing learned. 'on': a turn of the conversation, whatever "
                           "its shape.",
            "schema": {"type": "string", "pattern": r"^\s*([oO][nN]|[oO][fF][fF])\s*$"},
        }, {
            "name": "X-Memd-Virtualize", "in": "header", "required": False,
            "description": "Context virtualization of this call: 'auto' (when the request "
                           "passes the caution line of the model's window), 'on' or 'off'.",
            "schema": {"type": "string",
                       "pattern": r"^\s*([aA][uU][tT][oO]|[oO][nN]|[oO][fF][fF])\s*$"},
        }],
        "requestBody": {"required": True,
                        "content": {"application/json": {"schema": s.CHAT_REQUEST}}},
    },
)
async def chat_completions(request: Request) -> Response:
    """OpenAI chat completions through memd: memory in, the model's answer out."""
    engine = engine_of(request)
    sent = completions_body(await body_of(request))
    model = sent.model
    caller = Caller.read(request)  # a bad memd header is refused even with a pinned session
    user, workspace, pinned = caller.user, caller.workspace, caller.session
    try:
        client = upstream_client(request)
    except NoUpstream as exc:
        return JSONResponse(error_body("upstream_not_configured", str(exc)), status_code=503)
    window = await window_of(request, model)
    reason = None if pinned else side_reason(
        sent.shape, caller.memory_header, user_id=user, client=caller.client,
        recent=engine.recent_turns, now=engine.now())
    try:
        if reason is not None:
            call = await in_thread(prepare_side, engine, user, workspace, model,
                                   sent.messages, reason, window)
        else:
            await later_of(request).settled(user)  # the user's answers stored first
            call = await in_thread(
                prepare_chat, engine, user, workspace, sent.messages,
                session_id=pinned, model=model, max_response_tokens=sent.max_tokens,
                tools=sent.tools, window=window, client=caller.agent,
                virtualize=caller.virtualize, conversation=caller.conversation,
                restorable=True,  # this door serves memory_restore (memd.server.faults)
                defer=True,  # a tool-loop step's writes wait for its finish
            )
    except Conflict as exc:
        if not pinned:
            raise
        # Session ids are per user: only a concurrent call creating the same session
        # first gets here. Say so instead of the store's words.
        raise Conflict(f"session {pinned!r} was being created by another call at the same "
                       "moment; send the request again") from exc
    return await relay(request, client, call, sent, CHAT)


@router.post(
    "/v1/completions", responses={
        200: {"description": "The model server's answer, relayed (SSE when streaming)",
              "content": {"application/json": {}, "text/event-stream": {}}},
        **CHAT_ERRORS},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "additionalProperties": True}}}}},
)
async def completions(request: Request) -> Response:
    """Text completions (an editor's autocomplete, fill-in-the-middle): forwarded exactly
    as sent, a side request of no session (memd learns nothing from code being typed)."""
    engine = engine_of(request)
    sent = plain_body(await body_of(request))
    try:
        client = upstream_client(request)
    except NoUpstream as exc:
        return JSONResponse(error_body("upstream_not_configured", str(exc)), status_code=503)
    call = await in_thread(prepare_side, engine, user_of(request), workspace_of(request),
                           sent.model, None, "a text completion (/v1/completions)")
    return await relay(request, client, call, sent, COMPLETIONS)


async def relay(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                sent: Body, door: Door) -> Response:
    """Send the call upstream and relay the answer (streamed or whole), storing it."""
    engine = engine_of(request)
    headers = _memd_headers(call)
    body, model = sent.raw, sent.model
    fmt = door.faults if door.faults is not None and faults.engaged(call) else None
    if fmt is not None:
        body = faults.with_tools(body, fmt)
    if door.streams if sent.stream is None else sent.stream:
        return await _stream(request, client, call, body, headers, model, door)
    changed = None
    try:
        resp, retried = await _send(client, request, call, body, stream=False, door=door)
        if fmt is not None:
            resp, changed = await faults.whole(request, client, call, body, resp, door.path,
                                               door.headers(request), fmt)
    except httpx.HTTPError as exc:
        return await _unreachable(engine, call, exc, headers, model)
    data: Any = changed
    if data is None and resp.headers.get("content-type", "").startswith("application/json"):
        try:
            data = resp.json()
        except json.JSONDecodeError:
            data = None
    reply, finish, usage = (door.whole(data) if resp.is_success and isinstance(data, dict)
                            else (None, None, None))
    # Stored once the client has the answer; its next call (which resends this reply)
    # waits for that first (memd.server.later).
    return answer_then_store(
        later_of(request), call, functools.partial(
            finish_chat, engine, call, status=resp.status_code, reply=reply,
            finish_reason=finish, usage=usage, model=model, retried=retried),
        content=resp.content if changed is None else encode_body(changed),
        status_code=resp.status_code, headers=headers,
        media_type=resp.headers.get("content-type", "application/json"))


async def _send(client: httpx.AsyncClient, request: Request, call: PreparedCall,
                body: dict[str, Any], *, stream: bool, door: Door,
                ) -> tuple[httpx.Response, bool]:
    """The upstream's response (with ``stream``, before its body is read), and whether it
    took a retry without memory: a refusal as too long of the request with memory goes
    again without it, once."""
    messages = call.forward
    while True:
        # what memd adds nothing to goes as the client sent it, byte for byte (and is not
        # encoded again: an agent's request is ~400 KB)
        content = (await request.body() if messages is call.plain and call.plain_as_sent
                   else encode_body({**body, door.field: messages}))
        req = client.build_request("POST", door.path, content=content,
                                   headers=door.headers(request))
        resp = await client.send(req, stream=stream)
        if resp.is_success or messages is call.plain:
            return resp, messages is not call.forward
        content = await resp.aread()
        await resp.aclose()
        if not _too_long(resp.status_code, content):
            return resp, False
        stated = windows_of(request).learn(body.get("model"), content)
        log.info("call %s: the model server refused the request with memory as too long%s; "
                 "sending it without", call.call_id,
                 f" (its window: {stated} tokens)" if stated else "")
        messages = call.plain


async def _stream(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                  body: dict[str, Any], headers: dict[str, str],
                  model: str | None, door: Door) -> Response:
    engine = engine_of(request)
    try:
        resp, retried = await _send(client, request, call, body, stream=True, door=door)
    except httpx.HTTPError as exc:
        return await _unreachable(engine, call, exc, headers, model)
    if not resp.is_success:
        content = await resp.aread()
        await resp.aclose()
        await in_thread(finish_chat, engine, call, status=resp.status_code, reply=None,
                        finish_reason=None, usage=None, model=model, retried=retried)
        return Response(content=content, status_code=resp.status_code, headers=headers,
                        media_type=resp.headers.get("content-type", "application/json"))
    if door.faults is not None and faults.engaged(call):
        return await faults.stream(request, client, call, body, resp, door.path,
                                   door.headers(request), headers, model, retried,
                                   door.faults)

    acc = door.stream()

    async def pass_through() -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.aiter_raw():
                acc.feed(chunk)
                yield chunk
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()

    # Stored once the last chunk is sent, or the client has gone (what arrived is kept);
    # its next call waits for that first (memd.server.later).
    return answer_then_store(
        later_of(request), call, lambda: finish_chat(
            engine, call, status=resp.status_code, reply=acc.reply(),
            finish_reason=acc.finish_reason, usage=acc.usage, model=acc.model or model,
            incomplete=not (acc.done or acc.finish_reason), retried=retried),
        content=pass_through(), status_code=resp.status_code, headers=headers,
        media_type=resp.headers.get("content-type", "text/event-stream"))


@router.get("/v1/models", responses={
    200: {"description": "The model server's list"},
    400: {"model": s.ErrorResponse, "description": "Invalid workspace"},
    502: CHAT_ERRORS[502], 503: CHAT_ERRORS[503], 504: CHAT_ERRORS[504]})
async def models(request: Request) -> Response:
    """The upstream model server's models, as the chat route answers when it is out of
    reach (502, or 504 on a timeout) or not configured (503)."""
    try:
        resp = await upstream_client(request).get("models", headers=forward_headers(request))
    except NoUpstream as exc:
        return JSONResponse(error_body("upstream_not_configured", str(exc)), status_code=503)
    except httpx.HTTPError as exc:
        return out_of_reach(exc)
    return Response(content=resp.content, status_code=resp.status_code,
                    media_type=resp.headers.get("content-type", "application/json"))


@router.get("/v1/calls/{call_id}", responses=s.ERRORS)
def get_call(request: Request, call_id: str = Path(
    description="A call's id (the X-Memd-Call header of its response).",
    json_schema_extra={"pattern": validate.ID_PATTERN, "maxLength": 128},
)) -> dict[str, Any]:
    """What memd injected into a proxied call, and why (the compiler's report)."""
    return engine_of(request).call(user_of(request), call_id)
