"""Forgetting a memory or a fact (``memd forget ID``, ``memd forget --fact``,
``DELETE /v1/memories/{id}``, ``DELETE /v1/facts/{category}/{key}``).

What was derived goes: the memory with the facts it stated, or the fact with every value
it had and the memories that state it; a tombstone keeps the same message text, stored
again, from extracting them again (:func:`memd.engine.learning.write.forgotten_digest`).

The messages they came from would still bring the forgotten words back: recall quotes
past messages, search finds them, a compiled history replays them. The design keeps every
message as sent for its owner, so a forget does not delete them; it *prunes* them
(:meth:`memd.backends.base.ErasureStore.prune_messages`): each source message, with the
replies that answer it up to the user's next message (an answer repeats what it answers),
stays readable by its owner and in exports but is never read by memd again; so do the
copies of a source message stored since (a branch, a resent conversation), and those
stored later: the append recognises one by the forget's tombstones of its text and
prunes it, with its replies, as it arrives (memd.engine.conversation.sessions). What memd
made of them goes too: a session title that shares a content word with a pruned message
(titles quote a session's first words) is cleared, and the summary that compacted a
pruned message is deleted with the session's rolling summary. Deleting the original is
the owner's call (``memd forget --session S --message M``, which the CLI names).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memd.engine import validate as v
from memd.engine.learning.extract import extract
from memd.engine.learning.write import fact_item, fact_tag, forgotten_digest, memory_item
from memd.engine.retrieval.relevance import content_words
from memd.errors import NotFound
from memd.types import Fact, Memory, MemoryFilter, Message

if TYPE_CHECKING:
    from collections.abc import Callable

    from memd.backends.base import MemoryStore, MessageStore, Store
    from memd.engine.block.inject import StableBlocks
    from memd.engine.conversation.history import HistoryCache

#: How many messages after a source message are looked at for its replies (an agent's
#: turn can be a long run of tool calls and results before the user speaks again).
REPLY_RUN = 256
#: How many keyword matches of a source message are looked at for copies of it.
COPIES = 20


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What a forget deleted, and the messages it pruned (kept for their owner, no
    longer read by memd)."""

    memories: list[Memory]
    facts: list[Fact]
    pruned: list[Message]


@dataclass(frozen=True, slots=True)
class ForgetPreview:
    """What a forget would remove, read without changing anything, so that a user can
    see it before confirming: the memories and facts deleted (each memory with its
    vector, keyword-index row and entity links), the messages pruned, the compaction
    summaries deleted with them and the session titles cleared. The user's cached
    memory blocks are rebuilt after any forget."""

    memories: list[Memory]
    facts: list[Fact]
    pruned: list[Message]
    summaries: list[str]  # ids of the compaction summaries deleted
    titles: list[tuple[str, str]]  # (session id, title) of the titles cleared


def existing_memory(store: MemoryStore, memory_id: str, user_id: str) -> Memory:
    """The user's memory ``memory_id``; NotFound when the user has none of that id."""
    mem = store.get_memory(v.check_id(user_id, "user_id"), v.check_id(memory_id, "id"))
    if mem is None:
        raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
    return mem


class Forgetting:
    """Forgets memories and facts for :class:`memd.engine.memory.Memd` (which delegates
    ``forget`` and ``forget_fact`` here): it needs the store, the clock, and the
    in-process caches a forget makes stale."""

    def __init__(self, store: Store, history: HistoryCache, blocks: StableBlocks,
                 now: Callable[[], float]) -> None:
        self.store = store
        self.history = history
        self.blocks = blocks
        self.now = now

    def forget(self, memory_id: str, user_id: str | None = None) -> Memory:
        """Delete a memory and every derived copy (vector, full-text row, entity links,
        cached embedding), and prune the message it came from (see
        :meth:`forget_with_sources`). Without ``user_id`` the id alone finds it (local
        CLI use)."""
        return self.forget_with_sources(memory_id, user_id).memories[0]

    def forget_with_sources(self, memory_id: str, user_id: str | None = None) -> Forgotten:
        """:meth:`forget`, returning the memory, the facts it stated and the messages
        pruned."""
        v.check_id(memory_id, "id")
        if user_id is None:
            found = self.store.find_memory_id(memory_id)
            if found is None:
                raise NotFound(f"no memory {memory_id!r}")
            user_id, mem = found
        else:
            mem = existing_memory(self.store, memory_id, user_id)
        with self.store.transaction():
            stated = self._stated_by(user_id, mem)
            self.store.delete_memory(user_id, memory_id)
            self.store.delete_facts(user_id, [f.id for f in stated])
            self._remember_forgotten(user_id, [mem], stated)
            pruned = self._prune_sources(user_id, [mem], stated)
        self._after_forget(user_id, pruned)
        return Forgotten([mem], stated, pruned)

    def forget_fact(self, user_id: str, category: str, key: str, *,
                    workspace: str | None = None) -> builtins.list[Fact]:
        """Delete a fact, every earlier value of it, and the memories that state it (they
        carry its tag), and prune the messages they came from: nothing of it reaches a
        context again. With ``workspace``, only that workspace's. Returns the facts
        deleted; NotFound when there is none."""
        return self.forget_fact_with_sources(user_id, category, key,
                                             workspace=workspace).facts

    def forget_fact_with_sources(self, user_id: str, category: str, key: str, *,
                                 workspace: str | None = None) -> Forgotten:
        """:meth:`forget_fact`, returning the memories and facts deleted and the messages
        pruned."""
        with self.store.transaction():
            uid, found, stating = self._fact_and_stating(user_id, category, key, workspace)
            self.store.delete_facts(uid, [f.id for f in found])
            for mem in stating:
                self.store.delete_memory(uid, mem.id)
            self._remember_forgotten(uid, stating, found)
            pruned = self._prune_sources(uid, stating, found)
        self._after_forget(uid, pruned)
        return Forgotten(stating, found, pruned)

    def forget_preview(self, memory_id: str, user_id: str) -> ForgetPreview:
        """What :meth:`forget_with_sources` of ``memory_id`` would remove; nothing is
        changed."""
        mem = existing_memory(self.store, memory_id, user_id)
        return self._preview(user_id, [mem], self._stated_by(user_id, mem))

    def forget_fact_preview(self, user_id: str, category: str, key: str, *,
                            workspace: str | None = None) -> ForgetPreview:
        """What :meth:`forget_fact_with_sources` would remove; nothing is changed.
        NotFound when the user has no such fact."""
        uid, found, stating = self._fact_and_stating(user_id, category, key, workspace)
        return self._preview(uid, stating, found)

    def _fact_and_stating(self, user_id: str, category: str, key: str,
                          workspace: str | None
                          ) -> tuple[str, builtins.list[Fact], builtins.list[Memory]]:
        """The user's id, every value the fact had and the memories that state it (they
        carry its tag); NotFound when the user has no such fact."""
        uid = v.check_id(user_id, "user_id")
        category, key = v.fact_key(category, key)
        ws = v.check_optional_id(workspace, "workspace")
        scope = None if ws is None else (ws,)
        found = self.store.get_facts(uid, workspaces=scope, active_only=False,
                                     category=category, key=key)
        if not found:
            raise NotFound(f"no fact {category}/{key} for user {uid!r}")
        stating = self.store.list_memories(
            uid, MemoryFilter(workspaces=scope, tags=(fact_tag(category, key),),
                              include_inactive=True, include_superseded=True), limit=10_000)
        return uid, found, stating

    def _preview(self, user_id: str, memories: Sequence[Memory],
                 facts: Sequence[Fact]) -> ForgetPreview:
        pruned = []
        for message_id in dict.fromkeys(self._source_ids(user_id, memories, facts)):
            msg = self.store.get_message(user_id, message_id)
            if msg is not None and not msg.is_pruned:
                pruned.append(msg)
        summaries = list(dict.fromkeys(
            m.compressed_summary_id for m in pruned
            if m.is_compressed and m.compressed_summary_id is not None))
        return ForgetPreview(list(memories), list(facts), pruned, summaries,
                             self._titles_quoting(user_id, pruned))

    def _remember_forgotten(self, user_id: str, memories: Sequence[Memory],
                            facts: Sequence[Fact]) -> None:
        """Tombstones of what a forget deleted, for each item extracted from a message
        (see :func:`memd.engine.learning.write.forgotten_digest`): extraction of that message
        text, stored again, skips them."""
        items = [(m.provenance_message_id, memory_item(m.text)) for m in memories]
        items += [(f.source_message_id, fact_item(f.category, f.key, f.value)) for f in facts]
        sources: dict[str, str | None] = {}
        digests = []
        for message_id, item in items:
            if message_id is None:
                continue
            if message_id not in sources:
                found = self.store.get_message(user_id, message_id)
                sources[message_id] = found.content_hash if found else None
            source = sources[message_id]
            if source is not None:
                digests.append(forgotten_digest(source, item))
        self.store.add_forgotten(user_id, digests, self.now())

    def _stated_by(self, user_id: str, mem: Memory) -> builtins.list[Fact]:
        """The facts ``mem`` stated: it carries their tag, and they come from the message
        it was extracted from or its own words state that value. They were derived from
        it and go with it; another value of the same fact, stated elsewhere, stays."""
        keys = {t.removeprefix("fact:") for t in mem.tags if t.startswith("fact:")}
        if not keys:
            return []
        stated = {(ex.fact.category, ex.fact.key, ex.fact.value.lower())
                  for ex in extract(mem.text) if ex.fact is not None}
        source = mem.provenance_message_id
        return [f for f in self.store.get_facts(user_id, active_only=False)
                if f"{f.category}/{f.key}" in keys
                and ((source is not None and f.source_message_id == source)
                     or (f.category, f.key, f.value.lower()) in stated)]

    def _source_ids(self, user_id: str, memories: Sequence[Memory],
                    facts: Sequence[Fact]) -> builtins.list[str]:
        """The ids of the messages ``memories`` and ``facts`` came from, their copies and
        the replies to each: what a forget of them prunes."""
        sources = dict.fromkeys([m.provenance_message_id for m in memories]
                                + [f.source_message_id for f in facts])
        ids: list[str] = []
        for message_id in sources:
            msg = None if message_id is None else self.store.get_message(user_id, message_id)
            if msg is None:
                continue
            for copy in [msg, *_copies(self.store, user_id, msg)]:
                ids += [copy.id, *_replies(self.store, user_id, copy)]
        return ids

    def _prune_sources(self, user_id: str, memories: Sequence[Memory],
                       facts: Sequence[Fact]) -> builtins.list[Message]:
        """Prune the messages ``memories`` and ``facts`` came from, with their replies,
        and clear what memd made of them (see the module docstring); the messages
        pruned."""
        pruned = self.store.prune_messages(user_id, self._source_ids(user_id, memories, facts))
        for msg in pruned:
            if msg.is_compressed and msg.compressed_summary_id is not None:
                self.store.delete_memory(user_id, msg.compressed_summary_id)
                self.store.update_session(user_id, msg.session_id, summary_text=None,
                                          summary_token_count=0)
        for session_id, _title in self._titles_quoting(user_id, pruned):
            self.store.update_session(user_id, session_id, title=None)
        return pruned

    def _titles_quoting(self, user_id: str, pruned: Sequence[Message]
                        ) -> builtins.list[tuple[str, str]]:
        """The sessions (id, title) whose title shares a content word with the pruned
        messages of that session: titles quote a session's first words."""
        said: dict[str, set[str]] = {}  # session -> the content words its pruned turns say
        for msg in pruned:
            said.setdefault(msg.session_id, set()).update(content_words(msg.safe_text or ""))
        out = []
        for session_id, words in said.items():
            session = self.store.get_session(user_id, session_id)
            if session is not None and session.title and content_words(session.title) & words:
                out.append((session_id, session.title))
        return out

    def _after_forget(self, user_id: str, pruned: Sequence[Message]) -> None:
        self.blocks.forget_user(user_id)
        if pruned:
            self.history.clear()  # keyed by (user, session); a forget is rare


def _copies(store: MessageStore, user_id: str, msg: Message) -> builtins.list[Message]:
    """The user's other messages with the same text as user message ``msg`` (a branch of
    its session, or a client that resent it in a new chat, stores it again), as far as
    the keyword channel finds them: its best :data:`COPIES` matches."""
    if msg.role != "user" or msg.content_hash is None or not (msg.safe_text or "").strip():
        return []
    query = v.excerpt(msg.safe_text or "", v.QUERY_CHARS)
    return [m for m, _ in store.keyword_messages(user_id, query, COPIES)
            if m.content_hash == msg.content_hash and m.id != msg.id]


def _replies(store: MessageStore, user_id: str, msg: Message) -> builtins.list[str]:
    """The ids of the messages that answer user message ``msg``: those after it in its
    session, up to the user's next message."""
    if msg.role != "user":
        return []
    out = []
    for after in store.get_messages(user_id, msg.session_id, after_turn=msg.turn_index,
                                    limit=REPLY_RUN):
        if after.role == "user":
            break
        out.append(after.id)
    return out
