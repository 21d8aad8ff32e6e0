"""Who sends a proxied chat call, and how they want memd to treat it: the request's
headers read once, checked and typed, for every door. The body is each door's own
(its format's fields) and goes upstream as sent."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from memd.engine import virtual
from memd.engine.conversation import side
from memd.engine.conversation.identity import client_family
from memd.engine.conversation.resolve import conversation_of
from memd.server.deps import user_of, workspace_of

SESSION_HEADER = "x-memd-session"


@dataclass(frozen=True, slots=True)
class Caller:
    """``user`` and ``workspace`` as the key or the path names them; ``session`` the
    session an ``X-Memd-Session`` header pins (no inference); ``memory`` the
    ``X-Memd-Memory`` flag ("on", "off" or "" when not sent) and ``memory_header`` the
    header as sent (side-request detection reads it); ``virtualize`` the
    ``X-Memd-Virtualize`` mode, if any; ``agent`` the User-Agent and ``client`` its
    family; ``conversation`` the name a client gives its conversation in a header."""

    user: str
    workspace: str | None
    session: str | None
    memory: str
    memory_header: str | None
    virtualize: str | None
    agent: str | None
    client: str
    conversation: str | None

    @classmethod
    def read(cls, request: Request) -> Caller:
        """The caller of ``request``; InvalidInput (a 400) for a header memd refuses."""
        headers = request.headers
        agent = headers.get("user-agent")
        memory_header = headers.get(side.HEADER)
        return cls(
            user=user_of(request), workspace=workspace_of(request),
            session=headers.get(SESSION_HEADER) or None,
            memory=side.memory_flag(memory_header), memory_header=memory_header,
            virtualize=virtual.header_mode(headers.get(virtual.HEADER)),
            agent=agent, client=client_family(agent) or "",
            conversation=conversation_of(headers))
