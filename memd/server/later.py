"""The store's writes of a proxied call that need not hold up its answer.

What an answer leaves to store changes nothing of what the client gets: the reply with
its usage and, for a tool-loop step, the step's new messages and call record
(memd.engine.conversation.step). They are stored once the client has the whole answer,
streamed or not (:func:`answer_then_store`), so that an agent's step waits only for what
memd must do before forwarding, and for the model.

What a later request reads must not miss them. The client's next turn resends this
answer, and a read of its call or session may follow at once; so a request waits for
the writes under way when it starts: a chat door for those of its own user
(:meth:`Later.settled` with the user, before it resolves the session), every other route
for all of them (memd.server.app's Guard). Only writes already started are awaited,
never the ones that start meanwhile, so a busy team's server never waits without end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from memd.server.threads import in_thread

if TYPE_CHECKING:
    from memd.engine.conversation.chat import PreparedCall

log = logging.getLogger(__name__)

# The chat doors' paths (also under /w/{workspace}): they wait for their own user's
# writes only, the other routes for everyone's (memd.server.app's Guard).
DOOR_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages",
                        "/v1/responses", "/api/chat", "/api/generate"})


def is_door(method: str, path: str) -> bool:
    """Whether a request is a chat door's call."""
    if method != "POST":
        return False
    if path.startswith("/w/"):
        path = "/" + path.split("/", 3)[-1]
    return path in DOOR_PATHS


class Later:
    """The writes under way, per user."""

    def __init__(self) -> None:
        self._open: dict[str, set[asyncio.Future[Any]]] = {}

    def hold(self, user_id: str) -> asyncio.Future[None]:
        """A write about to start for ``user_id``: :meth:`release` it when done."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._track(user_id, done)
        return done

    @staticmethod
    def release(done: asyncio.Future[None]) -> None:
        if not done.done():
            done.set_result(None)

    @property
    def idle(self) -> bool:
        """No write under way (read from any thread: a benchmark waits for it)."""
        return not self._open

    async def settled(self, user_id: str | None = None) -> None:
        """Wait for the writes under way now: ``user_id``'s, or everyone's."""
        if user_id is None:
            waits = [f for open_ in self._open.values() for f in open_]
        else:
            waits = list(self._open.get(user_id, ()))
        if waits:
            await asyncio.wait(waits)

    def _track(self, user_id: str, future: asyncio.Future[Any]) -> None:
        open_ = self._open.setdefault(user_id, set())
        open_.add(future)

        def untrack(f: asyncio.Future[Any]) -> None:
            open_.discard(f)
            if not open_ and self._open.get(user_id) is open_:
                del self._open[user_id]

        future.add_done_callback(untrack)


class _ThenStore(Response):
    """An answer whose call is stored once the client has all of it."""

    later: Later
    user_id: str
    store: Callable[[], None]
    call_id: str

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # held before the first byte goes out: the client's next request, which can only
        # follow the answer, finds the write under way
        done = self.later.hold(self.user_id)
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):  # a client gone keeps its answer
                    await in_thread(self.store)
            except Exception:
                log.exception("call %s: storing the answer failed", self.call_id)
            finally:
                self.later.release(done)


class _StreamThenStore(_ThenStore, StreamingResponse):
    """A streamed answer whose call is stored once its last chunk is sent, or once the
    client has gone (what arrived is kept)."""


def answer_then_store(later: Later, call: PreparedCall, store: Callable[[], None],
                      **response: Any) -> Response:
    """The answer (a :class:`~starlette.responses.Response` of ``response``, or a
    :class:`~starlette.responses.StreamingResponse` when its content is an async
    iterator), with ``store`` run in a thread once it is sent."""
    streamed = isinstance(response.get("content"), AsyncIterator)
    answer = (_StreamThenStore if streamed else _ThenStore)(**response)
    answer.later, answer.user_id, answer.store, answer.call_id = (
        later, call.user_id, store, call.call_id)
    return answer
