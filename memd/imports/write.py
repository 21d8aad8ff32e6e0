"""Storing imported conversations under the rules of live traffic.

Every conversation becomes a session of its own, whose id is derived from (user,
source, conversation key): a second import of the same file finds the session and
appends only the turns it has not stored, so re-importing adds nothing and a grown file
adds its new turns. The session's metadata keeps how many of the conversation's turns
were read and, for a format that names its records (:attr:`Turn.line`), the last record
read from each file (:attr:`Conversation.part`): the new turns are those after that
record when the file holds it, which is how a file that repeats another's records
before its own (a resumed Claude Code session, keyed as the conversation it resumed)
adds only what follows them.

Turns go through :meth:`memd.engine.memory.Memd.append`, the path of a live turn: the
sanitizer first, the client's own text (its tags, its prompt lines, tool output, text
recurring across sessions) kept out of what is extracted, extraction and the helper's
jobs as for a proxied chat. A turn that opens with a client's side prompt (a title or
summary request) is skipped with the replies that follow it.

Original times are kept: while a turn is stored the engine's clock reads the turn's
time (:class:`FollowClock`, on the importing thread only), so sessions, messages,
facts and jobs carry the time of the conversation, and recency and retention mean what
they mean for live traffic.

:func:`import_conversations` takes a batch of conversations; every caller (the CLI, the
HTTP route) goes through it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memd.engine.background.jobs import embedded_texts, message_texts
from memd.engine.conversation.sessions import MAX_MESSAGES_PER_CALL
from memd.engine.conversation.side import side_reason
from memd.imports.model import Conversation, Turn
from memd.types import Message, Session

if TYPE_CHECKING:
    from memd.engine.memory import Memd

META = "import"  # the session metadata key of an imported conversation
Progress = Callable[[int], None]
# New turns written (in one transaction) before their jobs run: one embedding pass.
BATCH_TURNS = 256


class FollowClock:
    """The engine's clock, reading a set time on a thread that imports history and the
    real time everywhere else (a daemon serves live calls beside an import)."""

    def __init__(self, real: Callable[[], float]) -> None:
        self.real = real
        self._local = threading.local()

    def __call__(self) -> float:
        at: float | None = getattr(self._local, "at", None)
        return self.real() if at is None else at

    @contextmanager
    def at(self, when: float | None) -> Iterator[None]:
        """Read ``when`` on this thread within the block (the real time for None)."""
        before = getattr(self._local, "at", None)
        self._local.at = when
        try:
            yield
        finally:
            self._local.at = before


def follow_clock(engine: Memd) -> FollowClock:
    """The engine's clock as a :class:`FollowClock`, installed on first use."""
    if not isinstance(engine.clock, FollowClock):
        engine.clock = FollowClock(engine.clock)
    return engine.clock


@dataclass
class ImportCounts:
    """What an import did (or, dry, would do)."""

    conversations: int = 0  # read
    sessions: int = 0  # created
    turns: int = 0  # new turns read
    messages: int = 0  # stored
    skipped: int = 0  # new turns not stored: side requests, empty turns
    by_workspace: dict[tuple[str, str | None], list[int]] = field(default_factory=dict)

    def add(self, other: ImportCounts) -> None:
        for name in ("conversations", "sessions", "turns", "messages", "skipped"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, row in other.by_workspace.items():
            mine = self.by_workspace.setdefault(key, [0, 0])
            mine[0] += row[0]
            mine[1] += row[1]

    def to_json(self) -> dict[str, Any]:
        return {"conversations": self.conversations, "sessions_created": self.sessions,
                "turns": self.turns, "messages": self.messages, "skipped": self.skipped,
                "workspaces": [{"source": s, "workspace": w, "conversations": c,
                                "turns": t}
                               for (s, w), (c, t) in sorted(self.by_workspace.items(),
                                                            key=lambda kv: (kv[0][0],
                                                                            kv[0][1] or ""))]}


def session_id_for(user_id: str, source: str, key: str) -> str:
    """The id of the session holding a conversation: the same on every import."""
    digest = hashlib.sha256(f"{user_id}\0{source}\0{key}".encode()).hexdigest()
    return f"import-{digest[:40]}"


def imported_turns(session: Session | None) -> int:
    """How many turns of its conversation an imported session has read."""
    if session is None:
        return 0
    meta = session.metadata.get(META)
    turns = meta.get("turns") if isinstance(meta, Mapping) else None
    return turns if isinstance(turns, int) and not isinstance(turns, bool) else 0


def new_turns(conv: Conversation, session: Session | None) -> tuple[Turn, ...]:
    """The turns of ``conv`` its session has not stored: those after the last record
    stored from the same file (:attr:`Conversation.part`) when ``conv`` holds it, else
    after the last stored from another file that ``conv`` repeats, else those past the
    count of turns read."""
    lasts = _lasts(session)
    lines = [t.line for t in conv.turns]

    def after(line: str) -> int:
        return len(lines) - lines[::-1].index(line)

    own = lasts.get(conv.part) if conv.part is not None else None
    if own is not None and own in lines:
        return conv.turns[after(own):]
    found = [after(line) for line in lasts.values() if line in lines]
    if found:
        return conv.turns[max(found):]
    return conv.turns[imported_turns(session):]


def _lasts(session: Session | None) -> dict[str, str]:
    """The record each file of a conversation was last read to, by file."""
    meta = session.metadata.get(META) if session is not None else None
    lasts = meta.get("last") if isinstance(meta, Mapping) else None
    if not isinstance(lasts, Mapping):
        return {}
    return {k: v for k, v in lasts.items() if isinstance(k, str) and isinstance(v, str)}


def _read_to(conv: Conversation, session: Session, new: Sequence[Turn]) -> dict[str, Any]:
    """The session's import metadata once ``new`` of ``conv``'s turns are stored."""
    read: dict[str, Any] = {"source": conv.source, "key": conv.key,
                            "turns": max(len(conv.turns), imported_turns(session) + len(new))}
    lasts = _lasts(session)
    if conv.part is not None and conv.turns and conv.turns[-1].line is not None:
        lasts[conv.part] = conv.turns[-1].line
    if lasts:
        read["last"] = lasts
    return read


def plan_import(engine: Memd, user_id: str,
                conversations: Iterable[Conversation]) -> ImportCounts:
    """What :func:`import_conversations` would import, without writing anything."""
    counts = ImportCounts()
    for conv in conversations:
        session = engine.store.get_session(user_id, session_id_for(user_id, conv.source,
                                                                   conv.key))
        new = len(new_turns(conv, session))
        counts.conversations += 1
        if new <= 0:
            continue
        counts.sessions += session is None
        counts.turns += new
        row = counts.by_workspace.setdefault((conv.source, conv.workspace), [0, 0])
        row[0] += 1
        row[1] += new
    return counts


def import_conversations(engine: Memd, user_id: str, conversations: Iterable[Conversation],
                         *, progress: Progress | None = None, run_jobs: bool = False,
                         passages_later: bool = False) -> ImportCounts:
    """Store the turns of ``conversations`` not stored yet (see the module docstring).

    Conversations are written in batches of about ``BATCH_TURNS`` new turns, each batch
    in one transaction, so a failure leaves the batch as it was (a second import then
    writes it). With ``run_jobs`` the jobs they make (embeddings, memories) run before
    this returns, so the history is searchable then: the batch's texts are embedded
    first, in one call (sorted by length, padded per model call), then the jobs run as
    a live daemon's worker runs them, each at the time of the turn that made it, in
    time order, finding their vectors in the embedder's cache: what they store is what
    appending the same turns live stores. With ``passages_later`` too, the passages of
    the messages (sub-turn excerpts that only refine ranking, memd.engine.retrieval.passages) are
    left to ``embed_passages`` jobs queued at the end, for the caller or the daemon's
    worker to run: the turns are searchable, by their vectors and full-text rows, when
    this returns, in less than half the model time. ``progress`` is told how many turns
    each conversation had that were new."""
    clock = follow_clock(engine)
    counts = ImportCounts()
    deferring: AbstractContextManager[None] = (
        engine.jobs.passages_later(user_id) if run_jobs and passages_later else nullcontext())
    with deferring:
        for batch in _batches(conversations, BATCH_TURNS):
            counts.add(_import_batch(engine, clock, user_id, batch, run_jobs,
                                     passages_later, progress))
        if run_jobs and counts.messages:
            # what a job left for later (its follow-ups), at the real time
            while engine.jobs.run_due():
                pass
    return counts


def _import_batch(engine: Memd, clock: FollowClock, user_id: str, batch: list[Conversation],
                  run_jobs: bool, passages_later: bool, progress: Progress | None
                  ) -> ImportCounts:
    """One batch of conversations written in one transaction, then its jobs run (with
    ``run_jobs``); what was done."""
    counts = ImportCounts()
    written: list[ImportCounts] = []
    stored: list[Message] = []
    times: set[float | None] = set()
    with engine.store.transaction():
        for conv in batch:
            one, messages, at = _import_one(engine, clock, user_id, conv)
            written.append(one)
            stored.extend(messages)
            times.update(at)
    if run_jobs and stored:  # every text the jobs will embed, in one call
        texts, extra = ((message_texts(stored), []) if passages_later
                        else embedded_texts(stored))
        memories = engine.jobs.queued_memory_texts(user_id)  # what extraction found
        engine.embedder.embed(texts + memories + extra)
        for when in sorted(times, key=lambda t: (t is None, t or 0.0)):
            with clock.at(when):
                while engine.jobs.run_due():
                    pass
    for one in written:
        counts.add(one)
        if progress is not None:
            progress(one.turns)
    return counts


def _batches(conversations: Iterable[Conversation], turns: int
             ) -> Iterator[list[Conversation]]:
    """``conversations`` in lists of about ``turns`` turns (a longer one alone)."""
    batch: list[Conversation] = []
    size = 0
    for conv in conversations:
        if batch and size + len(conv.turns) > turns:
            yield batch
            batch, size = [], 0
        batch.append(conv)
        size += len(conv.turns)
    if batch:
        yield batch


def _import_one(engine: Memd, clock: FollowClock, user_id: str,
                conv: Conversation) -> tuple[ImportCounts, list[Message], list[float | None]]:
    """One conversation's new turns written: what was done, the messages stored and
    the times they were stored at."""
    counts = ImportCounts(conversations=1)
    stored: list[Message] = []
    times: list[float | None] = []
    sid = session_id_for(user_id, conv.source, conv.key)
    store = engine.store
    with store.transaction():
        session = store.get_session(user_id, sid)
        new = new_turns(conv, session)
        if not new:
            if session is not None and _lasts(session) != _read_to(conv, session, new).get(
                    "last", {}):  # a file whose turns another stored: where it ends now
                store.update_session(user_id, sid, metadata={
                    **session.metadata, META: _read_to(conv, session, new)})
            return counts, stored, times
        counts.turns = len(new)
        counts.by_workspace[(conv.source, conv.workspace)] = [1, len(new)]
        if session is None:
            with clock.at(conv.first_at):
                session = engine.create_session(
                    user_id, workspace=conv.workspace, session_id=sid,
                    metadata={"client": conv.client, "imported_from": conv.source})
            if conv.title:  # the client's title, its secrets replaced like a message's
                title = engine.sanitizer.sanitize(
                    conv.title[:200], engine.placeholders.get(user_id, sid)).text
                store.set_session_title(user_id, sid, title)
            counts.sessions = 1
        for at, messages in _runs(new, conv.first_at, engine.settings.max_message_chars):
            if not messages:
                counts.skipped += 1
                continue
            with clock.at(at):
                stored.extend(engine.append(sid, user_id, messages))
            times.append(at)
            counts.messages += len(messages)
        store.update_session(user_id, sid, metadata={
            **session.metadata, META: _read_to(conv, session, new)})
    return counts, stored, times


def _runs(turns: Sequence[Turn], start: float | None, max_chars: int
          ) -> Iterator[tuple[float | None, list[dict[str, Any]]]]:
    """The messages to store, in runs of one time (a turn without one has the time of
    the turn before it), each run appended in one call: a message's time is its
    append's. A skipped turn is a run of no message."""
    run: list[dict[str, Any]] = []
    run_at = at = start
    for turn, message in _messages(turns, max_chars):
        at = turn.at if turn.at is not None else at
        if run and (at != run_at or message is None or len(run) == MAX_MESSAGES_PER_CALL):
            yield run_at, run
            run = []
        if message is None:
            yield at, []
            continue
        run_at = at
        run.append(message)
    if run:
        yield run_at, run


def _messages(turns: Sequence[Turn], max_chars: int
              ) -> Iterator[tuple[Turn, dict[str, Any] | None]]:
    """Each turn with its OpenAI message, None for one not to store: empty, or a side
    request of the client and the replies to it."""
    aside = False
    for turn in turns:
        if turn.role == "user":
            body = {"messages": [{"role": "user", "content": turn.text}]}
            aside = side_reason(body, None) is not None
        if aside or not (turn.text.strip() or turn.tool_calls):
            yield turn, None
            continue
        message: dict[str, Any] = {"role": turn.role, "content": turn.text or None}
        if len(turn.text) > max_chars:  # a whole file pasted: its head is kept
            message["content"] = turn.text[:max_chars]
            message["metadata"] = {"cut_from_chars": len(turn.text)}
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls]
        if turn.role == "tool":
            message["tool_call_id"] = turn.tool_call_id or "unknown"
        yield turn, message
