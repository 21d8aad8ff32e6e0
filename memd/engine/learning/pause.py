"""Pausing learning: while the user (or one workspace of theirs) is paused, memd goes
on forwarding calls with their memory block, but stores nothing of them (no session,
message, reply, memory or fact) and extracts nothing. The switch lives in the store, so
it outlasts a restart and every daemon of a team database sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memd.engine import validate as v

if TYPE_CHECKING:
    from memd.backends.base import Store

#: The workspace key of a pause that covers all of the user's workspaces.
EVERYWHERE = ""


def is_paused(store: Store, user_id: str, workspace: str | None) -> bool:
    """Whether learning is paused for a call of ``user_id`` in ``workspace``."""
    paused = store.pauses(user_id)
    return bool(paused) and (EVERYWHERE in paused or (workspace or EVERYWHERE) in paused)


def set_paused(store: Store, user_id: str, workspace: str | None, paused: bool,
               now: float) -> dict[str, Any]:
    """Pause (``paused``) or resume learning for the user, or for one workspace; the
    state after, as :func:`pause_state` shows it, with whether this changed it."""
    uid = v.check_id(user_id, "user_id")
    ws = v.check_optional_id(workspace, "workspace") or EVERYWHERE
    changed = store.set_paused(uid, ws, paused, now)
    return {**pause_state(store, uid, workspace), "changed": changed}


def pause_state(store: Store, user_id: str, workspace: str | None = None) -> dict[str, Any]:
    """Where learning is paused for the user: ``everywhere`` (a user-wide pause), the
    paused ``workspaces``, and ``paused``: whether a call in ``workspace`` (none given:
    outside any workspace) learns nothing now."""
    uid = v.check_id(user_id, "user_id")
    ws = v.check_optional_id(workspace, "workspace")
    paused = store.pauses(uid)
    return {"user_id": uid, "workspace": ws,
            "paused": EVERYWHERE in paused or (ws or EVERYWHERE) in paused,
            "everywhere": EVERYWHERE in paused,
            "workspaces": [{"workspace": w, "paused_at": at}
                           for w, at in sorted(paused.items()) if w != EVERYWHERE]}
