"""``GET /v1/status``: what a running daemon serves, for ``memd status`` and ``memd doctor``.

The CLI's own settings may name another store or upstream than the daemon was started
with (flags of ``memd serve``, its environment, a config file edited since), so the
daemon is asked rather than guessed. Nothing secret is told: the store is its file, or its
database and server without user or password; the upstream is its URL without
credentials. Under authentication the route needs a key, as every route but ``/health``,
and leaves out how many users the store holds.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

import memd
from memd.privacy.urls import redact_url
from memd.server import schemas as s
from memd.server.deps import engine_of
from memd.server.discovery import store_place

router = APIRouter(responses=s.ERRORS)


@router.get("/v1/status", tags=["status"])
def daemon_status(request: Request) -> dict[str, Any]:
    """The daemon's store (``backend``: SQLite or PostgreSQL; ``place``: its file, or its
    database and server; ``schema``), upstream (its URL without credentials, ``local``
    for the bundled model, or null), embedder, auth mode and pending jobs."""
    from memd.server.local_upstream import LocalUpstreamTransport

    engine = engine_of(request)
    live = request.app.state.settings  # the upstream follows the config file
    place = store_place(engine.settings)
    if isinstance(request.app.state.upstream_transport, LocalUpstreamTransport):
        upstream: str | None = "local"
    else:
        upstream = redact_url(live.upstream_url) if live.upstream_url else None
    out: dict[str, Any] = {
        "version": memd.__version__, "auth": bool(live.auth),
        "store": {"backend": place.backend, "place": place.shown,
                  "schema": engine.store.schema_version()},
        "upstream": upstream, "embedder": engine.embedder.name,
        "pending_jobs": engine.pending_jobs(),
    }
    if not live.auth:
        out["users"] = len(engine.store.memory_users())
    return out
