"""A step's own writes, made while its request is upstream.

An agent's tool-loop step that asks nothing new (its query is the one of the request it
resends) retrieves nothing, and when virtualization leaves its request alone what goes
upstream is the client's messages with the blocks already settled for the session: the
step's new messages (a tool result, the model's reply that asked for it) change nothing
that is sent. Storing them (redaction, counting, inserts and full-text rows) is most of
what memd does on such a step, so :func:`memd.engine.conversation.chat.prepare_chat`
may leave that append, with the call's record, to :class:`Deferred`: the caller starts
it in a store thread as it sends the request, and storing the reply joins it first, so
the reply is stored after the messages it answers and the client, answered only then,
finds them on its next request.

A deferred append that fails loses nothing: the call still answers, the failure is
logged, the reply is not stored (it would follow a gap), and the client's next request,
which resends these messages, stores them then. One that finds the session moved on
since it was read (another call of the session stored first) stores nothing, as a retry
would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from memd.engine.conversation.resend import Known
from memd.engine.conversation.sessions import MAX_MESSAGES_PER_CALL
from memd.engine.conversation.turns import checked_message
from memd.engine.virtual.call import engages_for
from memd.errors import InvalidInput
from memd.types import Session, WindowInfo

if TYPE_CHECKING:
    from memd.engine.memory import Memd

log = logging.getLogger("memd.overlap")

Write = Callable[[], Session | None]


class Deferred:
    """The step's append and call record: run by :meth:`start` in a thread the caller
    gives, or by :meth:`join` itself when nobody started it. Joined, it gives the
    session as stored after the append, or None when the append did not happen."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._future: Future[Session | None] | None = None

    def start(self, submit: Callable[[Write], Future[Session | None]]) -> None:
        if self._future is None:
            self._future = submit(self._write)

    def join(self) -> Session | None:
        if self._future is None:
            self._future = Future()
            self._future.set_result(self._write())
        return self._future.result()


def may_defer(engine: Memd, new: Sequence[Mapping[str, Any]], client_owns: bool,
              asks_new: bool, workspace: str | None, counted: int, window: WindowInfo,
              max_response_tokens: int | None, virtualize: str | None) -> bool:
    """Whether a step's append may run beside its forward: a client that sends its
    history, a step with messages to store and no new query (nothing is retrieved for
    it), a request virtualization leaves alone. The new messages are checked here, so
    that bad input is refused before anything goes upstream, as without the overlap."""
    if not (new and client_owns and not asks_new) or engages_for(
            engine.settings, workspace, counted, window, max_response_tokens, virtualize):
        return False
    if len(new) > MAX_MESSAGES_PER_CALL:
        raise InvalidInput(f"messages must be a list of 1-{MAX_MESSAGES_PER_CALL} messages")
    for m in new:
        checked_message(m, engine.settings.max_message_chars)
    return True


def deferred_append(engine: Memd, session: Session, new: list[dict[str, Any]],
                    known: Known | None, call_id: str, model: str | None,
                    report: dict[str, Any]) -> Deferred:
    """The append of ``new`` to ``session`` (as read when the step was resolved) and the
    call's record, in one transaction, as :func:`prepare_chat` would have made them."""
    uid, sid = session.user_id, session.id

    def write() -> Session | None:
        try:
            with engine.store.transaction():
                current = engine.store.get_session(uid, sid)
                moved = current is None or current.turn_count != session.turn_count
                if not moved:
                    engine.append(sid, uid, new, session=session, known=known)
                engine.store.record_call(call_id, uid, sid, session.workspace, model,
                                         engine.now(), report)
                return None if moved else engine.session(sid, uid)
        except Exception:
            log.exception("call %s: storing the step's messages failed; the client's "
                          "next request stores them", call_id)
        try:  # the call still shows in the calls' record
            engine.store.record_call(call_id, uid, sid, session.workspace, model,
                                     engine.now(), report)
        except Exception:
            log.exception("call %s: its record could not be stored", call_id)
        return None

    return Deferred(write)
