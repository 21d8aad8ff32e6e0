"""What every door of a chat API does with a call, once the door has read its format.

A door (Anthropic Messages, OpenAI Responses, Ollama) parses its request once
(:mod:`memd.server.bodies`), its conversation converted into memd's conversation model
(:mod:`memd.engine.formats.anthropic`, :mod:`memd.engine.formats.responses`), and hands
it here: a side request is recorded and forwarded as sent; a turn is stored and
gets its memory block, which the door puts back into its own format; then the call goes
upstream and its answer is relayed and stored (:func:`memd.server.proxy.relay`).

When context virtualization rewrites a long history (:mod:`memd.engine.virtual`), the
door puts that back too: it gets the rewritten messages aligned with the ones it gave
(None where an exchange was evicted) and rewrites its own format alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx
from fastapi import Request
from fastapi.responses import Response

from memd.engine.conversation.chat import prepare_chat, prepare_side
from memd.engine.conversation.side import side_reason
from memd.server.bodies import ChatBody, Placed
from memd.server.caller import Caller
from memd.server.deps import engine_of, later_of
from memd.server.proxy import CHAT_ERRORS, Door, relay
from memd.server.threads import in_thread
from memd.server.upstream import window_of
from memd.types import WindowInfo

#: The OpenAPI responses of a chat door's route.
DOOR_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The model server's answer, relayed (SSE when streaming)",
          "content": {"application/json": {}, "text/event-stream": {}}},
    **CHAT_ERRORS}


NO_PLACE = ("the block has no place in what this request sends (no message of the user's "
            "own); it was sent without")


async def converse(
    request: Request, client: httpx.AsyncClient, door: Door, sent: ChatBody, *,
    messages: list[dict[str, Any]] | None = None,
    put_back: Callable[[Placed], Any] | None = None, side_because: str | None = None,
    count: Callable[[str], Awaitable[int | None]] | None = None,
    session_id: str | None = None, note: Mapping[str, Any] | None = None,
    virtualize: str | None = None, window: WindowInfo | None = None,
) -> Response:
    """One call through memd: ``sent`` is the request as its door parsed it (its
    conversation in memd's model, unless ``messages`` gives another), ``put_back``
    gives the door's own ``door.field`` with the block the engine placed in the messages
    (None: it cannot; default: ``sent.put_back``), ``side_because`` makes it a side
    request whatever its shape, ``count`` is the model server's own token count of a
    text, where the door has one (it calibrates memd's); ``session_id`` names the session
    the call is a turn of (no inference, and no side request; else the
    ``X-Memd-Session`` header's, as on the Chat Completions door), ``note`` goes into
    the call's report, ``virtualize`` is the call's virtualization mode (default: the
    ``X-Memd-Virtualize`` header's, if any), ``window`` is the model's window when the
    request itself says it (else it is resolved as for every call). ``put_back`` is
    given the messages aligned with ``messages`` (None: left out)."""
    engine = engine_of(request)
    caller = Caller.read(request)
    model = sent.model
    messages = sent.messages if messages is None else messages
    put_back = sent.put_back if put_back is None else put_back
    session_id = session_id or caller.session
    virtualize = virtualize or caller.virtualize
    user, workspace = caller.user, caller.workspace
    if window is None:
        window = await window_of(request, model, count)
    reason = side_because
    if reason is None and session_id is not None:  # a turn of that session, unless told
        reason = "X-Memd-Memory: off" if caller.memory == "off" else None
    elif reason is None:
        reason = side_reason(
            sent.shape, caller.memory_header, user_id=user, client=caller.client,
            recent=engine.recent_turns, now=engine.now())
    if reason is not None:
        call = await in_thread(prepare_side, engine, user, workspace, model, messages,
                               reason, window, note)
    else:
        await later_of(request).settled(user)  # the user's answers stored first
        call = await in_thread(
            prepare_chat, engine, user, workspace, messages, model=model,
            max_response_tokens=sent.max_tokens, tools=sent.tools, window=window,
            placement="user", client=caller.agent, session_id=session_id, note=note,
            virtualize=virtualize, conversation=caller.conversation,
            restorable=door.faults is not None,  # it serves memory_restore
            defer=True)  # a tool-loop step's writes wait for its finish
    plain = sent.raw[door.field]
    placed = None
    if call.kept is not None:
        plain = put_back(aligned(call.plain, call.kept, len(messages))) or plain
        if call.memory_added and len(call.forward) == len(call.kept):
            placed = put_back(aligned(call.forward, call.kept, len(messages)))
    elif call.memory_added:
        placed = put_back(call.forward)
    dropped = NO_PLACE if call.memory_added and placed is None else None
    call = replace(call, forward=placed if placed is not None else plain, plain=plain,
                   dropped=dropped, plain_as_sent=call.plain_as_sent and sent.as_sent())
    return await relay(request, client, call, sent, door)


def aligned(rewritten: Sequence[Mapping[str, Any]], kept: Sequence[int],
            size: int) -> list[Mapping[str, Any] | None]:
    """The ``rewritten`` messages at the places of the ``size`` messages they came from
    (``kept``), None at the places of those left out."""
    out: list[Mapping[str, Any] | None] = [None] * size
    for message, at in zip(rewritten, kept, strict=True):
        out[at] = message
    return out
