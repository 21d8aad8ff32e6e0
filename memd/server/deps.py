"""Request context shared by the routers: the engine, the acting user, the workspace.

Local mode (the default) trusts the caller: the user is the body's ``user_id``, else the
``X-Memd-User`` header, else the configured default user. In authenticated mode the user
is the API key's (:mod:`memd.server.security`); naming anyone else is a 403. The
workspace is the ``/w/{workspace}`` path prefix, else the body's ``workspace``.
"""

from __future__ import annotations

from fastapi import Request

from memd.engine import validate as v
from memd.engine.memory import Memd
from memd.errors import Forbidden, InvalidInput
from memd.server.later import Later


def engine_of(request: Request) -> Memd:
    engine: Memd = request.app.state.engine
    return engine


def later_of(request: Request) -> Later:
    """The writes that wait for the answers of calls (memd.server.later)."""
    later: Later = request.app.state.later
    return later


def user_of(request: Request, body_user: str | None = None) -> str:
    header = request.headers.get("x-memd-user")
    authed: str | None = getattr(request.state, "memd_user", None)
    if authed is not None:
        for named in (body_user, header):
            if named is not None and named != authed:
                raise Forbidden(f"this API key acts as {authed!r}; it cannot act as "
                                f"{named!r}")
        return authed
    chosen = body_user or header or engine_of(request).settings.default_user
    if body_user and header and body_user != header:
        raise InvalidInput("user_id in the body and the X-Memd-User header disagree")
    return v.check_id(chosen, "user_id")


def workspace_of(request: Request, body_workspace: str | None = None) -> str | None:
    path_ws = request.path_params.get("workspace")
    body_workspace = body_workspace or None  # an empty workspace is none
    if path_ws is not None and body_workspace is not None and path_ws != body_workspace:
        raise InvalidInput("workspace in the path and in the body disagree")
    return v.check_optional_id(path_ws if path_ws is not None else body_workspace,
                               "workspace")
