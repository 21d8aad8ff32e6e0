"""The routes the inspector reads beside the native API: sessions a page at a time,
usage summed per day, model, client or workspace, and the switch that pauses learning.

Thin shells as in :mod:`memd.server.api`: the acting user and workspace are resolved the
same way (with authentication, the API key's own user), the engine checks meaning and
raises ``InvalidInput`` (400)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request

from memd.engine import validate as v
from memd.engine.conversation.overview import CURSOR_PATTERN, MAX_PAGE, sessions_page, usage_summary
from memd.engine.learning.pause import pause_state, set_paused
from memd.server import schemas as s
from memd.server.api import SinceQuery, UntilQuery, UserQuery, WorkspaceQuery, instant
from memd.server.deps import engine_of, user_of, workspace_of

router = APIRouter(responses=s.ERRORS)


@router.get("/v1/sessions", tags=["sessions"])
def list_sessions(
    request: Request, user_id: str | None = UserQuery, ws: str | None = WorkspaceQuery,
    client: str | None = Query(None, description="Only sessions of this client family "
                                                 "(as a listing's `client` names it).",
                               json_schema_extra={"pattern": v.TEXT_PATTERN,
                                                  "maxLength": 64}),
    limit: int = Query(50, ge=1, le=MAX_PAGE),
    cursor: str | None = Query(None, description="The `next_cursor` of the previous page.",
                               json_schema_extra={"pattern": CURSOR_PATTERN}),
) -> dict[str, Any]:
    """The user's sessions, newest first, a page at a time: each with its title, client,
    workspace, dates and message count; ``next_cursor`` (null on the last page) fetches
    the next page. A cursor not given by a listing is a 400."""
    return sessions_page(engine_of(request).store, user_of(request, user_id), limit=limit,
                         cursor=cursor, workspace=workspace_of(request, ws), client=client)


@router.get("/v1/usage", tags=["usage"])
def usage(
    request: Request, user_id: str | None = UserQuery,
    group_by: Literal["day", "model", "client", "workspace"] = Query(
        "day", description="Sum per UTC day, model, client family or workspace."),
    since: str | None = SinceQuery, until: str | None = UntilQuery,
) -> dict[str, Any]:
    """Tokens, calls and cost (US dollars at the configured prices) of the user's proxied
    calls, per group and in total, from the usage memd records for every call."""
    return usage_summary(engine_of(request).store, user_of(request, user_id), group_by,
                         since=instant(since, "since"), until=instant(until, "until"))


@router.get("/v1/pause", tags=["pause"])
def get_pause(request: Request, user_id: str | None = UserQuery,
              ws: str | None = WorkspaceQuery) -> dict[str, Any]:
    """Whether learning is paused for the user (everywhere, and per workspace), and
    ``paused``: whether a call in the given workspace learns nothing now."""
    return pause_state(engine_of(request).store, user_of(request, user_id),
                       workspace_of(request, ws))


@router.post("/v1/pause", tags=["pause"])
def pause(request: Request, body: s.PauseRequest) -> dict[str, Any]:
    """Pause learning for the user, or in one workspace: calls are still forwarded with
    their memory block, but nothing of them is stored or extracted until resumed.
    Persistent (it outlasts a restart); ``changed`` is false when it was paused already."""
    engine = engine_of(request)
    return set_paused(engine.store, user_of(request, body.user_id),
                      workspace_of(request, body.workspace), True, engine.now())


@router.post("/v1/resume", tags=["pause"])
def resume(request: Request, body: s.PauseRequest) -> dict[str, Any]:
    """Resume learning paused by POST /v1/pause (the same user and workspace): a
    workspace's resume leaves a user-wide pause in place (``paused`` says so)."""
    engine = engine_of(request)
    return set_paused(engine.store, user_of(request, body.user_id),
                      workspace_of(request, body.workspace), False, engine.now())
