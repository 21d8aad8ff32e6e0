"""The recent history a compile reads, and the per-process cache that spares most reads.

A compile needs a session's newest active messages back to the first one that crosses
``reach`` tokens (older ones could never fit the window), plus the rest of a tool block
cut there (:func:`recent_history`). On PostgreSQL that read is the compile's costliest
statement after the memory candidates, so it is worth not repeating.

:class:`HistoryCache` keeps what was read, under the session's history state: its
``turn_count`` (every append raises it) and its ``history_version`` (every other change
to its stored messages raises it, e.g. a compression). The session row is read anyway at
the start of every compile, so checking costs nothing:

- the same state: the kept messages are the stored history (no read);
- a higher turn_count alone: turns were only appended, by this process or another one;
  only those turns are read, and the kept list is trimmed to ``reach`` again (the
  proxy's case: each call appends the user's message, then compiles);
- anything else (a compression, a different reach, a kept list that cannot be trimmed
  from what it holds): the history is read in full, as without the cache.

Only reads outside a transaction are kept, so no kept list holds a write that may still
be rolled back. The cache is bounded by messages, least recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memd.types import Message, Session

if TYPE_CHECKING:
    from memd.backends.base import MessageStore, Store

HISTORY_SCAN = 512  # newest messages the first history query looks at


def recent_history(store: MessageStore, user_id: str, session: Session,
                   reach: int) -> list[Message]:
    """The newest active messages back to the first one that crosses ``reach`` tokens,
    the most history the compile could keep (older ones could never fit), oldest first:
    usually one query."""
    out: list[Message] = []
    budget = reach
    before: int | None = None
    limit = HISTORY_SCAN
    while True:
        page = store.recent_messages(user_id, session.id, budget, before_turn=before,
                                     limit=limit)
        out.extend(page)
        used = sum(max(0, m.token_count) for m in page)
        if len(page) < limit or used > budget:
            break
        budget -= used
        before = page[-1].turn_index
        limit *= 4
    # The oldest one may be a tool result whose call is older still: complete its block,
    # so that the compiler sees a block that does not fit (and reports the cut) rather
    # than an orphan it would silently leave out.
    while out and out[-1].role == "tool":
        older = store.get_messages(user_id, session.id, active_only=True, newest_first=True,
                                   limit=16, before_turn=out[-1].turn_index)
        if not older:
            break
        for msg in older:
            out.append(msg)
            if msg.role != "tool":
                break
    return out[::-1]


def trim(oldest_first: Sequence[Message], reach: int) -> list[Message] | None:
    """What :func:`recent_history` would read for ``reach`` from a session whose active
    messages, as far back as needed, are ``oldest_first``; None when the tool block cut
    at the reach goes back further than they do."""
    i, newer = len(oldest_first), 0
    while i > 0 and newer <= reach:  # keep a message while the newer ones fit the reach
        i -= 1
        newer += max(0, oldest_first[i].token_count)
    while i < len(oldest_first) and oldest_first[i].role == "tool":
        if i == 0:
            return None
        i -= 1
    return list(oldest_first[i:])


@dataclass(frozen=True, slots=True)
class _Kept:
    turns: int  # the session's turn_count when read
    version: int  # its history_version
    reach: int  # the longest reach asked for: a shorter one is served by trimming
    messages: tuple[Message, ...]  # recent_history's answer, oldest first


class HistoryCache:
    """Recent histories by (user, session), checked against the session's history
    state; at most ``max_messages`` messages in all (0 turns the cache off)."""

    def __init__(self, max_messages: int) -> None:
        self.max_messages = max_messages
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = self.extended = self.misses = 0  # for tests and benchmarks

    def holds(self, user_id: str, session: Session, reach: int) -> bool:
        """Whether :meth:`read` would answer from what is kept without reading the store
        (the session unchanged since, ``reach`` within the kept one's)."""
        with self._lock:
            kept = self._kept.get((user_id, session.id))
        return (kept is not None and kept.version == session.history_version
                and reach <= kept.reach and kept.turns == session.turn_count)

    def read(self, store: Store, user_id: str, session: Session, reach: int
             ) -> list[Message]:
        """``recent_history(store, user_id, session, reach)``, from what is kept when the
        session's state allows (see the module docstring)."""
        if self.max_messages <= 0 or store.in_transaction():
            return recent_history(store, user_id, session, reach)
        key = (user_id, session.id)
        with self._lock:
            kept = self._kept.get(key)
        current = False  # whether what is kept now is the session's stored history
        if (kept is not None and kept.version == session.history_version
                and reach <= kept.reach):
            messages: Sequence[Message] | None = kept.messages
            if kept.turns == session.turn_count:
                with self._lock:
                    if key in self._kept:
                        self._kept.move_to_end(key)
            else:
                messages = self._extend(store, user_id, session, kept)
                if messages is not None:
                    self._keep(key, _Kept(session.turn_count, session.history_version,
                                          kept.reach, tuple(messages)))
            current = messages is not None
            # A shorter reach than the kept one's is a trim of it.
            out = (None if messages is None else
                   list(messages) if reach == kept.reach else trim(messages, reach))
            if out is not None:
                if kept.turns == session.turn_count:
                    self.hits += 1
                else:
                    self.extended += 1
                return out
        self.misses += 1
        read = recent_history(store, user_id, session, reach)
        if not current:  # else what is kept serves longer reaches than this one
            self._keep(key, _Kept(session.turn_count, session.history_version, reach,
                                  tuple(read)))
        return read

    @staticmethod
    def _extend(store: MessageStore, user_id: str, session: Session, kept: _Kept
                ) -> list[Message] | None:
        """``kept`` with the turns appended since it was read (kept.turns + 1 to the
        session's turn_count), trimmed to its reach; None when that cannot be told from
        what is kept and read (then the caller reads the history in full)."""
        if kept.turns > session.turn_count:
            return None
        newest = kept.messages[-1].turn_index if kept.messages else kept.turns
        if newest > session.turn_count:
            return None
        # A turn compressed since the session row was read is missing here: then the
        # session's history_version has moved on, and the next compile reads in full.
        added = store.get_messages(user_id, session.id, active_only=True,
                                   after_turn=max(kept.turns, newest),
                                   before_turn=session.turn_count + 1)
        return trim([*kept.messages, *added], kept.reach)

    def _keep(self, key: tuple[str, str], kept: _Kept) -> None:
        if len(kept.messages) > self.max_messages:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._size -= len(old.messages)
            self._kept[key] = kept
            self._size += len(kept.messages)
            while self._size > self.max_messages:
                _, dropped = self._kept.popitem(last=False)
                self._size -= len(dropped.messages)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._size = 0
