"""A tool-loop step's writes, stored with its answer.

An agent's tool loop sends the same conversation again and again with a tool call and
its result added, and no new words of the user: memd retrieves nothing for such a step
and forwards the blocks it sent before. What it still has to do is store the step's new
messages and the call's record, and that is most of the store's work on the step. None
of it changes what goes upstream, so it waits for the call's
:func:`~memd.engine.conversation.chat.finish_chat`, which the server runs once the
client has a whole answer (memd.server.later): the step then costs the agent only what
memd reads to forward it.

Until then the step's messages are not in the store. A request of the same
conversation that comes meanwhile (a client's retry) stores them itself; the step's
writes then find the session moved on and store only the call's record, and its reply
is not stored twice. Should memd stop before, the client sends the messages again with
its next step, which stores them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class StepWrites:
    """The step's writes (``write`` returns the session's turn count after them, None
    when it found the session moved on), run at most once; ``record`` keeps the call's
    record alone when they fail."""

    def __init__(self, write: Callable[[], int | None], record: Callable[[], None],
                 call_id: str) -> None:
        self._write: Callable[[], int | None] | None = write
        self._record = record
        self._lock = threading.Lock()
        self.call_id = call_id
        self.turn: int | None = None  # the session's turn count once written, if it was
        self.failed = False

    def run(self) -> None:
        """Store the step, unless done already (a second caller waits for the first).
        A failure is logged, not raised: the request went upstream as the client sent
        it, and the client sends these messages again with its next step."""
        with self._lock:
            write, self._write = self._write, None
            if write is None:
                return
            try:
                self.turn = write()
            except Exception:
                self.failed = True
                log.exception("call %s: storing the step's messages failed; they are "
                              "stored when the client sends them again", self.call_id)
                try:
                    self._record()
                except Exception:
                    log.exception("call %s: its record could not be stored", self.call_id)

    @property
    def pending(self) -> bool:
        return self._write is not None
