"""The OpenAI Responses door: ``POST /v1/responses`` (Codex, the ``openai`` SDK's
``client.responses``).

The same promise as the other doors, through the same engine: the request goes upstream
as the client sent it (``instructions``, ``input`` items, ``tools``, ``reasoning``,
``include``, ``store``, ``prompt_cache_key``, unknown fields), plus one memory block in
the user's newest message item (:mod:`memd.engine.formats.responses` converts to and from the
one conversation model); the event stream is relayed as it arrives, and the final
``response.completed`` event gives the reply memd stores.

A request that continues a response kept upstream (``previous_response_id``) carries
only its new items. memd remembers the session of every answer it stored by the
answer's id, so such a request is a turn of that session: its new items are stored
once after the session's stored turns, recall sees those turns, and the block goes into
its newest user message item, if it has one (memd cannot write into what the model
server keeps). A response memd never saw (stored before memd, by another workspace, or
erased) is forwarded as sent, as a side request without memory. The call report says
which (``previous_response``). Such a request is not virtualized: what makes it long is
kept by the model server, out of memd's reach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from memd.engine.formats import responses as r
from memd.engine.memory import Memd
from memd.server import schemas as s
from memd.server.bodies import ResponsesBody, responses_body
from memd.server.deps import engine_of, later_of, user_of, workspace_of
from memd.server.doors import DOOR_RESPONSES, converse
from memd.server.failures import error_body
from memd.server.fault_responses import RESPONSES_FAULTS
from memd.server.proxy import Door, body_of, forward_headers
from memd.server.threads import in_thread
from memd.server.upstream import NoUpstream, upstream_client
from memd.types import Message, Session

router = APIRouter()
RESPONSES = Door("responses", r.StreamReply, r.whole, forward_headers, field="input",
                 faults=RESPONSES_FAULTS)


@router.post("/v1/responses", responses=DOOR_RESPONSES, openapi_extra={
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": s.RESPONSES_REQUEST}}}})
async def responses(request: Request) -> Response:
    """OpenAI Responses through memd: memory in, the model's answer out."""
    sent = responses_body(await body_of(request))
    try:
        client = upstream_client(request)
    except NoUpstream as exc:
        return JSONResponse(error_body("upstream_not_configured", str(exc)), status_code=503)
    if sent.previous is not None:
        return await _continued(request, client, sent, sent.previous)
    return await converse(request, client, RESPONSES, sent)


async def _continued(request: Request, client: httpx.AsyncClient, sent: ResponsesBody,
                     previous: str) -> Response:
    """A request that continues the response ``previous``: a turn of its session, after
    the session's stored turns, or a side request when memd does not know it."""
    engine = engine_of(request)
    user = user_of(request)
    # the answer it continues may still be storing (memd.server.later): its session and
    # the id the model server keeps it by are read after that
    await later_of(request).settled(user)
    session = await in_thread(_session_of, engine, user, workspace_of(request), previous)
    if session is None:
        outcome = "without memory: previous response unknown"
        return await converse(
            request, client, RESPONSES, sent, put_back=lambda placed: None,
            side_because=outcome,
            note={"previous_response": {"id": previous, "outcome": outcome}})
    history = await in_thread(engine.store.get_messages, user, session.id)
    stored = [m.to_openai() for m in history]
    upstream = _upstream_id(history, previous)
    if upstream != previous:  # the id a streamed answer with faults showed its client
        sent = replace(sent, raw={**sent.raw, "previous_response_id": upstream},
                       shown_previous=previous)

    def put_back(placed: Sequence[Mapping[str, Any] | None]) -> Any:
        # the stored turns are the model server's to keep: the block goes only into
        # this request's own items
        if any(mine is not theirs for mine, theirs in zip(placed, stored, strict=False)):
            return None
        return sent.put_back(placed[len(stored):])

    return await converse(
        request, client, RESPONSES, sent, messages=[*stored, *sent.messages],
        put_back=put_back, session_id=session.id, virtualize="off", note={"previous_response": {
            "id": previous, "outcome": f"continued session {session.id}"}})


def _upstream_id(history: Sequence[Message], previous: str) -> str:
    """The id the model server keeps the answer ``previous`` by: a streamed answer
    whose model called memd's tools shows its client the first round's id, while the
    model server keeps the whole exchange under the last round's, which the stored
    reply records (memd.server.fault_responses)."""
    for m in reversed(history):
        last = m.metadata.get("response_id")
        if m.metadata.get("shown_response_id") == previous and isinstance(last, str):
            return last
    return previous


def _session_of(engine: Memd, user: str, workspace: str | None,
                response_id: str) -> Session | None:
    """The session of the answer ``response_id``, when it is this workspace's."""
    found = engine.store.response_session(user, response_id)
    session = engine.store.get_session(user, found) if found is not None else None
    return session if session is not None and session.workspace == workspace else None
