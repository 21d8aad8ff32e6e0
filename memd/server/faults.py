"""The fault loop of a virtualized Chat Completions call (memd.engine.virtual.faults).

memd's two memory tools go upstream with the client's. When the model's reply calls
them, memd serves the calls and asks the model again with the calls and their results
appended, up to ``virtual_max_faults`` times per client call; the client gets only the
final answer, streamed as usual when it streams, and never sees a memory tool call.
A streamed answer passes through as it arrives until a tool call starts; from there it
is held until the round ends, since only then is it known whose calls they are.

A reply that calls memd's tools and the client's together: memd serves its own (a
restore takes effect on the next call; the fault is recorded) and the client gets the
reply with its own calls only, without another round. Calls made together are
independent by construction, so the client's stand without memd's results; asking the
model again instead would throw away calls it meant, or need their results, which only
the client has. Nothing of the fault rounds is stored as a message: the stored reply is
the one the client got.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from memd.engine.conversation.chat import PreparedCall, finish_chat
from memd.engine.formats import completions as c
from memd.engine.virtual import faults as f
from memd.server.deps import engine_of
from memd.server.threads import in_thread
from memd.server.upstream import encode_body


def engaged(call: PreparedCall) -> bool:
    """Whether memd's tools go with the call: it was virtualized, and holds objects
    below full fidelity (with nothing held out there is nothing to fault back)."""
    virtual = call.report.get("virtual") or {}
    return bool(virtual.get("engaged") and virtual.get("held"))


def with_tools(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "tools": f.with_tools(body.get("tools"))}




async def _serve(request: Request, call: PreparedCall, ours: list[Mapping[str, Any]],
                 ) -> list[dict[str, Any]]:
    """Serve memd's calls of a reply; their tool messages, and the call report's list."""
    engine = engine_of(request)
    session = call.session
    assert session is not None  # a virtualized call is of a session
    out: list[dict[str, Any]] = []
    listed = call.report.setdefault("virtual", {}).setdefault("faults", [])
    for tc in ours:
        served = await in_thread(f.serve, engine, call.user_id, session.id,
                                         call.turn, call.call_id, tc)
        fault = served.fault
        listed.append({"fault_id": fault.fault_id, "kind": fault.kind,
                       "question": fault.question, "objects": list(fault.object_ids),
                       "tokens_avoided": fault.tokens_avoided,
                       "latency_ms": fault.latency_ms})
        out.append({"role": "tool", "tool_call_id": tc.get("id"), "content": served.content})
    return out


def _faults_left(request: Request, call: PreparedCall) -> int:
    served = len((call.report.get("virtual") or {}).get("faults") or ())
    return engine_of(request).settings.virtual_max_faults - served


def _again(messages: list[dict[str, Any]],
           ours: list[Mapping[str, Any]], results: list[dict[str, Any]],
           content: Any) -> list[dict[str, Any]]:
    return [*messages, {"role": "assistant", "content": content, "tool_calls": ours},
            *results]


def _strip(message: Mapping[str, Any]) -> dict[str, Any]:
    """A reply's message without memd's calls (None when it had only those)."""
    _, theirs = f.split_calls(message.get("tool_calls") or ())
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    if theirs:
        out["tool_calls"] = theirs
    return out


async def whole(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                body: dict[str, Any], resp: httpx.Response, door_path: str,
                headers: dict[str, str]) -> tuple[httpx.Response, dict[str, Any] | None]:
    """Serve the faults of a whole answer: the final response, and its JSON when memd
    changed it (memd's calls taken out of a reply that also calls the client's)."""
    messages = list(call.forward)
    while resp.is_success:
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return resp, None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            return resp, None
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            return resp, None
        ours, theirs = f.split_calls(message.get("tool_calls") or ())
        if not ours:
            return resp, None
        results = await _serve(request, call, ours) if _faults_left(request, call) > 0 \
            else []
        if theirs or not results:
            choices[0] = {**choices[0], "message": _strip(message)}
            if not theirs and choices[0].get("finish_reason") == "tool_calls":
                choices[0]["finish_reason"] = "stop"
            return resp, data
        messages = _again(messages, ours, results, message.get("content"))
        resp = await client.post(door_path, content=encode_body({**body, "messages": messages}),
                                 headers=headers)
    return resp, None


async def stream(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                 body: dict[str, Any], first: httpx.Response, door_path: str,
                 upstream_headers: dict[str, str], headers: dict[str, str],
                 model: str | None, retried: bool) -> Response:
    """Relay a streamed answer, serving its faults (see the module docstring)."""
    engine = engine_of(request)

    async def rounds() -> AsyncIterator[bytes]:
        resp = first
        messages = list(call.forward)
        acc = c.StreamReply()
        stored = False

        def store(final: c.StreamReply, strip: bool) -> None:
            nonlocal stored
            if not stored:
                stored = True
                reply = final.reply()
                finish_chat(engine, call, status=resp.status_code,
                            reply=_strip(reply) if strip else reply,
                            finish_reason=final.finish_reason, usage=final.usage,
                            model=final.model or model,
                            incomplete=not (final.done or final.finish_reason),
                            retried=retried)

        try:
            while True:
                acc = c.StreamReply()
                held: list[bytes] = []
                async for chunk in resp.aiter_raw():
                    acc.feed(chunk)
                    if held or acc.tool_calls:
                        held.append(chunk)
                        continue
                    if acc.done:  # stored before the client sees the end (memd.server.proxy)
                        await in_thread(store, acc, False)
                    yield chunk
                await resp.aclose()
                ours, theirs = f.split_calls(acc.reply().get("tool_calls") or ())
                if not ours:
                    await in_thread(store, acc, False)
                    for chunk in held:
                        yield chunk
                    return
                results = (await _serve(request, call, ours)
                           if _faults_left(request, call) > 0 else [])
                if theirs or not results:
                    await in_thread(store, acc, True)
                    yield _without_ours(b"".join(held), {
                        i for i, tc in acc.tool_calls.items()
                        if tc["function"]["name"] in f.NAMES_OF_TOOLS})
                    return
                messages = _again(messages, ours, results, acc.reply().get("content"))
                req = client.build_request(
                    "POST", door_path, content=encode_body({**body, "messages": messages}),
                    headers=upstream_headers)
                resp = await client.send(req, stream=True)
                if not resp.is_success:
                    yield await resp.aread()
                    return
        finally:
            store(acc, True)
            with anyio.CancelScope(shield=True):
                await resp.aclose()

    return StreamingResponse(rounds(), status_code=first.status_code, headers=headers,
                             media_type=first.headers.get("content-type", "text/event-stream"))


def _without_ours(raw: bytes, ours: set[int]) -> bytes:
    """SSE events with memd's tool calls (by their index) taken out and the client's
    numbered from 0; a choice whose reply ends with only memd's calls ends as "stop"."""
    keep = 0
    index: dict[int, int] = {}
    out: list[bytes] = []
    for event in raw.split(b"\n\n"):
        text = event.strip()
        if not text.startswith(b"data:") or text == b"data: [DONE]":
            out.append(event)
            continue
        try:
            chunk = json.loads(text[5:])
        except json.JSONDecodeError:
            out.append(event)
            continue
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            calls = []
            for tc in delta.get("tool_calls") or ():
                i = int(tc.get("index", 0))
                if i in ours:
                    continue
                if i not in index:
                    index[i] = keep
                    keep += 1
                calls.append({**tc, "index": index[i]})
            if "tool_calls" in delta:
                delta["tool_calls"] = calls
                if not calls:
                    del delta["tool_calls"]
            if choice.get("finish_reason") == "tool_calls" and not index:
                choice["finish_reason"] = "stop"
        out.append(b"data: " + encode_body(chunk))
    return b"\n\n".join(out)
