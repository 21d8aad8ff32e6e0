"""The Store roles that hold what users said: sessions, messages, memories, facts, the
forgotten digests, recurring paragraphs, the sessions of answers kept upstream and
the objects of context virtualization (composed into :class:`memd.backends.base.Store`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from memd.context_objects import (
    AdmissionDecision,
    ContextObject,
    Fault,
    FidelityTransition,
    ObjectSummaries,
)
from memd.types import (
    Fact,
    Found,
    Memory,
    MemoryFilter,
    Message,
    NewMessage,
    ParagraphSeen,
    Session,
)

# A vector as callers hand it in: a numpy array (what the embedders return) or floats.
Vector = Sequence[float] | np.ndarray
# A memory's access: (memory_id, relevance), or (memory_id, relevance summed, accesses).
AccessHit = tuple[str, float] | tuple[str, float, int]


class SessionStore(Protocol):
    """Sessions and their system prompts."""

    def create_session(self, session: Session) -> Session: ...

    def get_session(self, user_id: str, session_id: str) -> Session | None: ...

    def get_sessions(self, user_id: str, session_ids: Sequence[str]) -> list[Session]:
        """The user's sessions of these ids, in no particular order (an unknown id, or
        another user's session, adds none)."""
        ...

    def list_sessions(
        self, user_id: str, limit: int = 50, *, after: tuple[float, str] | None = None,
        workspace: str | None = None, client: str | None = None,
    ) -> list[Session]:
        """The user's sessions, newest first (then by id); ``after``: only those after
        the session of that (created_at, id) in this order (a page's cursor);
        ``workspace`` ("" for none) and ``client`` (the client family its identity
        names, else the ``client`` of its metadata: an imported history's) filter."""
        ...

    def update_session(self, user_id: str, session_id: str, **changes: Any) -> None:
        """Set plain columns (status, summary_text, summary_token_count, expires_at,
        metadata, updated_at). Counters only move through :meth:`append_messages` and
        :meth:`add_session_usage`."""
        ...

    def set_session_title(self, user_id: str, session_id: str, title: str, *,
                          replace: bool = False) -> bool:
        """Set the session's title if it has none yet (with ``replace``, whatever it
        had); whether a title was written (False for a titled session or none)."""
        ...

    def add_session_usage(
        self, user_id: str, session_id: str, prompt_tokens: int, completion_tokens: int,
        cost_microcents: int, now: float,
    ) -> None: ...

    def register_system_prompt(self, prompt_hash: str, text: str, token_count: int) -> None:
        """Store a system prompt's text once under its hash (idempotent)."""
        ...

    def get_system_prompt(self, prompt_hash: str) -> str | None: ...

    def expire_sessions(self, now: float) -> int: ...

    def session_users(self) -> list[str]:
        """Every user id that owns at least one session (for sweeps)."""
        ...


class MessageStore(Protocol):
    """A session's messages: append-only, searchable by vector and keyword."""

    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None, expires_at: float | None = None,
    ) -> list[Message]:
        """Append messages with the next turn indexes and bump the session counters,
        atomically; ``expires_at``, when given, becomes the session's expiry (activity
        keeps a session alive). Raises NotFound if the session is not this user's."""
        ...

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        """The user's stored messages whose chain_hash is among ``chain_hashes``."""
        ...

    def last_chain_hash(self, user_id: str, session_id: str) -> str | None:
        """The chain hash of the session's newest message (None: no message, or one
        stored without a chain hash), read without the message: what an append
        continues the chain from."""
        ...

    def get_messages(
        self, user_id: str, session_id: str, *, active_only: bool = False,
        after_turn: int | None = None, before_turn: int | None = None,
        limit: int | None = None, newest_first: bool = False,
    ) -> list[Message]: ...

    def messages_at(self, user_id: str, turns: Sequence[tuple[str, int]]) -> list[Message]:
        """The user's messages at these places, (session_id, turn_index) each, in no
        particular order; a place without a message adds none."""
        ...

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        """The session's active messages, newest first, as long as the tokens of the
        messages newer than each are at most ``token_budget`` (so the first message
        that crosses the budget is the last one returned); looks at the ``limit``
        newest active messages (before ``before_turn``) at most. A negative token count
        counts as 0."""
        ...

    def get_message(self, user_id: str, message_id: str) -> Message | None: ...

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        """Mark messages compressed into ``summary_id`` and raise the session's
        history_version (every change to stored messages but an append must)."""

    def set_message_embeddings(
        self, user_id: str, items: Sequence[tuple[str, Vector]]
    ) -> None: ...

    def messages_missing_embedding(self, user_id: str, limit: int) -> list[Message]: ...

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        """The ``k`` nearest embedded messages by cosine; pairs of (message, similarity)."""
        ...

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        """Full-text matches; pairs of (message, relevance in [0, 1], higher is better)."""
        ...

    def get_message_vectors(self, user_id: str, message_ids: Sequence[str]
                            ) -> dict[str, Vector]:
        """The stored vectors of the user's messages among ``message_ids`` (a message not
        embedded yet, pruned, unknown or another user's has none)."""
        ...

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        """Delete every message, with its vector and full-text row, of the user's sessions
        whose newest message is older than ``before`` (the retention sweep); the sessions
        stay, their history_version raised. Returns (messages, sessions)."""
        ...


class MemoryStore(Protocol):
    """Memories, their entity links and access stats."""

    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory: ...

    def get_memory(self, user_id: str, memory_id: str) -> Memory | None: ...

    def find_memory_id(self, memory_id: str) -> tuple[str, Memory] | None:
        """Look a memory up by id alone (CLI ``forget ID``); returns (user_id, memory)."""
        ...

    def find_by_hash(
        self, user_id: str, workspace: str | None, content_hash: str
    ) -> Memory | None:
        """The active memory with this content hash in exactly this workspace."""
        ...

    def update_memory(
        self, user_id: str, memory_id: str, vector: Vector | None = None, **changes: Any
    ) -> Memory:
        """Change fields of a memory (text, content_hash, token_count, tier, scope,
        confidence, importance, is_active, is_validated, superseded_by, expires_at,
        tags, metadata, updated_at); a new ``vector`` replaces the stored one."""
        ...

    def delete_memory(self, user_id: str, memory_id: str) -> bool:
        """Remove a memory and every derived copy (vector, full-text row, entity links)."""
        ...

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        """Memories passing ``flt``, newest first by ``order`` (created_at,
        updated_at, access_count, importance)."""
        ...

    def count_memories(self, user_id: str, flt: MemoryFilter) -> int: ...

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        """The ``k`` nearest memories passing ``flt``; pairs of (memory, cosine)."""
        ...

    def keyword_memories(
        self, user_id: str, query: str, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        """Full-text matches passing ``flt``; (memory, relevance in [0, 1])."""
        ...

    def memories_by_entities(
        self, user_id: str, entities: Sequence[str], k: int, flt: MemoryFilter
    ) -> list[Memory]: ...

    def get_memory_vectors(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, Vector]:
        ...

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        """Retrieval's candidate channels over ``user_id``'s memories passing ``flt``, by
        id: the ``knn_k`` nearest to ``vector``, the ``keyword_k`` best full-text matches
        of ``query``, up to ``entity_k`` linked to ``entities`` and the ``frequent_k``
        most accessed global ones; each with its true cosine with ``vector`` whichever
        channel found it. :func:`compose_candidates` is the reference."""
        ...

    def record_access(self, user_id: str, hits: Sequence[AccessHit], now: float) -> None:
        """Bump access_count, last_accessed_at and relevance_accumulator for
        (memory_id, relevance) pairs, or (memory_id, relevance summed, accesses) triples
        that stand for that many accesses at once."""
        ...

    def max_access_count(self, user_id: str) -> int: ...

    def memory_users(self) -> list[str]:
        """Every user id that owns at least one memory (for sweeps)."""
        ...

    def link_entities(self, user_id: str, memory_id: str, entities: Sequence[str]) -> None:
        ...

    def iter_memories(self, user_id: str | None = None) -> Iterator[Memory]: ...

    def expire_memories(self, now: float) -> int:
        """Deactivate every active memory whose expires_at has passed; returns count."""
        ...

    def delete_session_working_memory(self, user_id: str, session_id: str) -> int: ...


class VectorCache(Protocol):
    """Vectors a store keeps in its own process, in front of its index."""

    def warm_vectors(self, user_id: str) -> int:
        """Load the user's vectors into the store's in-process cache now, so that their
        first search after a start does not pay for the load; a search meanwhile waits
        for it or reads the index, with the same answer. Returns how many of the user's
        vectors the cache holds (0 on a store whose searches run in the database)."""
        ...


class FactStore(Protocol):
    """Facts: keyed values that supersede one another."""

    def get_facts(
        self, user_id: str, workspaces: tuple[str, ...] | None = None,
        active_only: bool = True, category: str | None = None, key: str | None = None,
    ) -> list[Fact]: ...

    def insert_fact(self, fact: Fact) -> Fact: ...

    def supersede_fact(self, user_id: str, fact_id: str, by: str, now: float) -> None: ...

    def delete_facts(self, user_id: str, fact_ids: Sequence[str]) -> int:
        """Delete these facts (any version); how many there were."""
        ...


class ForgottenStore(Protocol):
    """What a user made memd forget, as digests only
    (``memd.engine.learning.write.forgotten_digest``): extraction skips what is here, so a
    forgotten item never comes back from a later extraction of the same message."""

    def add_forgotten(self, user_id: str, digests: Sequence[str], now: float) -> None:
        """Remember these digests (one already there is kept)."""
        ...

    def forgotten(self, user_id: str, digests: Sequence[str]) -> set[str]:
        """Those of ``digests`` that the user made memd forget."""
        ...


class ParagraphStore(Protocol):
    """Hashes of the long paragraphs seen in a user's messages, and the sessions they were
    seen in (``memd.engine.learning.recurring``): one that recurs across sessions is client text."""

    def see_paragraphs(self, user_id: str, session_id: str, message_id: str,
                       keys: Sequence[str], now: float) -> list[ParagraphSeen]:
        """Record that a message of ``session_id`` holds these paragraphs; each one as
        seen now, in the order given (a repeated key once)."""
        ...

    def recurring_paragraphs(self, user_id: str, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` seen in more than one session."""
        ...


class ResponseStore(Protocol):
    """The session of each answer a model server keeps by its id (an OpenAI Responses
    ``resp_…``): a request that continues it names only the id."""

    def link_response(self, user_id: str, response_id: str, session_id: str,
                      now: float) -> None:
        """Remember that ``response_id`` answered a turn of ``session_id`` (an id linked
        already keeps its session)."""
        ...

    def response_session(self, user_id: str, response_id: str) -> str | None:
        """The session ``response_id`` answered a turn of, or None."""
        ...


class ContextObjectStore(Protocol):
    """The objects of context virtualization (``memd.engine.virtual``): a session's tool
    results held at a fidelity, and every change of fidelity."""

    def add_context_objects(self, objects: Sequence[ContextObject]) -> int:
        """Store these objects; one already stored (same user, session and object id)
        stays as it is. Returns how many were new."""
        ...

    def context_objects(self, user_id: str, session_id: str) -> list[ContextObject]:
        """The session's objects, oldest first."""
        ...

    def set_object_summaries(self, user_id: str, session_id: str, object_id: str,
                             summaries: ObjectSummaries, now: float) -> bool:
        """Replace the object's detailed and compact texts with a helper's, only while
        it is held whole: a text once sent at a lower fidelity stays the text sent
        (the prompt's prefix holds). Whether it was replaced."""
        ...

    def apply_transitions(self, user_id: str, session_id: str,
                          transitions: Sequence[FidelityTransition],
                          superseded: Mapping[str, str], now: float) -> None:
        """Hold each transition's object at its ``to_fidelity`` and record the
        transition; ``superseded`` maps an object id to the id of the later object of
        the same source that supersedes it."""
        ...

    def fidelity_transitions(self, user_id: str, session_id: str) -> list[FidelityTransition]:
        """The session's transitions, oldest first."""
        ...

    def add_admissions(self, user_id: str, decisions: Sequence[AdmissionDecision]) -> None:
        """Record the admission of objects first seen under pressure; an object's first
        decision stays (it is admitted once)."""
        ...

    def admissions(self, user_id: str, session_id: str) -> list[AdmissionDecision]:
        """The session's admission decisions, oldest first."""
        ...

    def add_fault(self, user_id: str, fault: Fault) -> None:
        """Record a fault served in the session ``fault.session_id``."""
        ...

    def faults(self, user_id: str, session_id: str) -> list[Fault]:
        """The session's faults, oldest first."""
        ...
