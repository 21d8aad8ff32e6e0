"""What the inspector lists of a user's history: sessions a page at a time, and token
usage summed per day, model, client or workspace. Read-only, and shaped as the HTTP API,
the CLI and the web UI show it alike."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memd.engine import validate as v
from memd.engine.conversation.identity import client_of
from memd.errors import InvalidInput
from memd.types import Session, UsageTotal

if TYPE_CHECKING:
    from memd.backends.base import Store

MAX_PAGE = 500
#: A listing's cursor: a non-negative unix time, "~", a session id.
CURSOR_PATTERN = (r"^[0-9]{1,20}(\.[0-9]{1,20})?(e[-+]?[0-9]{1,2})?"
                  r"~[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}(?!\n)$")
CURSOR = re.compile(CURSOR_PATTERN)
USAGE_GROUPS = ("day", "model", "client", "workspace")


def encode_cursor(session: Session) -> str:
    """The cursor of the page after ``session``: its creation time (exactly, as Python
    spells the float) and id, joined by ``~`` (which no id holds)."""
    return f"{session.created_at!r}~{session.id}"


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (created_at, id) a cursor names; InvalidInput for one of another shape (a
    truncated or edited cursor must not silently restart the listing)."""
    if not CURSOR.fullmatch(cursor):
        raise InvalidInput(f"cursor {cursor[:64]!r} is not one a session listing gave "
                           "(pass next_cursor as it came)")
    when, _, sid = cursor.partition("~")
    return float(when), sid


def session_row(s: Session) -> dict[str, Any]:
    """A session as a listing shows it (the whole session: GET /v1/sessions/{id})."""
    return {"id": s.id, "title": s.title, "client": client_of(s.metadata),
            "workspace": s.workspace, "model": s.model, "status": s.status.name.lower(),
            "created_at": s.created_at, "last_active_at": s.updated_at,
            "message_count": s.turn_count}


def sessions_page(store: Store, user_id: str, *, limit: int = 50, cursor: str | None = None,
                  workspace: str | None = None, client: str | None = None) -> dict[str, Any]:
    """One page of the user's sessions, newest first, and the cursor of the next page
    (None on the last one); ``workspace`` "" lists the sessions of no workspace."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_PAGE}, not {limit!r}")
    after = None if cursor is None else decode_cursor(cursor)
    if workspace:
        workspace = v.check_id(workspace, "workspace")
    if client is not None:
        client = v.clean_chars(client)
    found = store.list_sessions(v.check_id(user_id, "user_id"), limit + 1, after=after,
                                workspace=workspace, client=client)
    page = found[:limit]
    more = len(found) > limit
    return {"object": "list", "data": [session_row(s) for s in page],
            "next_cursor": encode_cursor(page[-1]) if more else None}


def usage_summary(store: Store, user_id: str, group_by: str = "day", *,
                  since: float | None = None, until: float | None = None) -> dict[str, Any]:
    """The user's recorded usage (tokens, cost, calls) per ``group_by``, with the total;
    a day is a UTC date (YYYY-MM-DD), a cost is in US dollars at the configured prices."""
    if group_by not in USAGE_GROUPS:
        raise InvalidInput(f"group_by must be one of {', '.join(USAGE_GROUPS)}, "
                           f"not {group_by!r}")
    rows = store.usage_totals(v.check_id(user_id, "user_id"), group_by, since=since,
                              until=until)
    data = [_usage_json(r, _usage_key(r.key, group_by)) for r in rows]
    total = UsageTotal(None, sum(r.calls for r in rows), sum(r.prompt_tokens for r in rows),
                       sum(r.completion_tokens for r in rows),
                       sum(r.cost_microcents for r in rows))
    return {"object": "usage", "group_by": group_by, "since": since, "until": until,
            "data": data, "total": _usage_json(total, None)}


def _usage_key(key: str | int | None, group_by: str) -> str | None:
    if group_by == "day" and isinstance(key, int):
        return datetime.fromtimestamp(key * 86400, UTC).date().isoformat()
    if group_by == "workspace" and key == "":
        return None  # usage outside any workspace
    return None if key is None else str(key)


def _usage_json(r: UsageTotal, key: str | None) -> dict[str, Any]:
    return {"key": key, "calls": r.calls, "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens,
            "cost_usd": r.cost_microcents / 1e8}
