"""Erasure, the engine's side: a user (``memd forget --all``, ``DELETE /v1/users/{id}``),
one session (``memd forget --session``, ``DELETE /v1/sessions/{id}``) or one message
(``memd forget --message``, ``DELETE /v1/sessions/{id}/messages/{message_id}``) leaves no
row behind, and on SQLite no byte of its text in the files.

The store deletes the rows (:class:`memd.backends.base.ErasureStore`); the engine adds
what only it knows: the embedding cache's keys of the texts that go (the embedder hashes
the exact text it was given: a memory's text, a message's excerpt and a user message's
passages, a fact's line, an extraction job's text, a context object's passages and
the questions a micro-fault asked of them), and its own in-process copies
(histories, memory blocks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memd.context_objects import object_passages
from memd.engine import validate as v
from memd.engine.retrieval.passages import passages
from memd.engine.validate import EMBED_CHARS, excerpt
from memd.errors import NotFound
from memd.models.embedder import text_hash

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.config import Settings
    from memd.engine.background.jobs import JobRunner
    from memd.engine.block.inject import StableBlocks
    from memd.engine.conversation.history import HistoryCache
    from memd.engine.learning.notes import NoteCache

_ALL = 2**31 - 1  # "no limit" for the store's listings


def cache_keys(store: Store, user_id: str, session_id: str | None = None,
               message_id: str | None = None) -> list[str]:
    """The embedding cache's keys of the texts that erasing ``user_id`` (or only its
    session ``session_id``, or only that session's message ``message_id``) removes."""
    sessions = ([session_id] if session_id is not None
                else [s.id for s in store.list_sessions(user_id, limit=_ALL)])
    texts: list[str] = []
    message_ids: set[str] = set()
    for sid in sessions:
        tool_calls: set[str] = set()
        for m in store.get_messages(user_id, sid):
            if message_id is not None and m.id != message_id:
                continue
            message_ids.add(m.id)
            if m.tool_call_id is not None:
                tool_calls.add(m.tool_call_id)
            if m.safe_text:
                texts.append(excerpt(m.safe_text, EMBED_CHARS))
                if m.role == "user":
                    texts += passages(m.safe_text)
        texts += _fault_texts(store, user_id, sid,
                              None if message_id is None else tool_calls)

    def erased(session: str | None, from_message: str | None) -> bool:
        if message_id is not None:
            return from_message in message_ids
        return session_id is None or session == session_id or from_message in message_ids

    texts += [m.text for m in store.iter_memories(user_id)
              if erased(m.session_id, m.provenance_message_id)]
    texts += [f.text for f in store.get_facts(user_id, active_only=False)
              if erased(None, f.source_message_id)]
    for state in ("pending", "dead"):
        for q in store.list_jobs(state, user_id, limit=_ALL):
            p = q.job.payload
            if isinstance(p.get("text"), str) and erased(p.get("session_id"),
                                                         p.get("message_id")):
                texts.append(p["text"])
    return sorted({text_hash(t) for t in texts})


def _fault_texts(store: Store, user_id: str, session_id: str,
                 tool_calls: set[str] | None) -> list[str]:
    """The texts a micro-fault embedded in the session: its context objects' passages
    and the questions asked of them (only the objects of ``tool_calls``' results, and
    the questions answered from them, when one message goes)."""
    objects = [o for o in store.context_objects(user_id, session_id)
               if tool_calls is None or o.tool_call_id in tool_calls]
    held = {o.object_id for o in objects}
    texts = [p for o in objects for p in object_passages(o.content)]
    texts += [f.question for f in store.faults(user_id, session_id) if f.kind == "query"
              and (tool_calls is None or held & set(f.object_ids))]
    return texts


class Erasure:
    """Erases users, sessions, messages and call reports for
    :class:`memd.engine.memory.Memd` (which delegates ``erase_*``, ``deep_scrub`` and
    ``delete_call`` here): the store deletes the rows, the job runner is flushed first
    (its gathered statistics name what goes), and the in-process caches are cleared."""

    def __init__(self, store: Store, settings: Settings, jobs: JobRunner,
                 history: HistoryCache, blocks: StableBlocks, notes_cache: NoteCache) -> None:
        self.store = store
        self.settings = settings
        self.jobs = jobs
        self.history = history
        self.blocks = blocks
        self.notes_cache = notes_cache

    def erase_user(self, user_id: str) -> dict[str, int]:
        """Delete every row of the user in every table (messages, sessions, memories with
        their vectors and full-text rows, facts, entity links, forget tombstones, jobs
        dead or pending, call reports, usage, the account with its keys and workspace
        memberships) and the shared rows only the user's data used (system prompts,
        cached embeddings), then scrub the files (:meth:`Store.scrub`). Returns the rows
        deleted by table (with ``erase_usage = "anonymize"`` the usage rows stay, no longer
        the user's: ``usage_log_anonymized``); NotFound when the user had none."""
        uid = v.check_id(user_id, "user_id")
        self.jobs.flush()  # gathered access stats name the user's memories
        counts = self.store.erase_user(uid, cache_keys(self.store, uid),
                                       anonymize_usage=self.settings.erase_usage == "anonymize")
        if not any(counts.values()):
            raise NotFound(f"no data of user {uid!r}")
        self._after_erase(uid)
        return counts

    def erase_session(self, user_id: str, session_id: str) -> dict[str, int]:
        """Delete a session, its messages and what derives from them (see
        :meth:`Store.erase_session`), then scrub the files; the rows deleted by table.
        NotFound for a session that is not the user's."""
        uid = v.check_id(user_id, "user_id")
        sid = v.check_id(session_id, "session_id")
        if self.store.get_session(uid, sid) is None:
            raise NotFound(f"no session {sid!r} for user {uid!r}")
        self.jobs.flush()
        counts = self.store.erase_session(
            uid, sid, cache_keys(self.store, uid, sid),
            anonymize_usage=self.settings.erase_usage == "anonymize")
        self._after_erase(uid)
        return counts

    def erase_message(self, user_id: str, session_id: str, message_id: str) -> dict[str, int]:
        """Delete one message of the user's session and what derives from it (memories
        made from it, facts it stated, its jobs), then scrub the files; the rows deleted
        by table. NotFound for a message that is not in the user's session."""
        uid = v.check_id(user_id, "user_id")
        sid = v.check_id(session_id, "session_id")
        mid = v.check_id(message_id, "message_id")
        if not any(m.id == mid for m in self.store.get_messages(uid, sid)):
            raise NotFound(f"no message {mid!r} in session {sid!r} of user {uid!r}")
        self.jobs.flush()
        counts = self.store.erase_message(uid, sid, mid, cache_keys(self.store, uid, sid, mid))
        self._after_erase(uid)
        return counts

    def deep_scrub(self) -> list[str]:
        """Rewrite the store's files so that nothing erased or forgotten is left in them
        (:meth:`Store.deep_scrub`: on PostgreSQL a maintenance step that locks each table
        while it rewrites it); what was done and what it could not reach, one line
        each."""
        self.jobs.flush()
        return self.store.deep_scrub()

    def delete_call(self, user_id: str, call_id: str) -> None:
        """Delete one of the user's call reports (NotFound when there is none)."""
        uid = v.check_id(user_id, "user_id")
        if not self.store.delete_call(uid, v.check_id(call_id, "call_id")):
            raise NotFound(f"no call {call_id!r} of user {uid!r}")

    def _after_erase(self, user_id: str) -> None:
        self.history.clear()  # keyed by (user, session); erasure is rare
        self.blocks.forget_user(user_id)
        self.notes_cache.clear()
        self.store.scrub()
