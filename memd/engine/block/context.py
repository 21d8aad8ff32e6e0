"""The context of a call, the part of ``Memd`` that compiles it: the token-budgeted
message list a model gets (history, facts, memories, recalled messages), and the memory
candidates the proxy builds its memory block from. The reads of one compile share a unit of work
(``Store.read_batch``); on PostgreSQL the history and the facts are read in a side thread
while the query is embedded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from memd.engine import validate as v
from memd.engine.block.compile import (
    RECALL_KIND,
    STYLE_RULE,
    TOPIC_RULE,
    Candidate,
    CompileInput,
    compile_context,
    history_budget_bound,
)
from memd.engine.conversation.turns import as_openai, checked_message, newest_user_words
from memd.engine.learning.extract import STYLE_TAG
from memd.engine.learning.notes import NoteCache, with_notes
from memd.engine.learning.write import (
    fact_tag,
)
from memd.engine.retrieval.recall import (
    RecallScope,
    recall_candidates,
    recall_hits_aside,
    same_text,
)
from memd.engine.retrieval.relevance import content_words, related
from memd.engine.retrieval.retrieve import ScoredMemory, aside, score_memories
from memd.engine.retrieval.vocabulary import (
    UNGATED_FLOOR,
    UNGATED_SURE,
    LongHistories,
    knows,
)
from memd.models.tokens import count_text, message_tokens
from memd.types import (
    Context,
    Fact,
    MemoryFilter,
    Message,
    NewMessage,
    Scope,
    ScoredMessages,
    Session,
    Tier,
)

if TYPE_CHECKING:
    import numpy as np

    from memd.backends.base import Store
    from memd.backends.service_roles import AccountStore
    from memd.config import Settings
    from memd.engine.background.jobs import JobRunner
    from memd.engine.conversation.history import HistoryCache
    from memd.models.embedder import CachedEmbedder
    from memd.privacy import Sanitizer


FACT_MIN_IMPORTANCE = 0.5  # facts this important are candidates for every context
QUERY_VECTORS = 64  # the latest queries whose vectors Contexts.query_vector keeps


def visible_workspaces(workspace: str | None) -> tuple[str, ...]:
    """What a call scoped to ``workspace`` sees: its own memories plus the user's
    global ones (no workspace)."""
    return ("",) if workspace is None else ("", workspace)


def shared_owners(store: AccountStore, user_id: str, workspace: str | None,
                  now: float) -> list[tuple[str, MemoryFilter]]:
    """The other members of ``workspace`` when ``user_id`` is one, each with the
    filter of what they share: their global memories of that workspace. Membership
    exists only in authenticated (team) mode, so in local mode this is empty."""
    if workspace is None:
        return []
    members = store.workspace_members(workspace)
    if user_id not in members:
        return []
    flt = MemoryFilter(workspaces=(workspace,), scope=Scope.GLOBAL, now=now)
    return [(other, flt) for other in members if other != user_id]


class Contexts:
    """Compiles contexts and gathers memory-block candidates for
    :class:`memd.engine.memory.Memd` (which delegates ``context``,
    ``memory_candidates``, ``query_vector``, ``redact`` and ``record_used`` here). What
    it reads (the store, the embedder, the caches), what it reads by (the settings, the
    clock, the sanitizer), the session lookup and the job runner that records access
    statistics are passed in."""

    def __init__(self, store: Store, settings: Settings, embedder: CachedEmbedder,
                 jobs: JobRunner, history: HistoryCache, notes_cache: NoteCache,
                 sanitizer: Sanitizer, now: Callable[[], float],
                 session: Callable[[str, str], Session]) -> None:
        self.store = store
        self.settings = settings
        self.embedder = embedder
        self.jobs = jobs
        self.history = history
        self.notes_cache = notes_cache
        self.sanitizer = sanitizer
        self.now = now
        self.session = session
        self.long_histories = LongHistories()
        # the latest queries' vectors (:meth:`query_vector`), with the sanitizer and the
        # embedder that made them
        self._query_vectors: OrderedDict[str, tuple[Sanitizer, CachedEmbedder, np.ndarray]]
        self._query_vectors = OrderedDict()
        self._query_lock = threading.Lock()


    def context(
        self, user_id: str, *, session_id: str | None = None,
        messages: Sequence[Any] | None = None, workspace: str | None = None,
        query: str | None = None, context_window: int | None = None,
        max_response_tokens: int | None = None, tool_tokens: int = 0,
        model: str | None = None, task_type: str | None = None,
        use_session_prompt: bool = True, original_history: bool = False,
    ) -> Context:
        """Compile a token-budgeted OpenAI message list for the next call.

        History is the session's stored active messages (then ``messages``, if given,
        as not-yet-stored turns); the client's system messages come first, unchanged;
        memory is retrieved for ``query`` (default: the last user message). Its reads
        share one unit of work (``Store.read_batch``). The stored history is given in
        its sanitized text (memd.engine.learning.privacy); ``original_history``: as the client
        sent it (the proxy forwarding a client's own conversation to its model)."""
        with self.store.read_batch():
            return self._context(
                user_id, session_id, messages, workspace, query, context_window,
                max_response_tokens, tool_tokens, model, task_type, use_session_prompt,
                original_history,
            )

    def memory_candidates(
        self, user_id: str, query: str, *, session: Session | None = None,
        workspace: str | None = None, exclude_session: bool = False,
        sent_chains: Iterable[str] | None = None,
    ) -> tuple[list[Candidate], list[Candidate]]:
        """The facts and scored memories a memory block for ``query`` may hold (the
        session's own memories left out with ``exclude_session``), in one read batch;
        the caller records which ones it used with :meth:`record_used`. With
        ``sent_chains`` (the chain hashes of the messages the client sent) past messages
        are recalled too (:mod:`memd.engine.retrieval.recall`), after the memories."""
        uid = v.check_id(user_id, "user_id")
        ws = v.check_optional_id(workspace, "workspace")
        if session is not None and ws is None:
            ws = session.workspace
        now = self.now()
        visible = visible_workspaces(ws)
        chains = frozenset(sent_chains or ())
        own = session.id if session is not None and exclude_session else None
        with self.store.read_batch():
            found = self._search_aside(uid, query, now, sent_chains is not None)
            all_facts = self.store.get_facts(uid, workspaces=visible)
            scored = self._score(uid, query, session, ws, visible, now)
            floor = self._floor(query, uid, lambda m: m.chain_hash in chains
                                or m.session_id == own, all_facts, scored)
            facts, mems = _candidates(
                all_facts, scored, floor,
                self._fact_similarity(query, all_facts, scored),
                session.id if session is not None else None, exclude_session)
            mems = with_notes(self.notes_cache.candidates(self.store, uid, visible), mems)
            if sent_chains is None or not query or not floor.known:
                return facts, mems
            recalled = self._recall(uid, query, scored, visible, now, floor,
                                    sent_chains=sent_chains, found=found)
        return facts, mems + recalled

    def _recall(self, user_id: str, query: str, scored: Sequence[ScoredMemory],
                visible: tuple[str, ...], now: float, floor: Floor, *,
                sent_chains: Iterable[str] = (), history: Iterable[str] = (),
                found: Callable[[], ScoredMessages] | None = None) -> list[Candidate]:
        """Past messages for ``query`` (:mod:`memd.engine.retrieval.recall`) that pass ``floor``'s
        recall floors, except those the memories at hand say word for word (``found``:
        :meth:`_search_aside`'s search)."""
        known = frozenset(same_text(s.memory.text) for s in scored)
        scope = RecallScope(frozenset(sent_chains), known, visible, frozenset(history))
        return recall_candidates(self.store, self.embedder, user_id, query,
                                 self.query_vector(query), self.settings.weights,
                                 floor.recall, now, scope,
                                 keyword=self.settings.recall_keyword, sure=floor.sure,
                                 answer_floor=self.settings.recall_answer_floor,
                                 question_floor=self.settings.recall_question_floor,
                                 hits=None if found is None else found())

    def _search_aside(self, user_id: str, query: str | None, now: float, recall: bool
                      ) -> Callable[[], ScoredMessages] | None:
        """Recall's message search (its channels need the query alone), started in side
        workers when ``recall`` may follow, so it runs while this thread scores the
        memories, on connections of its own (a store of concurrent reads): the function
        returned waits for it (:func:`recall_hits_aside`)."""
        if not (recall and query and self.store.concurrent_reads
                and not self.store.in_transaction()):
            return None
        return recall_hits_aside(self.store, self.embedder, user_id, query,
                                 self.query_vector(query), self.settings.weights, now,
                                 self.settings.recall_keyword)

    def _floor(self, query: str | None, user_id: str, sent: Callable[[Message], bool],
               facts: Sequence[Fact], scored: Sequence[ScoredMemory]) -> Floor:
        """The relevance test of facts and memories for ``query``: nothing passes when
        the user's history (its messages, but those for which ``sent`` is true, the
        request's own; the memories and facts at hand) does not know its words
        (:mod:`memd.engine.retrieval.vocabulary`). The cosine floors were chosen with that gate:
        where it cannot judge (a short history), they are higher, as before it; with
        the gate turned off (``known_words``) they are as configured."""
        known, up, sure_up = True, 0.0, 0.0
        if self.settings.known_words and query:
            if self.long_histories.has_vocabulary(self.store, user_id):
                said = [*(f.text for f in facts),
                        *(s.memory.text for s in scored if s.memory.kind != "summary")]
                known = knows(self.store, user_id, query, sent, said).passes
            else:
                up, sure_up = UNGATED_FLOOR, UNGATED_SURE
        st = self.settings
        return Floor(content_words(query or ""), st.min_similarity + up,
                     st.sure_similarity + sure_up, known, st.recall_min_similarity + up)

    def _fact_similarity(self, query: str | None, facts: Sequence[Fact],
                         scored: Sequence[ScoredMemory]) -> dict[str, float]:
        """Each important fact's cosine with ``query``: the better of its own text's
        (``key: value``, embedded once and cached) and that of the memory it was
        extracted with, when retrieval found it (a sentence in the user's words)."""
        wanted = [f for f in facts if f.importance >= FACT_MIN_IMPORTANCE]
        if not query or not wanted:
            return {}
        by_tag: dict[str, float] = {}
        for s in scored:
            for tag in s.memory.tags:
                by_tag[tag] = max(by_tag.get(tag, 0.0), s.similarity)
        vecs = self.embedder.embed([f.text for f in wanted])
        cosines = vecs @ self.query_vector(query)
        return {f.id: max(float(c), by_tag.get(fact_tag(f.category, f.key), 0.0))
                for f, c in zip(wanted, cosines, strict=True)}

    def _score(self, user_id: str, query: str | None, session: Session | None,
               workspace: str | None, visible: tuple[str, ...], now: float
               ) -> list[ScoredMemory]:
        """The memories retrieved and scored for ``query`` (none without a query)."""
        if not query:
            return []
        qvec = self.query_vector(query)
        # Without a session, no conversation's own directives ("answer in French here")
        # apply: only the user's standing memories do.
        flt = MemoryFilter(workspaces=visible, now=now,
                           session_id=session.id if session else None,
                           scope=None if session else Scope.GLOBAL)
        return score_memories(self.store, user_id, query, qvec, flt, self.settings.weights,
                              now, shared=shared_owners(self.store, user_id, workspace, now))

    def query_vector(self, query: str) -> np.ndarray:
        """The vector of ``query`` as retrieval embeds it: its first and last
        ``QUERY_EMBED_CHARS`` characters (from the embedder's query cache when seen),
        its secrets replaced as in what it is compared with. A compile asks for it
        several times: the latest QUERY_VECTORS are kept (redacting is most of the cost
        of a query already embedded)."""
        with self._query_lock:
            kept = self._query_vectors.get(query)
            if kept is not None and kept[0] is self.sanitizer and kept[1] is self.embedder:
                self._query_vectors.move_to_end(query)
                return kept[2]
        sanitizer, embedder = self.sanitizer, self.embedder
        vec = embedder.embed_query(v.excerpt(self.redact(query), v.QUERY_EMBED_CHARS))
        with self._query_lock:
            self._query_vectors[query] = (sanitizer, embedder, vec)
            self._query_vectors.move_to_end(query)
            while len(self._query_vectors) > QUERY_VECTORS:
                self._query_vectors.popitem(last=False)
        return vec

    def redact(self, text: str) -> str:
        """``text`` with its secrets replaced by placeholders (numbered afresh)."""
        return self.sanitizer.sanitize(text).text

    def record_used(self, user_id: str, used: Sequence[Candidate]) -> None:
        """Access statistics of the memories a call injected, written by a background
        job so the call does not wait for them (docs/design.md, "Access statistics")."""
        hits = [(c.id, c.score) for c in used if c.kind not in ("fact", RECALL_KIND)]
        if hits:
            self.jobs.record_access(hits, user_id, self.now())

    def _context(
        self, user_id: str, session_id: str | None, messages: Sequence[Any] | None,
        workspace: str | None, query: str | None, context_window: int | None,
        max_response_tokens: int | None, tool_tokens: int, model: str | None,
        task_type: str | None, use_session_prompt: bool, original_history: bool = False,
    ) -> Context:
        uid = v.check_id(user_id, "user_id")
        session = self.session(session_id, uid) if session_id else None
        ws = v.check_optional_id(workspace, "workspace")
        if session is not None and ws is None:
            ws = session.workspace
        model = model or (session.model if session else None)
        window = context_window or (session.context_window if session
                                    else self.settings.default_context_window)
        system: list[dict[str, Any]] = []
        if use_session_prompt and session is not None and session.system_prompt_hash:
            text = self.store.get_system_prompt(session.system_prompt_hash)
            if text:
                system.append({"role": "system", "content": text})
        pending: list[tuple[int, NewMessage]] = []  # not-yet-stored turns, by position
        for i, raw in enumerate(messages or ()):
            new = checked_message(raw, self.settings.max_message_chars)
            if new.role in ("system", "developer"):
                system.append(as_openai(new))
            else:
                pending.append((i, new))
        if query is None:
            query = newest_user_words((m for _, m in reversed(pending)), self.redact)
        now = self.now()
        visible = visible_workspaces(ws)
        reserve = (max_response_tokens if max_response_tokens is not None
                   else (session.max_response_tokens if session
                         else self.settings.default_max_response_tokens))
        reach = history_budget_bound(window, reserve, tool_tokens)
        stored: list[Message] = []
        all_facts: list[Fact] = []
        side: Future[tuple[list[Message], list[Fact]]] | None = None
        if (session is not None and query is not None and self.store.concurrent_reads
                and not self.store.in_transaction()
                and not self.history.holds(uid, session, reach)):
            # The query is known already: the history and the facts are read in a side
            # thread (on a connection of its own) while this one embeds the query and
            # gathers memories. (Not for a history kept in memory: the facts alone are
            # one short read, and the thread's hand-offs cost more than they overlap.)
            side = aside(self.store, _history_and_facts, self, uid, session, reach, visible)
        else:
            if session is not None:
                stored = self.history.read(self.store, uid, session, reach)
                if query is None:
                    query = newest_user_words(reversed(stored))
            all_facts = self.store.get_facts(uid, workspaces=visible)
        found = self._search_aside(uid, query, now, self.settings.memory_recall)
        scored = self._score(uid, query, session, ws, visible, now)
        if session is not None and session.summary_text:
            # the session's own episodes are in its summary, given before its history
            scored = [s for s in scored if s.memory.kind != "summary"
                      or s.memory.session_id != session.id]
        if side is not None:
            stored, all_facts = side.result()
        history_ids = frozenset(m.id for m in stored)
        floor = self._floor(query, uid, lambda m: m.id in history_ids, all_facts, scored)
        fact_cands, mem_cands = _candidates(
            all_facts, scored, floor,
            self._fact_similarity(query, all_facts, scored),
            session.id if session is not None else None)
        mem_cands = with_notes(self.notes_cache.candidates(self.store, uid, visible),
                               mem_cands)
        if query and self.settings.memory_recall and floor.known:
            # Past messages, but for the history's own (this session's turns that fell
            # out of the history's reach are recalled like any other).
            mem_cands += self._recall(uid, query, scored, visible, now, floor,
                                      history=(m.id for m in stored), found=found)
        if not original_history:
            stored = [m if m.sanitized is None else replace(m, content=m.sanitized)
                      for m in stored]
        history = stored + [_transient(m, uid, session, len(stored) + i, model)
                            for i, m in pending]
        ctx = compile_context(CompileInput(
            system=system, history=history, facts=fact_cands, memories=mem_cands,
            context_window=window, max_response_tokens=reserve, tool_tokens=tool_tokens,
            session_summary=session.summary_text if session else None,
            session_summary_tokens=session.summary_token_count if session else 0,
            compressed_before=bool(session and session.summary_text),
            task_type=task_type, model=model,
            instruction_share=self.settings.instruction_share,
        ))
        used = [(i.id, i.score or 0.0) for i in ctx.report.items
                if i.section == "memory" and i.kind != RECALL_KIND]
        if used:  # access statistics are written by a job, off the request's path
            self.jobs.record_access(used, uid, now)
        return ctx


@dataclass(frozen=True, slots=True)
class Floor:
    """Which items are about a query: its content words, the two cosine floors
    (:func:`memd.engine.retrieval.relevance.related`), whether the user's history knows the
    query's words (memd.engine.retrieval.vocabulary: nothing passes when not), and the floor of
    recalled messages."""

    words: frozenset[str]
    floor: float
    sure: float
    known: bool = True
    recall: float = 0.0

    def passes(self, similarity: float, text: str) -> bool:
        return self.known and related(similarity, self.words, text, self.floor, self.sure)


def _candidates(
    all_facts: Sequence[Fact], scored: Sequence[ScoredMemory], floor: Floor,
    fact_similarity: Mapping[str, float], session_id: str | None = None,
    exclude_session: bool = False,
) -> tuple[list[Candidate], list[Candidate]]:
    """What may go into a memory block for a query: what is about it, and the rules that
    apply to every query. Precision comes before recall: an item unrelated to the query
    is noise the model reads as knowledge, so a block for an unrelated question is empty.

    - facts that are important and related to the query (``floor``), by their cosine with
      it (``fact_similarity``, by fact id);
    - memories related to the query, but those a fact says already; a procedural one
      (an instruction about a topic) too, like any memory, and a style rule
      (``STYLE_TAG``) whatever the query;
    - a session-local memory only in its own session (``session_id``).

    ``exclude_session``: leave out what was drawn from the messages of the session
    ``session_id`` (a client resending its history has them)."""
    mine = session_id if exclude_session else None
    facts = [f for f in all_facts if f.importance >= FACT_MIN_IMPORTANCE
             and (mine is None or f.metadata.get("session_id") != mine)]
    fact_tags = {fact_tag(f.category, f.key) for f in facts}
    fact_cands = [
        Candidate("fact", f.id, f.text, count_text(f.text), f.importance * f.confidence,
                  fact_similarity.get(f.id, 0.0))
        for f in facts if floor.passes(fact_similarity.get(f.id, 0.0), f.text)
    ]
    mem_cands = []
    for s in scored:
        m = s.memory
        style = STYLE_TAG in m.tags
        if (fact_tags.intersection(m.tags) or (mine is not None and m.session_id == mine)
                or (m.scope == Scope.LOCAL and m.session_id != session_id)
                or not style and not floor.passes(s.similarity, m.text)):
            continue
        rule = STYLE_RULE if style else TOPIC_RULE if m.tier == Tier.PROCEDURAL else ""
        mem_cands.append(Candidate(m.kind, m.id, m.text, m.token_count, s.score,
                                   s.similarity, rule))
    return fact_cands, mem_cands


def _history_and_facts(
    engine: Contexts, user_id: str, session: Session, reach: int,
    visible: Sequence[str],
) -> tuple[list[Message], list[Fact]]:
    with engine.store.read_batch():  # one connection for both reads
        return (engine.history.read(engine.store, user_id, session, reach),
                engine.store.get_facts(user_id, workspaces=tuple(visible)))


def _transient(
    m: NewMessage, user_id: str, session: Session | None, turn: int, model: str | None
) -> Message:
    """A not-yet-stored message in Message form, so the compiler treats it like history."""
    body = as_openai(m)
    return Message(
        id=f"pending-{turn}", session_id=session.id if session else "", user_id=user_id,
        turn_index=10**9 + turn, role=m.role, content=m.content,
        token_count=message_tokens(body, model), created_at=0.0, name=m.name,
        tool_calls=m.tool_calls, tool_call_id=m.tool_call_id,
        metadata={"pending": True},
    )
