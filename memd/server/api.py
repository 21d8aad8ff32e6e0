"""The native HTTP API: memories, search, context, sessions, messages, facts, calls,
background jobs, embeddings, erasure.

Every route is a thin shell over the synchronous :class:`memd.engine.memory.Memd`: it
resolves the acting user (``user_id`` in the body or query, else ``X-Memd-User``, else
the default user) and the workspace (the ``/w/{workspace}`` prefix, else the body's or
query's ``workspace``), calls the engine and turns its dataclasses into JSON. Routes are
plain ``def`` so FastAPI runs them in its threadpool. The engine validates meaning and
raises ``InvalidInput``/``NotFound``, which the app maps to 400/404.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Path, Query, Request

from memd.engine import validate as v
from memd.engine.shapes import (
    fact_json,
    fact_result_json,
    forget_preview_json,
    job_json,
    memory_json,
    message_json,
    pruned_json,
    session_json,
    write_json,
)
from memd.errors import InvalidInput
from memd.models.tokens import count_text
from memd.server import schemas as s
from memd.server.deps import engine_of, user_of, workspace_of
from memd.types import Fact, Hit

MAX_EMBEDDING_INPUTS = 2048

router = APIRouter(responses=s.ERRORS)

UserQuery = Query(None, description="The acting user (default: X-Memd-User, else the "
                                    "configured default user).",
                  json_schema_extra={"pattern": v.OPTIONAL_ID_PATTERN, "maxLength": 128})
WorkspaceQuery = Query(None, alias="workspace",
                       description="Scope to a workspace (under /w/{workspace}: the path).",
                       json_schema_extra={"pattern": v.OPTIONAL_ID_PATTERN,
                                          "maxLength": 128})
MemoryId = Path(description="A memory's id.",
                json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})
SessionId = Path(description="A session's id.",
                 json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})
MessageId = Path(description="A message's id (as `GET /v1/sessions/{id}/messages` lists it).",
                 json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})
CallId = Path(description="A call's id (the X-Memd-Call header of its response).",
              json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})
UserId = Path(description="A user's id (with authentication: the API key's own user).",
              json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})


def _messages(items: list[s.MessageIn]) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_unset=True) for m in items]


# -- memories -------------------------------------------------------------------------
@router.post("/v1/memories", status_code=201, tags=["memories"])
def add_memory(request: Request, body: s.MemoryCreate) -> dict[str, Any]:
    """Store a memory through the full write path: an exact duplicate bumps the existing
    memory's ``access_count`` (``action: duplicate``), a near duplicate merges
    (``merged``), a conflicting statement supersedes the old one (``superseded``, its id
    in ``replaced``) or loses to it (``rejected``); otherwise ``inserted``."""
    result = engine_of(request).add(
        body.text, user_of(request, body.user_id), workspace=workspace_of(request, body.workspace),
        tier=body.tier, scope=body.scope, tags=body.tags, importance=body.importance,
        confidence=body.confidence, session_id=body.session_id, metadata=body.metadata,
    )
    return write_json(result)


@router.get("/v1/memories", tags=["memories"])
def list_memories(
    request: Request, user_id: str | None = UserQuery, ws: str | None = WorkspaceQuery,
    limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=2**31),
    include_inactive: bool = Query(False, description="Also superseded and expired ones."),
) -> dict[str, Any]:
    """The user's memories, newest first; with a workspace, that workspace's plus the
    user's global ones."""
    found = engine_of(request).list(
        user_of(request, user_id), workspace=workspace_of(request, ws), limit=limit,
        offset=offset, include_inactive=include_inactive,
    )
    return {"memories": [memory_json(m) for m in found]}


@router.get("/v1/memories/{memory_id}", tags=["memories"])
def get_memory(request: Request, memory_id: str = MemoryId,
               user_id: str | None = UserQuery) -> dict[str, Any]:
    """One memory of the user (another user's memory is a 404)."""
    return memory_json(engine_of(request).get(memory_id, user_of(request, user_id)))


@router.patch("/v1/memories/{memory_id}", tags=["memories"])
def update_memory(request: Request, body: s.MemoryPatch,
                  memory_id: str = MemoryId) -> dict[str, Any]:
    """Edit a memory's text (re-embedded and re-indexed), tier, scope, tags, importance,
    confidence or metadata; fields left out stay as they are."""
    changes = body.model_dump(exclude_unset=True, exclude={"user_id"})
    if not changes:
        raise InvalidInput("nothing to change: give text, tier, scope, tags, importance, "
                           "confidence or metadata")
    mem = engine_of(request).update(memory_id, user_of(request, body.user_id), **changes)
    return memory_json(mem)


@router.delete("/v1/memories/{memory_id}", tags=["memories"])
def delete_memory(request: Request, memory_id: str = MemoryId,
                  user_id: str | None = UserQuery) -> dict[str, Any]:
    """Delete a memory and every derived copy (vector, full-text row, entity links);
    the message it came from, with its replies, is pruned: kept for its owner, never
    recalled, searched or replayed again (``pruned`` lists them)."""
    gone = engine_of(request).forget_with_sources(memory_id, user_of(request, user_id))
    return {"deleted": memory_id, "pruned": pruned_json(gone.pruned)}


@router.get("/v1/memories/{memory_id}/forget-preview", tags=["memories"])
def preview_memory_forget(request: Request, memory_id: str = MemoryId,
                          user_id: str | None = UserQuery) -> dict[str, Any]:
    """What ``DELETE /v1/memories/{id}`` would remove, changing nothing: the memory,
    the facts it stated, the messages pruned (with the start of their text), the
    compaction summaries deleted and the session titles cleared."""
    return forget_preview_json(engine_of(request).forget_preview(
        memory_id, user_of(request, user_id)))


# -- search and context ---------------------------------------------------------------
@router.post("/v1/search", tags=["search"])
def search(request: Request, body: s.SearchRequest) -> dict[str, Any]:
    """Hybrid search (vector, keyword, entity, freshness, authority) over memories,
    summaries, facts and, with ``kinds: ["message"]``, stored messages. Without a
    workspace it spans all of the user's workspaces; with one, that workspace plus the
    user's global memories. Each hit carries its score breakdown."""
    f = body.filters or s.SearchFilters()
    hits: Sequence[Hit] = engine_of(request).search(
        body.query, user_of(request, body.user_id), k=body.k, kinds=body.kinds,
        workspace=workspace_of(request, body.workspace), tiers=f.tiers, tags=f.tags,
        session_id=f.session_id, include_inactive=f.include_inactive,
    )
    return {"hits": [h.to_dict() for h in hits]}


@router.post("/v1/context", tags=["search"])
def context(request: Request, body: s.ContextRequest) -> dict[str, Any]:
    """Compile a token-budgeted OpenAI message list for the next model call: the
    client's system messages, facts and retrieved memories, then as much recent history
    (the session's, then ``messages``) as fits. ``report`` says what went in and why."""
    ctx = engine_of(request).context(
        user_of(request, body.user_id), session_id=body.session_id,
        messages=None if body.messages is None else _messages(body.messages),
        workspace=workspace_of(request, body.workspace), query=body.query,
        context_window=body.context_window, max_response_tokens=body.max_response_tokens,
        tool_tokens=body.tool_tokens, model=body.model,
    )
    return {"messages": ctx.messages, "report": ctx.report.to_dict()}


# -- sessions and messages ------------------------------------------------------------
@router.post("/v1/sessions", status_code=201, tags=["sessions"])
def create_session(request: Request, body: s.SessionCreate) -> dict[str, Any]:
    """Start a session (a conversation whose messages memd stores and compiles)."""
    session = engine_of(request).create_session(
        user_of(request, body.user_id), workspace=workspace_of(request, body.workspace),
        model=body.model, context_window=body.context_window,
        max_response_tokens=body.max_response_tokens, system_prompt=body.system_prompt,
        metadata=body.metadata,
    )
    return session_json(session)


@router.get("/v1/sessions/{session_id}", tags=["sessions"])
def get_session(request: Request, session_id: str = SessionId,
                user_id: str | None = UserQuery) -> dict[str, Any]:
    """One session of the user (another user's session is a 404)."""
    return session_json(engine_of(request).session(session_id, user_of(request, user_id)))


@router.post("/v1/sessions/{session_id}/messages", status_code=201, tags=["sessions"])
def append_messages(request: Request, body: s.MessagesAppend,
                    session_id: str = SessionId) -> dict[str, Any]:
    """Append 1-1000 OpenAI messages to a session, atomically (all or none). Facts
    stated in user messages are extracted at once; embeddings and memories follow in
    background jobs."""
    stored = engine_of(request).append(
        session_id, user_of(request, body.user_id), _messages(body.messages)
    )
    return {"messages": [message_json(m) for m in stored]}


@router.get("/v1/sessions/{session_id}/messages", tags=["sessions"])
def list_messages(request: Request, session_id: str = SessionId,
                  user_id: str | None = UserQuery) -> dict[str, Any]:
    """A session's stored messages, oldest first."""
    found = engine_of(request).messages(session_id, user_of(request, user_id))
    return {"messages": [message_json(m) for m in found]}


@router.delete("/v1/sessions/{session_id}", tags=["sessions"])
def delete_session(request: Request, session_id: str = SessionId,
                   user_id: str | None = UserQuery) -> dict[str, Any]:
    """Erase a session: its messages, the session, and what derives from them (memories
    made in it or from its messages, facts its messages stated, its calls, usage and
    jobs); ``rows`` counts what went, by table (404 for another user's session)."""
    rows = engine_of(request).erase_session(user_of(request, user_id), session_id)
    return {"deleted": session_id, "rows": rows}


@router.delete("/v1/sessions/{session_id}/messages/{message_id}", tags=["sessions"])
def delete_message(request: Request, session_id: str = SessionId,
                   message_id: str = MessageId,
                   user_id: str | None = UserQuery) -> dict[str, Any]:
    """Erase one message of a session and what derives from it (memories made from it,
    facts it stated, its jobs); the session and its other messages stay. ``rows`` counts
    what went, by table (404 for a message not in the user's session)."""
    rows = engine_of(request).erase_message(user_of(request, user_id), session_id, message_id)
    return {"deleted": message_id, "rows": rows}


# -- facts ----------------------------------------------------------------------------
@router.get("/v1/facts", tags=["facts"])
def list_facts(
    request: Request, user_id: str | None = UserQuery, ws: str | None = WorkspaceQuery,
    include_history: bool = Query(False, description="Also superseded values."),
) -> dict[str, Any]:
    """The user's structured facts (one active value per category and key)."""
    found: Sequence[Fact] = engine_of(request).facts(
        user_of(request, user_id), workspace=workspace_of(request, ws),
        include_history=include_history,
    )
    return {"facts": [fact_json(f) for f in found]}


@router.put("/v1/facts", tags=["facts"])
def put_fact(request: Request, body: s.FactPut) -> dict[str, Any]:
    """Set a fact. A new value replaces the old one (``updated``, the old one kept as
    history in ``previous``) unless the stored value is more confident and this is not a
    correction (``rejected``, ``fact`` is the value that stays)."""
    result = engine_of(request).set_fact(
        user_of(request, body.user_id), body.category, body.key, body.value,
        workspace=workspace_of(request, body.workspace), confidence=body.confidence,
        importance=body.importance, is_correction=body.is_correction,
    )
    return fact_result_json(result)


def _fact_part(what: str) -> Any:
    return Path(description=f"The fact's {what} (case does not matter).",
                json_schema_extra={"pattern": v.TEXT_PATTERN, "maxLength": 64})


@router.delete("/v1/facts/{category}/{key}", tags=["facts"])
def delete_fact(request: Request, category: str = _fact_part("category"),
                key: str = _fact_part("key"),
                user_id: str | None = UserQuery,
                ws: str | None = WorkspaceQuery) -> dict[str, Any]:
    """Forget a fact: every value it had, and the memories that state it; with a
    workspace, only that workspace's (404 when the user has no such fact). The messages
    they came from, with their replies, are pruned (``pruned``: see DELETE
    /v1/memories/{id})."""
    gone = engine_of(request).forget_fact_with_sources(
        user_of(request, user_id), category, key, workspace=workspace_of(request, ws))
    return {"deleted": [fact_json(f) for f in gone.facts], "pruned": pruned_json(gone.pruned)}


@router.get("/v1/facts/{category}/{key}/forget-preview", tags=["facts"])
def preview_fact_forget(request: Request, category: str = _fact_part("category"),
                        key: str = _fact_part("key"),
                        user_id: str | None = UserQuery,
                        ws: str | None = WorkspaceQuery) -> dict[str, Any]:
    """What ``DELETE /v1/facts/{category}/{key}`` would remove, changing nothing (the
    shape of ``GET /v1/memories/{id}/forget-preview``)."""
    return forget_preview_json(engine_of(request).forget_fact_preview(
        user_of(request, user_id), category, key, workspace=workspace_of(request, ws)))



# -- calls (what the proxy did) -------------------------------------------------------
def instant(value: str | None, name: str) -> float | None:
    """A query's point in time as a unix time: seconds since the epoch, or an ISO 8601
    datetime (one without a UTC offset is UTC: the server's clock zone is not the
    caller's)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = datetime.fromisoformat(value.strip().upper())  # RFC 3339 allows "t", "z"
        except ValueError:
            raise InvalidInput(f"{name} must be a unix time in seconds or an ISO 8601 "
                               f"datetime, not {value!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    if not math.isfinite(seconds):
        raise InvalidInput(f"{name} must be a finite unix time, not {value!r}")
    return seconds


INSTANT_SCHEMA: dict[str, Any] = {"anyOf": [{"type": "number"},
                                      {"type": "string", "format": "date-time"}]}
# The time bounds of every listing that takes them (calls, usage), read by :func:`instant`.
SinceQuery = Query(None, description="Only what happened at or after this time: unix "
                                     "seconds or ISO 8601 (UTC unless it has an offset).",
                   json_schema_extra=INSTANT_SCHEMA)
UntilQuery = Query(None, description="Only what happened before this time, given as for "
                                     "since.",
                   json_schema_extra=INSTANT_SCHEMA)


@router.get("/v1/calls", tags=["calls"])
def list_calls(
    request: Request, user_id: str | None = UserQuery, ws: str | None = WorkspaceQuery,
    session: str | None = Query(None, description="Only this session's calls.",
                                json_schema_extra={"pattern": v.OPTIONAL_ID_PATTERN,
                                                   "maxLength": 128}),
    since: str | None = SinceQuery, until: str | None = UntilQuery,
    limit: int = Query(50, ge=1, le=500),
) -> dict[str, Any]:
    """The user's recent proxied chat calls, newest first, each with what memd injected
    and why (its ``report``, as ``GET /v1/calls/{id}`` shows it): agents do not show
    memd's response headers, so this is where a user sees what memd did."""
    calls = engine_of(request).calls(
        user_of(request, user_id), session_id=session, workspace=workspace_of(request, ws),
        since=instant(since, "since"), until=instant(until, "until"), limit=limit,
    )
    return {"object": "list", "data": calls}


@router.delete("/v1/calls/{call_id}", tags=["calls"])
def delete_call(request: Request, call_id: str = CallId,
                user_id: str | None = UserQuery) -> dict[str, Any]:
    """Delete a call's report (404 for an unknown call or another user's)."""
    engine_of(request).delete_call(user_of(request, user_id), call_id)
    return {"deleted": call_id}


# -- erasure --------------------------------------------------------------------------
@router.delete("/v1/users/{user_id}", tags=["users"])
def delete_user(request: Request, user_id: str = UserId) -> dict[str, Any]:
    """Erase a user: every row of theirs in every table, their account included, and the
    shared rows only their data used; on SQLite the files are scrubbed of it too. With
    authentication only the API key's own user (another is a 403); ``rows`` counts what
    went, by table (404 when the user has nothing)."""
    rows = engine_of(request).erase_user(user_of(request, user_id))
    return {"deleted": user_id, "rows": rows}


# -- jobs (the background queue) -------------------------------------------------------
JobId = Path(description="A job's id.",
             json_schema_extra={"pattern": v.ID_PATTERN, "maxLength": 128})



def _jobs_owner(request: Request, user_id: str | None) -> str | None:
    """Whose jobs a request sees: the key's user with authentication; in local mode,
    which trusts the caller, the user it names, else every job (the queue is the
    daemon's, and some jobs belong to no user)."""
    named = (user_id or request.headers.get("x-memd-user")
             or getattr(request.state, "memd_user", None))
    return user_of(request, user_id) if named else None


@router.get("/v1/jobs", tags=["jobs"])
def list_jobs(
    request: Request, user_id: str | None = UserQuery,
    state: Literal["pending", "dead"] = Query(
        "pending", description="pending: queued or running; dead: failed every attempt "
                               "and parked (retry them with POST /v1/jobs/{id}/retry)."),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    """The background jobs in a state, oldest first, each with its attempts and last
    error: a job that failed every attempt stays here, dead, until retried."""
    found = engine_of(request).jobs.listed(state, _jobs_owner(request, user_id), limit)
    return {"object": "list", "data": [job_json(q) for q in found]}


@router.post("/v1/jobs/{job_id}/retry", tags=["jobs"])
def retry_job(request: Request, job_id: str = JobId,
              user_id: str | None = UserQuery) -> dict[str, Any]:
    """Put a dead job back in the queue, due now with its attempts reset (404 for an
    unknown job or another user's, 409 for a job that is not dead)."""
    return job_json(engine_of(request).jobs.retry(job_id, _jobs_owner(request, user_id)))


@router.get("/v1/sweeps", tags=["jobs"])
def list_sweeps(request: Request,
                limit: int = Query(50, ge=1, le=100)) -> dict[str, Any]:
    """The scheduler's recent sweeps as this daemon ran them, newest first: the task,
    when it ran, the jobs it made (one per user for a fanned-out task) and how many are
    done, the seconds they took, what they changed (summed counts) and their errors.
    Kept in memory since the daemon started. With authentication the counts and error
    messages, which span every user, are left out (``failed`` still says how many)."""
    runs = [r.to_dict() for r in engine_of(request).jobs.schedule.runs.recent(limit)]
    if getattr(request.state, "memd_user", None) is not None:
        for run in runs:
            run["counts"], run["errors"] = {}, []
    return {"object": "list", "data": runs}


# -- embeddings -----------------------------------------------------------------------
def _embedding_texts(raw: str | list[Any], max_chars: int) -> list[str]:
    texts = [raw] if isinstance(raw, str) else raw
    if not texts:
        raise InvalidInput("input is empty")
    if len(texts) > MAX_EMBEDDING_INPUTS:
        raise InvalidInput(f"input has {len(texts)} items (limit {MAX_EMBEDDING_INPUTS})")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidInput(f"input[{i}] must be a string, not {type(t).__name__} "
                               "(token arrays are not supported)")
        if not t.strip():
            raise InvalidInput(f"input[{i}] is empty")
        if len(t) > max_chars:
            raise InvalidInput(f"input[{i}] is too long: {len(t)} characters "
                               f"(limit {max_chars})")
    # a lone surrogate has no UTF-8 form for a tokenizer to read
    return [v.clean_chars(t) for t in texts]


def _encode(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    out: list[float] = vector.astype(np.float64).tolist()
    return out


@router.post("/v1/embeddings", tags=["embeddings"])
def embeddings(request: Request, body: s.EmbeddingsRequest) -> dict[str, Any]:
    """OpenAI-compatible embeddings from the daemon's local embedder (whatever ``model``
    names). ``base64`` encodes each vector as little-endian float32 bytes."""
    engine = engine_of(request)
    texts = _embedding_texts(body.input, engine.settings.max_text_chars)
    if body.dimensions is not None and body.dimensions != engine.embedder.dim:
        raise InvalidInput(f"dimensions must be {engine.embedder.dim} for "
                           f"{engine.embedder.name}, not {body.dimensions}")
    vectors = engine.embedder.embed(texts)
    tokens = sum(count_text(t) for t in texts)
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i,
                  "embedding": _encode(vec, body.encoding_format)}
                 for i, vec in enumerate(vectors)],
        "model": engine.embedder.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
