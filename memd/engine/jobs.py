"""The durable job queue's runner: background work that must survive a restart.

Jobs live in the store (a table), are claimed with a lease (a crashed worker's jobs come
back when the lease runs out) and are deleted when done. A failing job is retried with
exponential backoff, then parked as dead with its error, never silently dropped.

Kinds: ``embed_messages`` (vectors for new messages), ``ingest`` (a memory the inline
extractor found, through the full write path) and ``access`` (retrieval statistics of
a compiled context).

A compile's ``access`` job is enqueued off the request's critical path where the store
reads concurrently (PostgreSQL): in a side thread, on a connection of its own, without
waiting for a durable commit, the same guarantee as the job's own commit on SQLite. The
runner waits for those enqueues before it claims jobs, and so does closing the engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from memd.engine.retrieve import aside
from memd.engine.write import MemoryDraft, ingest
from memd.errors import MemdError
from memd.types import Job, Provenance, Scope, Tier

if TYPE_CHECKING:
    from memd.engine.memory import Memd

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BATCH = 64


class JobRunner:
    def __init__(self, memd: Memd) -> None:
        self.memd = memd
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        self.handlers: dict[str, Callable[[Job], None]] = {
            "embed_messages": self._embed_messages,
            "ingest": self._ingest,
            "access": self._access,
        }

    def enqueue_aside(self, kind: str, payload: dict[str, Any], user_id: str,
                      now: float) -> None:
        """Enqueue a job without holding up the caller where the store allows it (see
        the module docstring); otherwise, and inside a caller's transaction, in line."""
        store = self.memd.store
        if not store.concurrent_reads or store.in_transaction():
            store.enqueue_job(kind, payload, user_id, now)
            return

        def enqueue() -> None:
            with store.read_batch():  # its own transaction, not waiting for the WAL flush
                store.enqueue_job(kind, payload, user_id, now)

        def settled(future: Future[None]) -> None:
            with self._lock:
                self._pending.discard(future)
            if future.exception() is not None:  # statistics only: say so, go on
                log.warning("a %s job was not enqueued: %s", kind, future.exception())

        future = aside(store, enqueue)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(settled)

    def flush(self) -> None:
        """Wait for the enqueues still in flight."""
        with self._lock:
            pending = list(self._pending)
        wait(pending)

    def run_due(self, limit: int = 1000) -> int:
        """Run up to ``limit`` due jobs; returns how many completed."""
        self.flush()
        done = 0
        while done < limit:
            jobs = self.memd.store.claim_jobs(self.memd.now(), min(BATCH, limit - done))
            if not jobs:
                break
            for job in jobs:
                handler = self.handlers.get(job.kind)
                try:
                    if handler is None:
                        raise KeyError(f"unknown job kind {job.kind!r}")
                    handler(job)
                except (MemdError, KeyError, ValueError, TypeError) as exc:
                    retry = None
                    if job.attempts < MAX_ATTEMPTS:
                        retry = self.memd.now() + 2.0 ** job.attempts
                    self.memd.store.fail_job(job.id, f"{type(exc).__name__}: {exc}", retry)
                    continue
                self.memd.store.complete_job(job.id)
                done += 1
        return done

    def _embed_messages(self, job: Job) -> None:
        assert job.user_id is not None
        store = self.memd.store
        msgs = [m for m in (store.get_message(job.user_id, i) for i in job.payload["ids"])
                if m is not None and m.content]
        if msgs:
            vecs = self.memd.embedder.embed([m.content or "" for m in msgs])
            store.set_message_embeddings(job.user_id, list(zip([m.id for m in msgs], vecs,
                                                               strict=True)))

    def _ingest(self, job: Job) -> None:
        p: dict[str, Any] = job.payload
        draft = MemoryDraft(
            user_id=p["user_id"], text=p["text"], workspace=p.get("workspace"),
            session_id=p.get("session_id"), tier=Tier(p["tier"]), scope=Scope.GLOBAL,
            provenance=Provenance(p["provenance"]), provenance_message_id=p.get("message_id"),
            confidence=float(p["confidence"]), importance=float(p["importance"]),
            tags=tuple(p.get("tags", ())), entities=tuple(p.get("entities", ())),
            fact_accepted=p.get("fact_accepted"),
        )
        ingest(self.memd.store, self.memd.embedder, self.memd.settings, draft, self.memd.now())

    def _access(self, job: Job) -> None:
        assert job.user_id is not None
        hits = [(str(mid), float(rel)) for mid, rel in job.payload["hits"]]
        self.memd.store.record_access(job.user_id, hits, self.memd.now())
