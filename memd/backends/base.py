"""The Store protocol: everything the engine needs from a storage backend, one protocol
per role (sessions, messages, memories, facts, calls and usage, accounts, jobs, erasure,
the embedding cache) composed into :class:`Store`.

A backend is one package that implements this protocol over a real database and returns
the shared dataclasses of :mod:`memd.types`. It knows nothing of HTTP or models: vectors
arrive already computed (unit-length float32, ``dim`` entries), token counts arrive
already counted. Every method that takes a ``user_id`` touches only that user's rows,
which is what lets PostgreSQL route each call to one hash partition.

Writes that belong together run inside ``with store.transaction():``; a method called
outside one runs in its own transaction. Driver errors leave a backend as
:class:`memd.errors.StorageError` (or a more precise memd error), never raw.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

# Helpers both backends share, importable from here too.
from memd.backends.common.candidates import access_totals, compose_candidates
from memd.backends.common.fulltext import KEYWORD_INDEX_CHARS, keyword_part
from memd.types import (
    ApiKey,
    ContextObject,
    Fact,
    FidelityTransition,
    Found,
    Job,
    Memory,
    MemoryFilter,
    Message,
    NewMessage,
    ParagraphSeen,
    Session,
    Usage,
    User,
)

# A vector as callers hand it in: a numpy array (what the embedders return) or floats.
Vector = Sequence[float] | np.ndarray
# A memory's access: (memory_id, relevance), or (memory_id, relevance summed, accesses).
AccessHit = tuple[str, float] | tuple[str, float, int]


class Lifecycle(Protocol):
    """Opening, transactions and how reads are grouped."""

    dim: int
    #: Whether reads from different threads run in parallel (PostgreSQL: a pooled
    #: connection each) rather than taking turns (SQLite: one connection).
    concurrent_reads: bool

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[None]:
        """Group writes atomically; nests (inner blocks join the outer transaction)."""
        ...

    def in_transaction(self) -> bool:
        """Whether this thread is inside ``transaction()``: its uncommitted writes are
        invisible to other threads (and on SQLite, which has one connection, another
        thread waits for the transaction to end), so the engine does its reads here
        rather than in side threads."""
        ...

    def side_reads(self) -> AbstractContextManager[None]:
        """Mark the reads of this thread, one of the engine's worker threads, as side
        reads. A request thread may hold a connection for its read batch while it waits
        for its worker, so on PostgreSQL side reads come from a pool of their own: with
        one shared pool, workers could wait for ever once request threads hold every
        connection."""
        ...

    def read_batch(self) -> AbstractContextManager[None]:
        """Run a group of reads (a context compile, a search) as one unit of work: on
        PostgreSQL one pooled connection instead of one per read, each read a statement
        of its own in one round trip (for an authenticated user, sent with row-level
        security's settings, which last until its end). A write inside is a transaction
        of its own that commits without waiting for its flush, so it is for best-effort
        bookkeeping (the access stats a compile enqueues): a server crash may lose the
        last ones, as SQLite's synchronous=NORMAL may. Inside a transaction it joins
        that transaction, which keeps its durability."""
        ...

    def schema_version(self) -> int: ...

    def unfinished_copy(self) -> list[str]:
        """The tables a ``memd migrate`` into this database has not finished copying (the
        run's record of a copy under way is still there, or their vector indexes, dropped
        for the bulk copy, are not built again yet); empty when there is none."""
        ...

    def check_row_security(self) -> None:
        """Raise :class:`memd.errors.StorageError` unless the database enforces what
        authenticated mode relies on beyond memd's own filters (PostgreSQL: the role and
        the row-level security policies); a store without row security checks nothing."""
        ...

    def ensure_history_partitions(self, now: float, months: int = 3) -> int:
        """Make the history's monthly partitions from ``now``'s month for ``months``
        months where missing (PostgreSQL; a store without them makes none); returns how
        many were made. Runs outside any transaction (scheduled: memd.engine.schedule)."""
        ...


class SessionStore(Protocol):
    """Sessions and their system prompts."""

    def create_session(self, session: Session) -> Session: ...

    def get_session(self, user_id: str, session_id: str) -> Session | None: ...

    def list_sessions(self, user_id: str, limit: int = 50) -> list[Session]: ...

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
    """What a user made memd forget, as digests only (``memd.engine.write.forgotten_digest``):
    extraction skips what is here, so a forgotten item never comes back from a later
    extraction of the same message."""

    def add_forgotten(self, user_id: str, digests: Sequence[str], now: float) -> None:
        """Remember these digests (one already there is kept)."""
        ...

    def forgotten(self, user_id: str, digests: Sequence[str]) -> set[str]:
        """Those of ``digests`` that the user made memd forget."""
        ...


class ParagraphStore(Protocol):
    """Hashes of the long paragraphs seen in a user's messages, and the sessions they were
    seen in (``memd.engine.recurring``): one that recurs across sessions is client text."""

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


class CallStore(Protocol):
    """Calls (what the proxy injected into each chat call) and token usage."""

    def record_call(
        self, call_id: str, user_id: str, session_id: str | None, workspace: str | None,
        model: str | None, now: float, report: dict[str, Any], status: int | None = None,
    ) -> None: ...

    def finish_call(self, call_id: str, status: int, metadata: dict[str, Any],
                    report: dict[str, Any] | None = None) -> None:
        """Close a call: its status and metadata, and ``report`` in place of the one
        recorded when it started, where what was sent changed (a retry without memory)."""
        ...

    def get_call(self, user_id: str, call_id: str) -> dict[str, Any] | None: ...

    def list_calls(
        self, user_id: str, *, session_id: str | None = None, workspace: str | None = None,
        since: float | None = None, until: float | None = None, limit: int = 50,
    ) -> list[dict[str, Any]]:
        """The user's calls, newest first (ties by call id, descending), each shaped as
        :meth:`get_call` returns it; only those of ``session_id``, of ``workspace``, made
        at or after ``since`` and before ``until`` where given (``workspace=None`` is no
        filter, not the calls made outside any workspace)."""
        ...

    def record_usage(self, usage: Usage) -> None: ...

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]: ...


class AccountStore(Protocol):
    """Users, API keys and workspace members (authenticated mode; backends/accounts.py)."""

    def create_user(self, user_id: str, name: str, now: float) -> User: ...

    def get_user(self, user_id: str) -> User | None: ...

    def list_users(self) -> list[User]: ...

    def add_api_key(self, key_id: str, user_id: str, key_hash: str, label: str,
                    now: float) -> ApiKey: ...

    def api_key_user(self, key_hash: str, now: float) -> str | None:
        """The user of the live (unrevoked) key with this SHA-256, else None."""
        ...

    def list_api_keys(self, user_id: str | None = None) -> list[ApiKey]: ...

    def revoke_api_key(self, key_id: str, now: float) -> bool: ...

    def add_workspace_member(self, workspace: str, user_id: str, now: float) -> bool: ...

    def remove_workspace_member(self, workspace: str, user_id: str) -> bool: ...

    def workspace_members(self, workspace: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job as the queue lists it: ``state`` is ``pending`` or ``dead``; ``updated_at``
    is when it last changed (enqueued, claimed for an attempt, or retried)."""

    job: Job
    state: str
    updated_at: float


class JobQueue(Protocol):
    """The durable job queue."""

    def enqueue_job(
        self, kind: str, payload: dict[str, Any], user_id: str | None, now: float,
        run_after: float | None = None,
    ) -> str: ...

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        """Take up to ``limit`` due jobs; a claimed job reappears after its lease
        expires unless completed, so a crash loses nothing."""
        ...

    def enqueue_job_once(
        self, job_id: str, kind: str, payload: dict[str, Any], user_id: str | None,
        now: float, run_after: float | None = None,
    ) -> bool:
        """Enqueue a job under a chosen id unless a job (pending or dead) holds it: False
        then. Several daemons enqueueing the same scheduled work make one job."""
        ...

    def reschedule_job(self, job_id: str, attempts: int, run_after: float,
                       payload: dict[str, Any], now: float) -> bool:
        """Put a claimed job back in the queue, due at ``run_after`` with ``payload`` and
        no attempts made, if it is still the claim that saw ``attempts`` (a later claim,
        after the lease ran out, counts one more); False otherwise. A recurring job
        settles each run this way instead of completing."""
        ...

    def complete_job(self, job_id: str) -> bool:
        """Delete a done job; False when it was gone already (completed by an earlier
        run of it, which a handler inside a transaction uses to apply its effect once)."""
        ...

    def fail_job(self, job_id: str, error: str, retry_at: float | None) -> None:
        """Record a failure; ``retry_at=None`` parks the job as dead."""
        ...

    def pending_jobs(self) -> int:
        """How many jobs wait to run, the schedule's recurring ones (kind ``schedule``,
        which stay queued for good: memd.engine.schedule) aside."""
        ...

    def list_jobs(self, state: str, user_id: str | None = None,
                  limit: int = 100) -> list[QueuedJob]:
        """The jobs in ``state`` (``pending`` or ``dead``), oldest first; only
        ``user_id``'s when given."""
        ...

    def get_job(self, job_id: str) -> QueuedJob | None: ...

    def retry_dead_jobs(self, now: float, user_id: str | None = None,
                        job_id: str | None = None) -> int:
        """Put dead jobs (only ``user_id``'s, only ``job_id`` when given) back in the
        queue, due now with no attempts made; returns how many. The last error stays
        until the next run replaces it."""
        ...


class ErasureStore(Protocol):
    """Erasure: a user, or one session, leaves no row behind (memd.backends.common.erase
    lists what goes)."""

    def erase_user(self, user_id: str, cached: Sequence[str] = (),
                   anonymize_usage: bool = False) -> dict[str, int]:
        """Delete every row of ``user_id`` in every table, its account included, the
        system prompts only its sessions used, and the embedding cache's entries of
        ``cached`` (the embedder's hashes of the user's texts), in one transaction;
        the rows deleted by table. With ``anonymize_usage`` the usage rows stay, with
        nothing that names the user (``usage_log_anonymized`` counts them). Under
        row-level security only the acting user."""
        ...

    def erase_session(self, user_id: str, session_id: str, cached: Sequence[str] = (),
                      anonymize_usage: bool = False) -> dict[str, int]:
        """Delete a session, its messages and what derives from them (memories made in
        it or from its messages, facts its messages stated, its calls, usage and jobs),
        its system prompt if no other session uses it, and the cache entries of
        ``cached``, in one transaction; the rows deleted by table."""
        ...

    def erase_message(self, user_id: str, session_id: str, message_id: str,
                      cached: Sequence[str] = ()) -> dict[str, int]:
        """Delete one message of a session and what derives from it (memories made from
        it, facts it stated, its jobs) and the cache entries of ``cached``, in one
        transaction, raising the session's history_version; the rows deleted by table."""
        ...

    def delete_call(self, user_id: str, call_id: str) -> bool:
        """Delete one of the user's call reports; False when there is none."""
        ...

    def prune_messages(self, user_id: str, message_ids: Sequence[str]) -> list[Message]:
        """Flag the user's messages of ``message_ids`` pruned, in one transaction: kept
        as stored for their owner (``get_messages``, exports), never read again by memd
        (their vector and full-text rows go; history windows, the search channels and
        the embedding backfill skip them), their sessions' history_version raised.
        Returns the messages it flagged (not those already flagged or not the user's),
        in session and turn order."""
        ...

    def scrub(self) -> None:
        """Leave no deleted row readable in the store's files, as far as the store can
        at each erasure (SQLite: merge the full-text indexes, checkpoint and truncate the
        WAL, VACUUM; PostgreSQL: nothing, see :meth:`deep_scrub`). Outside a
        transaction."""
        ...

    def deep_scrub(self) -> list[str]:
        """What ``memd forget --scrub`` runs: rewrite the store's files so that no
        deleted row's bytes remain in them, however long it takes and whatever it locks
        (SQLite: :meth:`scrub`; PostgreSQL: memd.backends.postgres.scrub). Returns what
        was done and what it could not reach, one line each."""
        ...


class EmbeddingCache(Protocol):
    """Embeddings by content hash (float32 bytes), per model."""

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]: ...

    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None: ...


@runtime_checkable
class Store(Lifecycle, SessionStore, MessageStore, MemoryStore, FactStore, ForgottenStore,
            ParagraphStore, ResponseStore, ContextObjectStore, CallStore, AccountStore,
            JobQueue, ErasureStore, EmbeddingCache, Protocol):
    """Storage for sessions, messages, memories, facts, entities, usage and jobs: every
    role above, over one database."""

__all__ = [
    "KEYWORD_INDEX_CHARS", "AccessHit", "AccountStore", "CallStore", "ContextObjectStore",
    "EmbeddingCache",
    "ErasureStore", "FactStore", "ForgottenStore", "JobQueue", "Lifecycle", "MemoryStore",
    "MessageStore", "ParagraphStore", "QueuedJob", "ResponseStore", "SessionStore", "Store",
    "Vector",
    "access_totals",
    "compose_candidates", "keyword_part",
]
