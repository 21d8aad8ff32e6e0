"""The durable job queue's runner: background work that must survive a restart.

Jobs live in the store (a table), are claimed with a lease (a crashed worker's jobs come
back when the lease runs out) and are deleted when done. A failing job is retried with
exponential backoff, then parked as dead with its error, never silently dropped.

A job can run twice: its process may die after the job's effect committed but before
the job was deleted, and its lease then runs out. So a job whose effect is not idempotent
(``ingest``, ``access``) deletes itself in the transaction that applies the effect, and
applies it only if that delete found the job: effect and completion commit together or
not at all, and a second run (after a crash, or one whose lease ran out while it worked)
finds the job gone, waiting on its row lock if need be, and does nothing. The write
path's dedupe by content hash is not enough for ``ingest``: it finds only an active
memory, so a re-run would count one more access to the memory the first run inserted,
or write again the superseded copy a merge left; an ``access`` job would count its hits
twice. ``embed_messages`` needs none of this: it writes the same vectors again.

Kinds: ``embed_messages`` (vectors for new messages), ``ingest`` (a memory the inline
extractor found, through the full write path), ``llm_extract`` (the helper model's reading
of a user message, :mod:`memd.engine.learning.extract.llm`; its payload is the message's id, the
text is read from the store), ``title`` (the helper's title for a session, from the
message its rule-based title came from, :mod:`memd.engine.conversation.titles`), ``compact`` (a
session's oldest turns folded into an episodic summary, :mod:`memd.engine.background.compact`;
it deletes itself with its effect, as ``ingest`` does, and queues ``consolidate``:
alike episodes folded into a pattern, :mod:`memd.engine.background.consolidate`) and ``access``
(retrieval statistics of a compiled context), ``embed_passages`` (the passages of
messages whose vectors an import wrote first, :meth:`JobRunner.passages_later`),
``summarize_object`` (the helper's
detailed and compact texts of a context object, :mod:`memd.engine.virtual.summaries`);
``schedule`` and ``sweep``, the scheduled
maintenance (:mod:`memd.engine.background.schedule`).
A handler that returns True has settled its job itself (a
recurring job puts itself back in the queue): the runner does not delete it.

A compile's access statistics (which memories went into its context) are gathered in
memory, per user, and written as one ``access`` job per user at most every
``ACCESS_WINDOW`` seconds (or ``ACCESS_HITS`` hits), each memory once with its accesses
counted: one job per user and window instead of one per compile, so a busy daemon's
worker claims, runs and deletes one job a second rather than one per request, and
updates each memory's statistics once. The enqueue runs off the request's
critical path where the store writes concurrently (PostgreSQL): in a side thread, on a
connection of its own, as the user who made the compiles, without waiting for a durable
commit. On SQLite it runs in line, in the compile that closes the window (a side thread
would write on the store's one connection, under its lock, and a flush in a caller's
transaction would wait for it for ever). Running the
jobs (the daemon's worker, every ``job_interval``) and closing the engine write what is
gathered first, then wait for enqueues in flight, so no access is lost or counted late
by them. A crash loses at most one window of statistics, as an unflushed commit (without
the WAL flush wait) already could. A compile inside a caller's transaction enqueues its
job in line, in that transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memd.auth import acting_as, current_actor
from memd.backends.base import AccessHit, access_totals
from memd.engine.background import compact, consolidate
from memd.engine.background.schedule import Scheduler
from memd.engine.conversation.titles import helper_title, rule_title
from memd.engine.learning import recurring
from memd.engine.learning.extract import extract
from memd.engine.learning.extract.llm import (
    IMPORTANCE,
    ExtractionFailed,
    helper_from_settings,
    llm_extract,
    memory_text,
    new_facts,
)
from memd.engine.learning.write import (
    MemoryDraft,
    fact_item,
    fact_tag,
    forgotten_items,
    ingest,
    memory_item,
    upsert_fact,
)
from memd.engine.retrieval.passages import passages
from memd.engine.retrieval.retrieve import aside
from memd.engine.validate import EMBED_CHARS, excerpt
from memd.engine.virtual import summaries
from memd.errors import Conflict, InvalidInput, NotFound
from memd.types import Job, Message, Provenance, QueuedJob, Scope, Tier

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.config import Settings
    from memd.models.embedder import CachedEmbedder
    from memd.models.helper import HelperModel

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
# A helper that failed a message twice in a job (it asks twice) will fail it again: the
# job is parked after its second attempt, where the jobs list shows why.
MAX_ATTEMPTS_BY_KIND = {"llm_extract": 2, "title": 2, summaries.JOB: 2}
BATCH = 64
PASSAGE_JOB_IDS = 256  # messages an ``embed_passages`` job embeds the passages of
ACCESS_WINDOW = 1.0  # seconds a user's access statistics are gathered before their job
ACCESS_HITS = 2000  # or this many hits, whichever comes first
JOB_STATES = ("pending", "dead")


def embedded_texts(messages: Sequence[Message]) -> tuple[list[str], list[str]]:
    """What ``embed_messages`` embeds for ``messages``: each one's text as stored
    vectors read it (its secrets replaced, cut to ``EMBED_CHARS``), and, for the
    embedder's cache, the passages of the user's messages, which recall reads there
    (memd.engine.retrieval.passages). A bulk writer embeds these first, in one call, and the job
    then finds them all in the cache."""
    kept = [m for m in messages if m.safe_text]
    return message_texts(kept), passage_texts(kept)


def message_texts(messages: Sequence[Message]) -> list[str]:
    """The first half of :func:`embedded_texts`, without the passages: what a writer
    that leaves them for later (``passages_later``) embeds first."""
    return [excerpt(m.safe_text or "", EMBED_CHARS) for m in messages if m.safe_text]


def passage_texts(messages: Sequence[Message]) -> list[str]:
    """The passages of ``messages`` that recall reads from the embedder's cache."""
    return [p for m in messages if m.role == "user" for p in passages(m.safe_text or "")]


class JobRunner:
    """Runs the queue's jobs on the engine's parts (it does not know the engine)."""

    def __init__(self, store: Store, embedder: CachedEmbedder, settings: Settings,
                 now: Callable[[], float]) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.now = now
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()
        # Access hits gathered by (acting user, user): by memory (accesses, relevance
        # summed), and the latest `now` given.
        self._gathered: dict[tuple[str | None, str],
                             tuple[dict[str, tuple[int, float]], float]] = {}
        self._gathered_hits = 0
        self._gathered_since = time.monotonic()
        self.access_window = ACCESS_WINDOW
        # Per thread: the ids of messages whose passages wait (see passages_later).
        self._deferred = threading.local()
        # The helper model of LLM extraction: created from the settings on first use, or
        # set by the caller (tests set a scripted one).
        self.helper: HelperModel | None = None
        # LLM extraction's outcomes in this process: "messages", "facts", "failed" and
        # "rejected_<reason>" (ungrounded, category, confidence, key, malformed).
        self.llm_counts: Counter[str] = Counter()
        self.handlers: dict[str, Callable[[Job], bool | None]] = {
            "embed_messages": self._embed_messages,
            "embed_passages": self._embed_passages,
            "ingest": self._ingest,
            "access": self._access,
            "llm_extract": self._llm_extract,
            "title": self._title,
            compact.JOB: self._compact,
            consolidate.JOB: self._consolidate,
            summaries.JOB: self._summarize_object,
        }
        self.schedule = Scheduler(store, settings, now)
        self.handlers.update(self.schedule.handlers())

    def enqueue_aside(self, kind: str, payload: dict[str, Any], user_id: str,
                      now: float) -> None:
        """Enqueue a job without holding up the caller where the store allows it (see
        the module docstring); otherwise, and inside a caller's transaction, in line."""
        store = self.store
        if not store.concurrent_writes or store.in_transaction():
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

    def record_access(self, hits: list[tuple[str, float]], user_id: str, now: float) -> None:
        """A compile's access statistics: gathered, written as the user's next ``access``
        job when the window closes (see the module docstring); in line inside a caller's
        transaction."""
        if self.store.in_transaction():
            self.store.enqueue_job("access", {"hits": hits}, user_id, now)
            return
        key = (current_actor(), user_id)
        with self._lock:
            by_memory = access_totals(hits, self._gathered.get(key, ({}, now))[0])
            self._gathered[key] = (by_memory, now)
            self._gathered_hits += len(hits)
            due = (self._gathered_hits >= ACCESS_HITS
                   or time.monotonic() - self._gathered_since >= self.access_window)
            jobs = self._take_gathered() if due else []
        self._enqueue_gathered(jobs, self.enqueue_aside)

    def _take_gathered(self) -> list[tuple[str | None, str, dict[str, Any], float]]:
        """What is gathered, taken out as access jobs (acting user, user, payload, now):
        each memory once, [id, relevance summed, accesses]. The caller holds the lock."""
        taken, self._gathered = self._gathered, {}
        self._gathered_hits = 0
        self._gathered_since = time.monotonic()
        return [
            (actor, user, {"hits": [[mid, rel, n] for mid, (n, rel) in by_memory.items()]},
             latest)
            for (actor, user), (by_memory, latest) in taken.items()
        ]

    @staticmethod
    def _enqueue_gathered(jobs: list[tuple[str | None, str, dict[str, Any], float]],
                          enqueue: Callable[[str, dict[str, Any], str, float], Any]) -> None:
        """``enqueue`` each of _take_gathered's jobs, as the user who made its compiles."""
        for actor, user, payload, latest in jobs:
            with acting_as(actor):
                enqueue("access", payload, user, latest)

    def flush(self) -> None:
        """Write the access statistics gathered so far, then wait for the enqueues still
        in flight."""
        with self._lock:
            jobs = self._take_gathered()
        self._enqueue_gathered(jobs, self.store.enqueue_job)
        with self._lock:
            pending = list(self._pending)
        wait(pending)

    def run_due(self, limit: int = 1000) -> int:
        """Run up to ``limit`` due jobs; returns how many completed."""
        self.flush()
        done = 0
        while done < limit:
            jobs = self.store.claim_jobs(self.now(), min(BATCH, limit - done))
            if not jobs:
                break
            for job in jobs:
                handler = self.handlers.get(job.kind)
                try:
                    if handler is None:
                        raise KeyError(f"unknown job kind {job.kind!r}")
                    settled = handler(job)
                # Whatever a handler raises is that job's failure, recorded with it (and
                # retried, then parked as dead), never the end of the worker: one bad
                # job must not stop the others.
                except Exception as exc:
                    retry = None
                    if job.attempts < MAX_ATTEMPTS_BY_KIND.get(job.kind, MAX_ATTEMPTS):
                        retry = self.now() + 2.0 ** job.attempts
                    log.warning("job %s (%s), attempt %d, failed%s: %s: %s", job.id,
                                job.kind, job.attempts, "" if retry else "; parked as dead",
                                type(exc).__name__, exc)
                    self.store.fail_job(job.id, f"{type(exc).__name__}: {exc}", retry)
                    continue
                if settled is not True:
                    self.store.complete_job(job.id)
                done += 1
        return done

    def listed(self, state: str, user_id: str | None = None,
               limit: int = 100) -> list[QueuedJob]:
        """The jobs in ``state`` (``pending`` or ``dead``), oldest first; only
        ``user_id``'s when given."""
        if state not in JOB_STATES:
            raise InvalidInput(f"state must be one of {', '.join(JOB_STATES)}, not {state!r}")
        return self.store.list_jobs(state, user_id, limit)

    def queued_memory_texts(self, user_id: str, limit: int = 10_000) -> list[str]:
        """The texts of ``user_id``'s pending ``ingest`` jobs: what they will embed, one
        text at a time, unless a bulk writer embeds them first in one call."""
        return [q.job.payload["text"] for q in self.store.list_jobs("pending", user_id, limit)
                if q.job.kind == "ingest" and isinstance(q.job.payload.get("text"), str)]

    def retry(self, job_id: str, user_id: str | None = None) -> QueuedJob:
        """Put a dead job back in the queue, due now with its attempts reset. NotFound
        for an unknown job (or, with ``user_id``, another user's); Conflict for a job that
        is not dead."""
        found = self.store.get_job(job_id)
        if found is None or (user_id is not None and found.job.user_id != user_id):
            raise NotFound(f"no job {job_id!r}")
        now = self.now()
        if found.state != "dead" or not self.store.retry_dead_jobs(now, job_id=job_id):
            raise Conflict(f"job {job_id!r} is not dead: it is still in the queue")
        return QueuedJob(job=replace(found.job, attempts=0, run_after=now), state="pending",
                         updated_at=now)

    def retry_all(self, user_id: str | None = None) -> int:
        """Put every dead job (only ``user_id``'s when given) back in the queue."""
        return self.store.retry_dead_jobs(self.now(), user_id=user_id)

    def _embed_messages(self, job: Job) -> None:
        assert job.user_id is not None
        store = self.store
        # A message is embedded as everything derived reads it: its secrets replaced.
        msgs = [m for m in (store.get_message(job.user_id, i) for i in job.payload["ids"])
                if m is not None and m.safe_text]
        if msgs:
            vecs = self.embedder.embed(message_texts(msgs))
            later: list[str] | None = getattr(self._deferred, "ids", None)
            users = [m for m in msgs if m.role == "user"]
            if later is None:
                self.embedder.embed(passage_texts(users))
            elif any(passages(m.safe_text or "") for m in users):  # no more than asked
                later.extend(m.id for m in users)
            store.set_message_embeddings(job.user_id, list(zip([m.id for m in msgs], vecs,
                                                               strict=True)))

    def _embed_passages(self, job: Job) -> None:
        assert job.user_id is not None
        msgs = [m for m in (self.store.get_message(job.user_id, i) for i in job.payload["ids"])
                if m is not None]  # an erased message's passages are not embedded again
        self.embedder.embed(passage_texts(msgs))

    @contextmanager
    def passages_later(self, user_id: str) -> Iterator[None]:
        """Within the block, jobs run on this thread embed messages without their
        passages; its end queues those as ``embed_passages`` jobs. A message is found by
        its own vector and its full-text row: passages only refine how it ranks
        (memd.engine.retrieval.passages), so a bulk import is searchable without them, sooner,
        and the queue embeds them next. Other threads (a daemon's live traffic) embed
        passages with their messages as always."""
        ids: list[str] = []
        self._deferred.ids = ids
        try:
            yield
        finally:
            self._deferred.ids = None
            for start in range(0, len(ids), PASSAGE_JOB_IDS):
                self.store.enqueue_job("embed_passages",
                                       {"ids": ids[start:start + PASSAGE_JOB_IDS]},
                                       user_id, self.now())

    def _ingest(self, job: Job) -> None:
        p: dict[str, Any] = job.payload
        draft = MemoryDraft(
            user_id=p["user_id"], text=p["text"], workspace=p.get("workspace"),
            session_id=p.get("session_id"), tier=Tier(p["tier"]),
            scope=Scope(p.get("scope", Scope.GLOBAL)),
            provenance=Provenance(p["provenance"]), provenance_message_id=p.get("message_id"),
            confidence=float(p["confidence"]), importance=float(p["importance"]),
            tags=tuple(p.get("tags", ())), entities=tuple(p.get("entities", ())),
            fact_accepted=p.get("fact_accepted"), metadata=dict(p.get("metadata") or {}),
        )
        # Embedded first, outside the transaction below, so that it does not hold the
        # store while the model runs: ingest finds the vector in the embedding cache.
        self.embedder.embed([draft.text])
        with self.store.transaction():
            if self.store.complete_job(job.id) and not self._source_forgotten(draft):
                ingest(self.store, self.embedder, self.settings, draft, self.now())

    def _source_forgotten(self, draft: MemoryDraft) -> bool:
        """Whether a forget since the job was queued took what it would write: its
        message pruned (a forget of something else that message said) or the memory's
        own words forgotten from that message. Then the job writes nothing."""
        if draft.provenance_message_id is None:
            return False
        msg = self.store.get_message(draft.user_id, draft.provenance_message_id)
        if msg is None or msg.is_pruned:
            return True
        return bool(forgotten_items(self.store, draft.user_id, msg.content_hash,
                                    [memory_item(draft.text)]))

    def _access(self, job: Job) -> None:
        assert job.user_id is not None
        # [id, relevance, accesses] (accesses: 1 in a job written before they were
        # gathered)
        hits: list[AccessHit] = [(str(mid), float(rel), int(n[0]) if n else 1)
                                 for mid, rel, *n in job.payload["hits"]]
        with self.store.transaction():
            if self.store.complete_job(job.id):  # run once: see the module docstring
                self.store.record_access(job.user_id, hits, self.now())

    @property
    def llm_enabled(self) -> bool:
        """Whether user messages are also read by the helper model (``llm_extract``)."""
        return self.helper is not None or self.settings.helper != "off"

    def llm_helper(self) -> HelperModel | None:
        """The helper LLM extraction asks, created from the settings on first use."""
        if self.helper is None and self.settings.helper != "off":
            self.helper = helper_from_settings(self.settings)
        return self.helper

    def _title(self, job: Job) -> None:
        assert job.user_id is not None
        store, uid = self.store, job.user_id
        msg = store.get_message(uid, job.payload["message_id"])
        session = store.get_session(uid, job.payload["session_id"])
        helper = self.llm_helper()
        if msg is None or session is None or helper is None:  # gone since, or turned off
            return
        words = recurring.user_text(
            store, uid, excerpt(msg.safe_text or "", self.settings.max_text_chars))
        rules = rule_title(words)
        # Only the rule-based title of this message is replaced: a run after the helper's
        # title was written (a retry, a lease run out) leaves that one as it is.
        if rules is None or session.title != rules:
            return
        title = helper_title(helper, words)  # a model error fails the job: retried once
        self.llm_counts["titles" if title else "titles_rejected"] += 1
        if title is not None and title != rules:
            store.set_session_title(uid, session.id, title, replace=True)

    def _summarize_object(self, job: Job) -> None:
        assert job.user_id is not None
        p = job.payload
        outcome = summaries.summarize_object(
            self.store, self.llm_helper(), job.user_id, p["session_id"], p["object_id"],
            p.get("model"), self.now())
        self.llm_counts[f"object_summaries_{outcome}"] += 1

    def _compact(self, job: Job) -> None:
        assert job.user_id is not None
        summary = compact.compact_session(
            self.store, self.embedder, self.settings, self.llm_helper(), job.user_id,
            job.payload["session_id"], self.now(), job_id=job.id,
            closing=bool(job.payload.get("closing")))
        if summary is not None:  # one more episode: it may complete a pattern
            consolidate.enqueue(self.store, job.user_id, self.now())

    def _consolidate(self, job: Job) -> None:
        assert job.user_id is not None
        consolidate.consolidate_user(self.store, self.embedder, self.llm_helper(),
                                     job.user_id, self.now(), job_id=job.id)

    def _llm_extract(self, job: Job) -> None:
        assert job.user_id is not None
        store, uid = self.store, job.user_id
        msg = store.get_message(uid, job.payload["message_id"])
        session = store.get_session(uid, msg.session_id) if msg is not None else None
        helper = self.llm_helper()
        if msg is None or session is None or helper is None:  # gone since, or turned off
            return
        # The sanitized text only: a secret never reaches a model, nor a fact.
        words = recurring.user_text(
            store, uid, excerpt(msg.safe_text or "", self.settings.max_text_chars))
        self.llm_counts["messages"] += 1
        try:
            outcome = llm_extract(helper, words)
        except ExtractionFailed as exc:
            self.llm_counts["failed"] += 1
            self.llm_counts.update({f"rejected_{r}": n for r, n in exc.rejected.items()})
            if exc.model_error:
                raise  # the helper itself failed: retried, then dead with its error
            # The model answered, twice, and nothing usable: asking again would get the
            # same, so the job is done; the rules' results stand. Counted above (GET
            # /health shows the counts) and logged, with no text of the message.
            log.warning("LLM extraction of message %s: %s", msg.id, exc)
            return
        self.llm_counts.update({f"rejected_{r}": n for r, n in outcome.rejected.items()})
        if outcome.rejected:
            log.warning("LLM extraction of message %s: rejected %s", msg.id,
                        dict(outcome.rejected))
        found = new_facts(outcome.facts, [ex.fact for ex in extract(words) if ex.fact])
        # what the user made memd forget, said by this message: neither the fact nor
        # its memory comes back
        items = {f: (fact_item(f.category, f.key, f.value), memory_item(memory_text(f)))
                 for f in found}
        gone = forgotten_items(store, uid, msg.content_hash,
                               [i for pair in items.values() for i in pair])
        found = [f for f in found if not gone.intersection(items[f])]
        self.embedder.embed([memory_text(f) for f in found])  # outside the transaction
        now = self.now()
        with store.transaction():
            if not store.complete_job(job.id):  # run once: see the module docstring
                return
            for f in found:
                result = upsert_fact(
                    store, uid, session.workspace, f.category, f.key, f.value,
                    f.confidence, IMPORTANCE, now, source_message_id=msg.id,
                    metadata={"session_id": session.id, "extractor": "llm"})
                accepted = (result.action == "updated"
                            if result.action in ("updated", "rejected") else None)
                ingest(store, self.embedder, self.settings, MemoryDraft(
                    user_id=uid, text=memory_text(f), workspace=session.workspace,
                    session_id=session.id, tier=Tier.SEMANTIC, scope=Scope.GLOBAL,
                    provenance=Provenance.SYSTEM_INFERRED, provenance_message_id=msg.id,
                    confidence=f.confidence, importance=IMPORTANCE,
                    tags=("extracted", "llm", fact_tag(f.category, f.key)),
                    fact_accepted=accepted), now)
        self.llm_counts["facts"] += len(found)
