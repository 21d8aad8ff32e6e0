"""The Store roles that serve memd itself: calls and usage, accounts, the job queue,
erasure and the embedding cache (composed into :class:`memd.backends.base.Store`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from memd.types import ApiKey, Job, Message, QueuedJob, Usage, UsageTotal, User


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

    def usage_totals(
        self, user_id: str, group_by: str, *, since: float | None = None,
        until: float | None = None,
    ) -> list[UsageTotal]:
        """The user's usage summed per ``group_by`` (``day``: UTC days since the epoch,
        ``model``, ``workspace`` ("" for none) or ``client``, as the usage's metadata
        names it; None where it names none), ordered by that key; only usage recorded at
        or after ``since`` and before ``until`` where given. ValueError for another key."""
        ...

    def set_paused(self, user_id: str, workspace: str, paused: bool, now: float) -> bool:
        """Pause (or resume) learning from the user's calls in ``workspace`` ("": in
        every workspace); whether that changed anything (False: already so)."""
        ...

    def pauses(self, user_id: str) -> dict[str, float]:
        """Where the user paused learning: workspace ("" for all) -> when."""
        ...


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
        which stay queued for good: memd.engine.background.schedule) aside."""
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
