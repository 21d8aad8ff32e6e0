"""The embedded SQLite backend: apsw + sqlite-vec + FTS5, one file per data dir.

apsw is used because it bundles a current SQLite with FTS5 and can load extensions on
every Python build (the stdlib ``sqlite3`` here cannot). One connection per store,
guarded by a re-entrant lock so the daemon's threads never interleave a transaction
(besides it, a read-only one ranks the memory keyword channel beside the vector channel:
_rank_aside); WAL lets a CLI process and the daemon share the file. ``secure_delete`` is
on so that forgetting leaves no readable bytes behind.

WAL checkpoints run in a thread of the store's own, never in a write: SQLite's automatic
checkpoint runs in the commit that takes the WAL past its limit (at 10,000 pages, about
430 appends at the scale benchmark's size: a 31 ms append every 430, 600 ms for the
first), so a WAL hook replaces it and wakes the thread once the WAL holds
``checkpoint_pages``; a write checkpoints in line only when the thread has fallen 10x
behind (see _catch_up).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib import resources
from pathlib import Path
from typing import Any, cast

import apsw
import numpy as np

from memd.backends.accounts import AccountsMixin
from memd.backends.base import (
    CALL_COLUMNS,
    PROVENANCES,
    SCOPES,
    TIERS,
    AccessHit,
    Vector,
    access_totals,
    call_record,
    calls_query,
    compose_candidates,
    keyword_part,
    recent_query,
)
from memd.backends.vector_cache import UserVectors
from memd.errors import InvalidInput, MigrationError, NotFound, StorageError
from memd.types import (
    Fact,
    Found,
    Job,
    Memory,
    MemoryFilter,
    Message,
    NewMessage,
    Session,
    SessionStatus,
    Usage,
)

log = logging.getLogger(__name__)

# The keyword channel's ranking: FTS5 alone (cheap), the winners' rows fetched by key
# after it; joining every match to memories first costs ~3x more on a large store.
_KEYWORD_RANKS = (
    "SELECT memory_id, -bm25(memories_fts) AS r FROM memories_fts "
    "WHERE memories_fts MATCH ? ORDER BY r DESC LIMIT ?"
)


def _keyword_ranks_limit(k: int) -> int:
    """How many _KEYWORD_RANKS rows a keyword channel of ``k`` reads: a margin over ``k``
    for the filter applied after it (_keyword_rows)."""
    return k * 3 + 10



_MEMORY_COLS = (
    "memory_id, user_id, workspace, session_id, memory_tier, memory_scope, content_text, "
    "content_hash, provenance_type, provenance_message_id, confidence, importance, "
    "relevance_accumulator, access_count, last_accessed_at, created_at, updated_at, "
    "expires_at, is_active, is_validated, token_count, superseded_by, tags, entities, metadata"
)
_MESSAGE_COLS = (
    "message_id, session_id, user_id, turn_index, role, content, token_count, created_at, "
    "name, tool_calls, tool_call_id, content_hash, model_id, finish_reason, prompt_tokens, "
    "completion_tokens, latency_ms, is_compressed, compressed_summary_id, is_pruned, metadata, "
    "chain_hash"
)
_SESSION_COLS = (
    "session_id, user_id, workspace, created_at, updated_at, expires_at, status, model_id, "
    "context_window_size, system_prompt_hash, system_prompt_tokens, max_response_tokens, "
    "turn_count, total_prompt_tokens, total_completion_tokens, total_cost_microcents, "
    "summary_text, summary_token_count, parent_session_id, metadata, history_version"
)
_FACT_COLS = (
    "fact_id, user_id, category, key, value, confidence, importance, created_at, updated_at, "
    "workspace, is_active, superseded_by, source_message_id, metadata"
)
_MEMORY_UPDATABLE = {
    "text": "content_text", "content_hash": "content_hash", "token_count": "token_count",
    "tier": "memory_tier", "scope": "memory_scope", "confidence": "confidence",
    "importance": "importance", "is_active": "is_active", "is_validated": "is_validated",
    "superseded_by": "superseded_by", "expires_at": "expires_at", "tags": "tags",
    "metadata": "metadata", "updated_at": "updated_at", "access_count": "access_count",
    "entities": "entities", "provenance": "provenance_type",
}
_SESSION_UPDATABLE = {
    "status", "summary_text", "summary_token_count", "expires_at", "metadata", "updated_at",
    "model_id", "context_window_size", "max_response_tokens",
}
_STOPWORDS = frozenset(
    "a an and are as at be by do does did for from has have i in is it its "
    "me my of on or our so that the this to was we what when where which who why how "
    "with you your".split()
)
# Words as FTS5's unicode61 tokenizer cuts them: letters and digits (``_`` separates).
_FTS_WORD = re.compile(r"[^\W_]+")
_MARK_LETTERS = "bcdfghjklmnpqrstvwxz"  # no vowels, no y: see 005_fts_per_user.sql


def _ws(workspace: str | None) -> str:
    return workspace or ""


def _unws(value: str) -> str | None:
    return value or None


def _blob(vector: Vector) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _load(text: str) -> Any:
    """json.loads with a fast path for the empty values most rows hold."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


@functools.lru_cache(maxsize=4096)
def _strings(text: str) -> tuple[str, ...]:
    """A JSON array of strings (tags, entities) as a tuple; most rows repeat a few
    values, and a tuple can be shared."""
    return tuple(_load(text))


# Users with fewer than this many embedded messages keep them in memory too (a message
# search's vector channel then costs ~0.1 ms instead of ~0.6 ms through vec0), the
# least recently searched dropped first beyond the total; bigger histories stay on vec0.
MESSAGE_CACHE_USER = 4096
MESSAGE_CACHE_TOTAL = 50_000


@functools.lru_cache(maxsize=4096)
def user_mark(user_id: str) -> str:
    """The 12 consonants that start every full-text term of this user's rows (a 52-bit
    hash of the id; a collision could only mix two users' rankings, never their rows,
    which are read back by user_id)."""
    n = int.from_bytes(hashlib.blake2b(user_id.encode("utf-8"), digest_size=8).digest(),
                       "big")
    out = []
    for _ in range(12):
        n, r = divmod(n, len(_MARK_LETTERS))
        out.append(_MARK_LETTERS[r])
    return "".join(out)


def fts_text(user_id: str | None, text: str | None) -> str:
    """What the full-text index holds for a row: each word prefixed with its user's mark."""
    if not user_id or not text:
        return ""
    mark = user_mark(user_id)
    return " ".join(mark + w for w in _FTS_WORD.findall(text.lower()))


def fts_query(user_id: str, text: str) -> str | None:
    """An FTS5 MATCH expression for free text: the user's quoted terms OR-ed, stopwords
    dropped. Quoting makes any user text safe (no FTS syntax errors)."""
    words = [w for w in _FTS_WORD.findall(text.lower()) if w not in _STOPWORDS]
    if not words:
        words = _FTS_WORD.findall(text.lower())
    unique = list(dict.fromkeys(words))[:32]
    if not unique:
        return None
    mark = user_mark(user_id)
    return " OR ".join(f'"{mark}{w}"' for w in unique)


class SQLiteStore(AccountsMixin):
    """The Store protocol over one SQLite file (or ``:memory:``)."""

    _P = "?"
    concurrent_reads = False  # one connection, one lock

    checkpoint_pages = 1000  # WAL pages (4 KB) that wake the checkpoint thread

    def __init__(self, path: str | Path = ":memory:", dim: int = 384) -> None:
        self.path = str(path)
        self.dim = dim
        self._lock = threading.RLock()
        self._depth = threading.local()  # this thread's transaction() nesting
        self._vectors: dict[str, UserVectors] = {}
        self._message_vectors: OrderedDict[str, UserVectors | None] = OrderedDict()
        self._message_loads: set[str] = set()  # users whose vectors a thread is loading
        self._message_seen: set[str] = set()  # users who searched messages once already
        self._closed = False
        self._data_version = -1
        self._checkpointer: apsw.Connection | None = None
        self._checkpoint_due = threading.Event()
        self._checkpoint_lock = threading.Lock()
        self._wal_pages = 0  # the WAL's length after the last commit
        self._checkpoint_thread: threading.Thread | None = None
        # The side connection (_rank_aside): opened at its first use, one user at a time.
        self._side: apsw.Connection | None = None
        self._side_lock = threading.Lock()
        self._side_worker: ThreadPoolExecutor | None = None
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = apsw.Connection(self.path)
            self._prepare()
            self._migrate()
        except apsw.Error as exc:
            raise StorageError(f"cannot open SQLite store at {self.path}: {exc}") from exc

    # -- connection ------------------------------------------------------------------
    def _prepare(self) -> None:
        import sqlite_vec

        db = self._db
        db.enable_load_extension(True)
        db.load_extension(sqlite_vec.loadable_path())
        db.enable_load_extension(False)
        db.set_busy_timeout(10_000)
        db.create_scalar_function("memd_fts_text", cast(Any, fts_text), 2, deterministic=True)
        for pragma in (
            "journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON",
            "secure_delete = ON", "temp_store = MEMORY", "cache_size = -65536",
        ):
            db.execute(f"PRAGMA {pragma}")
        db.set_wal_hook(self._wal_grew)  # in place of the automatic checkpoint

    def _wal_grew(self, _db: apsw.Connection, _name: str, pages: int) -> int:
        """After each commit: wake the checkpoint thread once the WAL is long enough."""
        self._wal_pages = pages
        if pages >= self.checkpoint_pages and not self._closed:
            if self._checkpoint_thread is None:
                self._checkpoint_thread = threading.Thread(
                    target=self._checkpoints, name="memd-sqlite-checkpoint", daemon=True)
                self._checkpoint_thread.start()
            self._checkpoint_due.set()
        return apsw.SQLITE_OK

    def _checkpoints(self) -> None:
        while True:
            self._checkpoint_due.wait()
            self._checkpoint_due.clear()
            if self._closed:
                return
            try:
                self.checkpoint()
            except StorageError as exc:  # e.g. busy: the next commit wakes it again
                log.warning("%s", exc)

    def _migrate(self) -> None:
        db = self._db
        with self._lock, db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at REAL NOT NULL DEFAULT (unixepoch('subsec')))"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_meta (key TEXT PRIMARY KEY, value TEXT)"
            )
            row = db.execute("SELECT value FROM schema_meta WHERE key = 'dim'").fetchone()
            if row is not None and int(row[0]) != self.dim:
                raise MigrationError(
                    f"{self.path} holds {row[0]}-dim embeddings; this embedder makes "
                    f"{self.dim}-dim ones (use a new data dir or the original embedder)"
                )
            done = {v for (v,) in db.execute("SELECT version FROM schema_migrations")}
        files = sorted(
            (f for f in (resources.files("memd.sql") / "sqlite").iterdir()
             if f.name.endswith(".sql")),
            key=lambda f: f.name,
        )
        known = {int(f.name.split("_", 1)[0]) for f in files}
        if done - known:
            raise MigrationError(
                f"{self.path} has schema versions {sorted(done - known)} unknown to this "
                "memd; upgrade memd"
            )
        for f in files:
            version = int(f.name.split("_", 1)[0])
            if version in done:
                continue
            sql = f.read_text("utf-8").replace("{dim}", str(self.dim))
            try:
                with self._lock, db:
                    db.execute(sql)
                    db.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                        (version, f.name),
                    )
                    db.execute(
                        "INSERT OR REPLACE INTO schema_meta (key, value) VALUES ('dim', ?)",
                        (str(self.dim),),
                    )
            except apsw.Error as exc:
                raise MigrationError(f"migration {f.name} failed: {exc}") from exc

    def checkpoint(self) -> None:
        """Copy the WAL back into the database without blocking writers (PASSIVE), from
        a connection of its own so the store's lock is not held meanwhile. The store's
        checkpoint thread calls it; anyone may."""
        if self.path == ":memory:":
            return
        try:
            with self._checkpoint_lock:  # one apsw connection: one thread at a time
                if self._checkpointer is None:
                    self._checkpointer = apsw.Connection(self.path)
                    self._checkpointer.set_busy_timeout(1000)
                self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except apsw.Error as exc:
            raise StorageError(f"checkpoint failed: {exc}") from exc

    def _catch_up(self) -> None:
        """After a commit, with the store's lock: a checkpoint in line when the thread
        has fallen 10x behind, as under writes back to back it can (a PASSIVE checkpoint
        lets the WAL restart only once it has copied every frame before the next write
        begins); the WAL stays as short as SQLite's automatic checkpoint kept it."""
        if self._wal_pages >= 10 * self.checkpoint_pages:
            self._wal_pages = 0
            with self._checkpoint_lock:  # after the thread's, if one is running
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self._closed = True
        if self._checkpoint_thread is not None:
            self._checkpoint_due.set()
            self._checkpoint_thread.join(timeout=30)
        if self._side_worker is not None:
            self._side_worker.shutdown(wait=True)
        if self._side is not None:
            self._side.close()
        with self._lock, self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            self._depth.n = getattr(self._depth, "n", 0) + 1
            try:
                with self._db:
                    yield
                if self._depth.n == 1:
                    self._catch_up()
            except apsw.Error as exc:
                self._drop_caches()
                raise StorageError(f"SQLite: {exc}") from exc
            except BaseException:
                self._drop_caches()  # rolled back: the caches may be ahead of the file
                raise
            finally:
                self._depth.n -= 1

    def in_transaction(self) -> bool:
        return bool(getattr(self._depth, "n", 0))

    def read_batch(self) -> AbstractContextManager[None]:
        """Nothing to share on SQLite: every read is an in-process call already."""
        return nullcontext()

    def side_reads(self) -> AbstractContextManager[None]:
        return nullcontext()  # one connection; no pool to keep apart

    def _drop_caches(self) -> None:
        self._vectors.clear()
        self._message_vectors.clear()

    def _check_data_version(self) -> None:
        """Drop the vector caches when another connection changed the file."""
        version = int(cast(int, self._db.execute("PRAGMA data_version").fetchall()[0][0]))
        if version != self._data_version:
            self._drop_caches()
            self._data_version = version

    def _cached_vectors(self, user_id: str) -> UserVectors:
        """The user's vectors in memory, (re)loaded when another process wrote."""
        with self._lock:
            self._check_data_version()
            cached = self._vectors.get(user_id)
            if cached is None:
                rows = self._q(
                    "SELECT memory_id, embedding, workspace, active FROM memory_vec "
                    "WHERE user_id = ?", (user_id,),
                )
                cached = self._vectors[user_id] = UserVectors(self.dim, rows)
            return cached

    def _message_vectors_or_warm(self, user_id: str) -> UserVectors | None:
        """The user's message vectors if in memory; else None, and from a user's second
        search on, a thread loads them: searches are not slowed by the load (~6 ms for
        250 vectors, more on a big file; it holds the store's lock meanwhile), and
        one-off searches never pay for it."""
        with self._lock:
            self._check_data_version()
            if user_id in self._message_vectors:
                self._message_vectors.move_to_end(user_id)
                return self._message_vectors[user_id]
            if user_id in self._message_loads:
                return None
            if user_id not in self._message_seen:  # a one-off search: vec0 is enough
                self._message_seen.add(user_id)
                return None
            self._message_loads.add(user_id)
        threading.Thread(target=self._warm_message_vectors, args=(user_id,),
                         name="memd-message-vectors", daemon=True).start()
        return None

    def _warm_message_vectors(self, user_id: str) -> None:
        try:
            with self._lock:
                if not self._closed:
                    self._cached_message_vectors(user_id)
        except StorageError:
            pass  # the next search uses vec0 and tries again
        finally:
            with self._lock:
                self._message_loads.discard(user_id)

    def _cached_message_vectors(self, user_id: str) -> UserVectors | None:
        """The user's message vectors in memory (session id in the workspace slot), or
        None when the user has MESSAGE_CACHE_USER or more of them."""
        with self._lock:
            self._check_data_version()
            cache = self._message_vectors
            if user_id in cache:
                cache.move_to_end(user_id)
                return cache[user_id]
            # A KNN over the partition reads only this user's chunks (~4 ms for 250
            # vectors); a plain scan of vec0 reads the whole table (~15 ms at 6k rows).
            # vec0's k tops out at 4096, so a full answer means "maybe more": too big.
            probe = np.full(self.dim, self.dim ** -0.5, dtype=np.float32).tobytes()
            rows = self._q(
                "SELECT message_id, embedding, session_id, 1 FROM message_vec "
                "WHERE embedding MATCH ? AND k = ? AND user_id = ?",
                (probe, MESSAGE_CACHE_USER, user_id),
            )
            vectors = UserVectors(self.dim, rows) if len(rows) < MESSAGE_CACHE_USER else None
            cache[user_id] = vectors
            total = sum(len(v.ids) for v in cache.values() if v is not None)
            while total > MESSAGE_CACHE_TOTAL and len(cache) > 1:
                _, dropped = cache.popitem(last=False)
                total -= len(dropped.ids) if dropped is not None else 0
            return vectors

    def _q(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return list(self._db.execute(sql, params))
            except OverflowError as exc:
                raise InvalidInput(f"a number is out of range: {exc}") from exc
            except apsw.Error as exc:
                raise StorageError(f"SQLite: {exc}") from exc

    def _x(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Execute a write; returns the number of rows changed."""
        with self._lock:
            try:
                self._db.execute(sql, params)
                changed = self._db.changes()
                if not self.in_transaction():
                    self._catch_up()
                return changed
            except apsw.ConstraintError as exc:
                from memd.errors import Conflict

                raise Conflict(f"conflicting write: {exc}") from exc
            except OverflowError as exc:
                raise InvalidInput(f"a number is out of range: {exc}") from exc
            except apsw.Error as exc:
                raise StorageError(f"SQLite: {exc}") from exc

    def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._lock:
            try:
                self._db.executemany(sql, rows)
            except apsw.Error as exc:
                raise StorageError(f"SQLite: {exc}") from exc

    def schema_version(self) -> int:
        return int(self._q("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0])

    # -- row mapping -----------------------------------------------------------------
    @staticmethod
    def _session(r: Sequence[Any]) -> Session:
        return Session(
            id=r[0], user_id=r[1], workspace=_unws(r[2]), created_at=r[3], updated_at=r[4],
            expires_at=r[5], status=SessionStatus(r[6]), model=r[7], context_window=r[8],
            system_prompt_hash=r[9], system_prompt_tokens=r[10], max_response_tokens=r[11],
            turn_count=r[12], total_prompt_tokens=r[13], total_completion_tokens=r[14],
            total_cost_microcents=r[15], summary_text=r[16], summary_token_count=r[17],
            parent_session_id=r[18], metadata=_load(r[19]), history_version=r[20],
        )

    @staticmethod
    def _message(r: Sequence[Any]) -> Message:
        return Message(
            id=r[0], session_id=r[1], user_id=r[2], turn_index=r[3], role=r[4], content=r[5],
            token_count=r[6], created_at=r[7], name=r[8],
            tool_calls=_load(r[9]) if r[9] is not None else None, tool_call_id=r[10],
            content_hash=r[11], model=r[12], finish_reason=r[13], prompt_tokens=r[14],
            completion_tokens=r[15], latency_ms=r[16], is_compressed=bool(r[17]),
            compressed_summary_id=r[18], is_pruned=bool(r[19]), metadata=_load(r[20]),
            chain_hash=r[21],
        )

    @staticmethod
    def _memory(r: Sequence[Any]) -> Memory:
        return Memory(
            id=r[0], user_id=r[1], workspace=_unws(r[2]), session_id=r[3], tier=TIERS[r[4]],
            scope=SCOPES[r[5]], text=r[6], content_hash=r[7], provenance=PROVENANCES[r[8]],
            provenance_message_id=r[9], confidence=r[10], importance=r[11],
            relevance_accumulator=r[12], access_count=r[13], last_accessed_at=r[14],
            created_at=r[15], updated_at=r[16], expires_at=r[17], is_active=bool(r[18]),
            is_validated=bool(r[19]), token_count=r[20], superseded_by=r[21],
            tags=_strings(r[22]), entities=_strings(r[23]),
            metadata=_load(r[24]),
        )

    @staticmethod
    def _fact(r: Sequence[Any]) -> Fact:
        return Fact(
            id=r[0], user_id=r[1], category=r[2], key=r[3], value=r[4], confidence=r[5],
            importance=r[6], created_at=r[7], updated_at=r[8], workspace=_unws(r[9]),
            is_active=bool(r[10]), superseded_by=r[11], source_message_id=r[12],
            metadata=_load(r[13]),
        )

    # -- sessions --------------------------------------------------------------------
    def create_session(self, session: Session) -> Session:
        s = session
        self._x(
            f"INSERT INTO sessions ({_SESSION_COLS}) VALUES ({', '.join('?' * 21)})",
            (s.id, s.user_id, _ws(s.workspace), s.created_at, s.updated_at, s.expires_at,
             int(s.status), s.model, s.context_window, s.system_prompt_hash,
             s.system_prompt_tokens, s.max_response_tokens, s.turn_count,
             s.total_prompt_tokens, s.total_completion_tokens, s.total_cost_microcents,
             s.summary_text, s.summary_token_count, s.parent_session_id, _json(s.metadata),
             s.history_version),
        )
        return session

    def get_session(self, user_id: str, session_id: str) -> Session | None:
        rows = self._q(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE user_id = ? AND session_id = ?",
            (user_id, session_id),
        )
        return self._session(rows[0]) if rows else None

    def list_sessions(self, user_id: str, limit: int = 50) -> list[Session]:
        rows = self._q(
            f"SELECT {_SESSION_COLS} FROM sessions WHERE user_id = ? "
            "ORDER BY created_at DESC, session_id LIMIT ?",
            (user_id, limit),
        )
        return [self._session(r) for r in rows]

    def update_session(self, user_id: str, session_id: str, **changes: Any) -> None:
        bad = set(changes) - _SESSION_UPDATABLE
        if bad:
            raise ValueError(f"not updatable on a session: {sorted(bad)}")
        if not changes:
            return
        values = [
            _json(v) if k == "metadata" else int(v) if k == "status" else v
            for k, v in changes.items()
        ]
        sets = ", ".join(f"{k} = ?" for k in changes)
        if not self._x(
            f"UPDATE sessions SET {sets} WHERE user_id = ? AND session_id = ?",
            (*values, user_id, session_id),
        ):
            raise NotFound(f"no session {session_id!r} for user {user_id!r}")

    def add_session_usage(
        self, user_id: str, session_id: str, prompt_tokens: int, completion_tokens: int,
        cost_microcents: int, now: float,
    ) -> None:
        self._x(
            "UPDATE sessions SET total_prompt_tokens = total_prompt_tokens + ?, "
            "total_completion_tokens = total_completion_tokens + ?, "
            "total_cost_microcents = total_cost_microcents + ?, updated_at = ? "
            "WHERE user_id = ? AND session_id = ?",
            (prompt_tokens, completion_tokens, cost_microcents, now, user_id, session_id),
        )

    def register_system_prompt(self, prompt_hash: str, text: str, token_count: int) -> None:
        self._x(
            "INSERT OR IGNORE INTO system_prompts (prompt_hash, text, token_count) "
            "VALUES (?, ?, ?)",
            (prompt_hash, text, token_count),
        )

    def get_system_prompt(self, prompt_hash: str) -> str | None:
        rows = self._q("SELECT text FROM system_prompts WHERE prompt_hash = ?", (prompt_hash,))
        return rows[0][0] if rows else None

    # -- messages --------------------------------------------------------------------
    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None,
    ) -> list[Message]:
        out: list[Message] = []
        chains = list(chain_hashes) if chain_hashes is not None else [None] * len(messages)
        with self.transaction():
            rows = self._q(
                "SELECT turn_count FROM sessions WHERE user_id = ? AND session_id = ?",
                (user_id, session_id),
            )
            if not rows:
                raise NotFound(f"no session {session_id!r} for user {user_id!r}")
            turn = int(rows[0][0])
            for msg, tokens, chash, chain in zip(
                messages, token_counts, content_hashes, chains, strict=True
            ):
                turn += 1
                m = Message(
                    id=uuid.uuid4().hex, session_id=session_id, user_id=user_id,
                    turn_index=turn, role=msg.role, content=msg.content, token_count=tokens,
                    created_at=now, name=msg.name, tool_calls=msg.tool_calls,
                    tool_call_id=msg.tool_call_id, content_hash=chash, model=msg.model,
                    finish_reason=msg.finish_reason, prompt_tokens=msg.prompt_tokens,
                    completion_tokens=msg.completion_tokens, latency_ms=msg.latency_ms,
                    metadata=dict(msg.metadata), chain_hash=chain,
                )
                self._x(
                    f"INSERT INTO messages ({_MESSAGE_COLS}) VALUES ({', '.join('?' * 22)})",
                    (m.id, m.session_id, m.user_id, m.turn_index, m.role, m.content,
                     m.token_count, m.created_at, m.name,
                     _json(m.tool_calls) if m.tool_calls is not None else None,
                     m.tool_call_id, m.content_hash, m.model, m.finish_reason,
                     m.prompt_tokens, m.completion_tokens, m.latency_ms, 0, None, 0,
                     _json(m.metadata), chain),
                )
                if m.content:
                    self._x(
                        "INSERT INTO messages_fts (rowid, content, session_id, message_id) "
                        "VALUES (last_insert_rowid(), ?, ?, ?)",
                        (fts_text(user_id, keyword_part(m.content)), session_id, m.id),
                    )
                out.append(m)
            self._x(
                "UPDATE sessions SET turn_count = ?, updated_at = ? "
                "WHERE user_id = ? AND session_id = ?",
                (turn, now, user_id, session_id),
            )
        return out

    def get_messages(
        self, user_id: str, session_id: str, *, active_only: bool = False,
        after_turn: int | None = None, before_turn: int | None = None,
        limit: int | None = None, newest_first: bool = False,
    ) -> list[Message]:
        where = "user_id = ? AND session_id = ?"
        params: list[Any] = [user_id, session_id]
        if active_only:
            where += " AND is_compressed = 0 AND is_pruned = 0"
        if after_turn is not None:
            where += " AND turn_index > ?"
            params.append(after_turn)
        if before_turn is not None:
            where += " AND turn_index < ?"
            params.append(before_turn)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {_MESSAGE_COLS} FROM messages WHERE {where} ORDER BY turn_index {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._message(r) for r in self._q(sql, params)]

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        query, params = recent_query(
            _MESSAGE_COLS, user_id, session_id, before_turn, mark="?",
            active="is_compressed = 0 AND is_pruned = 0", nonneg="max",
        )
        return [self._message(r) for r in self._q(query, (*params, limit, token_budget))]

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        if not chain_hashes:
            return []
        out: list[Message] = []
        unique = list(dict.fromkeys(chain_hashes))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            out += [self._message(r) for r in self._q(
                f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = ? AND chain_hash IN "
                f"({', '.join('?' * len(chunk))})",
                (user_id, *chunk),
            )]
        return out

    def get_message(self, user_id: str, message_id: str) -> Message | None:
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = ? AND message_id = ?",
            (user_id, message_id),
        )
        return self._message(rows[0]) if rows else None

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        with self.transaction():
            self._many(
                "UPDATE messages SET is_compressed = 1, compressed_summary_id = ? "
                "WHERE user_id = ? AND session_id = ? AND message_id = ?",
                [(summary_id, user_id, session_id, mid) for mid in message_ids],
            )
            self._x(
                "UPDATE sessions SET history_version = history_version + 1 "
                "WHERE user_id = ? AND session_id = ?", (user_id, session_id),
            )

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        with self.transaction():
            for message_id, vector in items:
                rows = self._q(
                    "SELECT session_id FROM messages WHERE user_id = ? AND message_id = ?",
                    (user_id, message_id),
                )
                if not rows:
                    continue
                self._x("DELETE FROM message_vec WHERE message_id = ?", (message_id,))
                self._x(
                    "INSERT INTO message_vec (message_id, user_id, embedding, session_id) "
                    "VALUES (?, ?, ?, ?)",
                    (message_id, user_id, _blob(vector), rows[0][0]),
                )
                self._x(
                    "UPDATE messages SET has_embedding = 1 WHERE message_id = ?", (message_id,)
                )
                cached = self._message_vectors.get(user_id)
                if cached is not None:
                    if len(cached.ids) < MESSAGE_CACHE_USER:
                        cached.upsert(message_id, vector, rows[0][0], True)
                    else:  # grown past the bound: back to vec0 for this user
                        self._message_vectors[user_id] = None

    def messages_missing_embedding(self, user_id: str, limit: int) -> list[Message]:
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = ? AND has_embedding = 0 "
            "AND content IS NOT NULL ORDER BY created_at LIMIT ?",
            (user_id, limit),
        )
        return [self._message(r) for r in rows]

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        cached = self._message_vectors_or_warm(user_id)
        if cached is not None:
            pairs = cached.knn(vector, k, False, None if session_id is None else (session_id,))
            return self._messages_with(user_id, pairs)
        sql = (
            "SELECT message_id, distance FROM message_vec WHERE embedding MATCH ? AND k = ? "
            "AND user_id = ?"
        )
        params: list[Any] = [_blob(vector), k, user_id]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        pairs = self._q(sql, params)
        return self._messages_with(user_id, [(mid, 1.0 - float(d)) for mid, d in pairs])

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        match = fts_query(user_id, query)
        if match is None:
            return []
        sql = (
            "SELECT message_id, -bm25(messages_fts) AS r FROM messages_fts "
            "WHERE messages_fts MATCH ?"
        )
        params: list[Any] = [match]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        sql += " ORDER BY r DESC LIMIT ?"
        params.append(k)
        pairs = self._q(sql, params)
        top = max((float(r) for _, r in pairs), default=0.0) or 1.0
        return self._messages_with(user_id, [(mid, float(r) / top) for mid, r in pairs])

    def _messages_with(
        self, user_id: str, pairs: list[tuple[str, float]]
    ) -> list[tuple[Message, float]]:
        if not pairs:
            return []
        ids = [p[0] for p in pairs]
        rows = self._q(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE user_id = ? AND message_id IN "
            f"({', '.join('?' * len(ids))})",
            (user_id, *ids),
        )
        by_id = {r[0]: self._message(r) for r in rows}
        return [(by_id[mid], s) for mid, s in pairs if mid in by_id]

    # -- memories --------------------------------------------------------------------
    def insert_memory(self, memory: Memory, vector: Vector | None) -> Memory:
        m = memory
        with self.transaction():
            self._x(
                f"INSERT INTO memories ({_MEMORY_COLS}) VALUES ({', '.join('?' * 25)})",
                (m.id, m.user_id, _ws(m.workspace), m.session_id, int(m.tier), int(m.scope),
                 m.text, m.content_hash, int(m.provenance), m.provenance_message_id,
                 m.confidence, m.importance, m.relevance_accumulator, m.access_count,
                 m.last_accessed_at, m.created_at, m.updated_at, m.expires_at,
                 int(m.is_active), int(m.is_validated), m.token_count, m.superseded_by,
                 _json(list(m.tags)), _json(list(m.entities)), _json(m.metadata)),
            )
            self._x(
                "INSERT INTO memories_fts (rowid, content_text, memory_id) "
                "VALUES (last_insert_rowid(), ?, ?)",
                (fts_text(m.user_id, m.text), m.id),
            )
            if vector is not None:
                self._put_memory_vector(m.id, m.user_id, m.workspace, m.is_active, vector)
            if m.entities:
                self.link_entities(m.user_id, m.id, m.entities)
        return memory

    def _put_memory_vector(
        self, memory_id: str, user_id: str, workspace: str | None, active: bool, vector: Vector
    ) -> None:
        if len(vector) != self.dim:
            raise StorageError(f"vector has {len(vector)} dims, store expects {self.dim}")
        self._x("DELETE FROM memory_vec WHERE memory_id = ?", (memory_id,))
        self._x(
            "INSERT INTO memory_vec (memory_id, user_id, embedding, workspace, active) "
            "VALUES (?, ?, ?, ?, ?)",
            (memory_id, user_id, _blob(vector), _ws(workspace), int(active)),
        )
        if user_id in self._vectors:
            self._vectors[user_id].upsert(memory_id, vector, _ws(workspace), active)

    def get_memory(self, user_id: str, memory_id: str) -> Memory | None:
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memories WHERE user_id = ? AND memory_id = ?",
            (user_id, memory_id),
        )
        return self._memory(rows[0]) if rows else None

    def find_memory_id(self, memory_id: str) -> tuple[str, Memory] | None:
        rows = self._q(f"SELECT {_MEMORY_COLS} FROM memories WHERE memory_id = ?", (memory_id,))
        if not rows:
            return None
        mem = self._memory(rows[0])
        return mem.user_id, mem

    def find_by_hash(
        self, user_id: str, workspace: str | None, content_hash: str
    ) -> Memory | None:
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memories WHERE user_id = ? AND content_hash = ? "
            "AND workspace = ? AND is_active = 1 ORDER BY created_at LIMIT 1",
            (user_id, content_hash, _ws(workspace)),
        )
        return self._memory(rows[0]) if rows else None

    def update_memory(
        self, user_id: str, memory_id: str, vector: Vector | None = None, **changes: Any
    ) -> Memory:
        bad = set(changes) - set(_MEMORY_UPDATABLE)
        if bad:
            raise ValueError(f"not updatable on a memory: {sorted(bad)}")
        with self.transaction():
            current = self.get_memory(user_id, memory_id)
            if current is None:
                raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
            if changes:
                cols, values = [], []
                for k, v in changes.items():
                    cols.append(f"{_MEMORY_UPDATABLE[k]} = ?")
                    if k in ("tags", "entities"):
                        v = _json(list(v))
                    elif k == "metadata":
                        v = _json(v)
                    elif k in ("is_active", "is_validated", "tier", "scope", "provenance"):
                        v = int(v)
                    values.append(v)
                self._x(
                    f"UPDATE memories SET {', '.join(cols)} WHERE user_id = ? AND memory_id = ?",
                    (*values, user_id, memory_id),
                )
            if "text" in changes:
                rowid = self._q("SELECT rowid FROM memories WHERE memory_id = ?", (memory_id,))
                self._x("DELETE FROM memories_fts WHERE rowid = ?", (rowid[0][0],))
                self._x(
                    "INSERT INTO memories_fts (rowid, content_text, memory_id) "
                    "VALUES (?, ?, ?)",
                    (rowid[0][0], fts_text(user_id, changes["text"]), memory_id),
                )
            if vector is not None:
                active = bool(changes.get("is_active", current.is_active))
                self._put_memory_vector(memory_id, user_id, current.workspace, active, vector)
            elif "is_active" in changes:
                self._x(
                    "UPDATE memory_vec SET active = ? WHERE memory_id = ?",
                    (int(changes["is_active"]), memory_id),
                )
                if user_id in self._vectors:
                    self._vectors[user_id].set_active(memory_id, bool(changes["is_active"]))
            if "entities" in changes:
                self._x("DELETE FROM memory_entities WHERE memory_id = ?", (memory_id,))
                self.link_entities(user_id, memory_id, changes["entities"])
            updated = self.get_memory(user_id, memory_id)
        assert updated is not None
        return updated

    def delete_memory(self, user_id: str, memory_id: str) -> bool:
        with self.transaction():
            rows = self._q(
                "SELECT rowid, content_hash FROM memories WHERE user_id = ? AND memory_id = ?",
                (user_id, memory_id),
            )
            if not rows:
                return False
            rowid, chash = rows[0]
            self._x("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))
            self._x("DELETE FROM memory_vec WHERE memory_id = ?", (memory_id,))
            if user_id in self._vectors:
                self._vectors[user_id].remove(memory_id)
            self._x("DELETE FROM memory_entities WHERE memory_id = ?", (memory_id,))
            self._x("DELETE FROM embedding_cache WHERE content_hash = ?", (chash,))
            self._x("UPDATE memories SET superseded_by = NULL WHERE superseded_by = ?",
                    (memory_id,))
            self._x("DELETE FROM memories WHERE rowid = ?", (rowid,))
        return True

    def _where(
        self, user_id: str, flt: MemoryFilter, alias: str = "", by_key: bool = False
    ) -> tuple[str, list[Any]]:
        """SQL for ``flt``. ``by_key``: the caller also filters on memory ids, so the
        user_id test is written ``+user_id`` to keep SQLite on the primary key."""
        p = f"{alias}." if alias else ""
        clauses = [f"+{p}user_id = ?" if by_key else f"{p}user_id = ?"]
        params: list[Any] = [user_id]
        if not flt.include_inactive:
            clauses.append(f"{p}is_active = 1")
        if not flt.include_superseded:
            clauses.append(f"{p}superseded_by IS NULL")
        if not flt.include_expired and flt.now is not None:
            clauses.append(f"({p}expires_at IS NULL OR {p}expires_at > ?)")
            params.append(flt.now)
        if flt.workspaces is not None:
            clauses.append(f"{p}workspace IN ({', '.join('?' * len(flt.workspaces))})")
            params.extend(flt.workspaces)
        if flt.tiers is not None:
            clauses.append(f"{p}memory_tier IN ({', '.join('?' * len(flt.tiers))})")
            params.extend(int(t) for t in flt.tiers)
        if flt.scope is not None:
            clauses.append(f"{p}memory_scope = ?")
            params.append(int(flt.scope))
        if flt.session_id is not None:
            clauses.append(f"({p}memory_scope = 1 OR {p}session_id = ?)")
            params.append(flt.session_id)
        for tag in flt.tags:
            clauses.append(f"EXISTS (SELECT 1 FROM json_each({p}tags) WHERE value = ?)")
            params.append(tag)
        return " AND ".join(clauses), params

    def list_memories(
        self, user_id: str, flt: MemoryFilter, limit: int = 100, offset: int = 0,
        order: str = "created_at",
    ) -> list[Memory]:
        if order not in ("created_at", "updated_at", "access_count", "importance"):
            raise ValueError(f"cannot order memories by {order!r}")
        where, params = self._where(user_id, flt)
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memories WHERE {where} "
            f"ORDER BY {order} DESC, memory_id LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._memory(r) for r in rows]

    def count_memories(self, user_id: str, flt: MemoryFilter) -> int:
        where, params = self._where(user_id, flt)
        return int(self._q(f"SELECT count(*) FROM memories WHERE {where}", params)[0][0])

    def _memories_by_ids(
        self, user_id: str, ids: Sequence[str], flt: MemoryFilter
    ) -> dict[str, Memory]:
        if not ids:
            return {}
        where, params = self._where(user_id, flt, by_key=True)
        rows = self._q(
            f"SELECT {_MEMORY_COLS} FROM memories WHERE {where} AND memory_id IN "
            f"({', '.join('?' * len(ids))})",
            (*params, *ids),
        )
        return {r[0]: self._memory(r) for r in rows}

    def nearest_memories(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        # The cache already applies activity and workspace; the few memories the other
        # filters (expiry, supersession, tiers, tags) drop are covered by the margin.
        pairs = self._cached_vectors(user_id).knn(
            vector, k + 10, not flt.include_inactive, flt.workspaces
        )
        by_id = self._memories_by_ids(user_id, [p[0] for p in pairs], flt)
        return [(by_id[mid], s) for mid, s in pairs if mid in by_id][:k]

    def keyword_memories(
        self, user_id: str, query: str, k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        match = fts_query(user_id, query)
        if match is None:
            return []
        ranks = self._q(_KEYWORD_RANKS, (match, _keyword_ranks_limit(k)))
        return self._keyword_rows(user_id, ranks, k, flt)

    def _keyword_rows(
        self, user_id: str, pairs: Sequence[tuple[str, float]], k: int, flt: MemoryFilter
    ) -> list[tuple[Memory, float]]:
        """The keyword channel's memories from its ranking (_KEYWORD_RANKS' rows)."""
        # The margin is for the filter (workspace, activity, expiry), which usually drops
        # none: fetch the first k + 5 rows, and the rest only if too few of those pass.
        head = k + 5
        by_id = self._memories_by_ids(user_id, [p[0] for p in pairs[:head]], flt)
        if len(by_id) < k and len(pairs) > head:
            by_id.update(self._memories_by_ids(user_id, [p[0] for p in pairs[head:]], flt))
        kept = [(by_id[mid], float(r)) for mid, r in pairs if mid in by_id][:k]
        top = max((r for _, r in kept), default=0.0) or 1.0
        return [(mem, r / top) for mem, r in kept]

    def memories_by_entities(
        self, user_id: str, entities: Sequence[str], k: int, flt: MemoryFilter
    ) -> list[Memory]:
        if not entities:
            return []
        ids = [r[0] for r in self._q(
            "SELECT DISTINCT memory_id FROM memory_entities WHERE user_id = ? AND entity IN "
            f"({', '.join('?' * len(entities))}) LIMIT 500",
            (user_id, *entities),
        )]
        found = sorted(self._memories_by_ids(user_id, ids, flt).values(),
                       key=lambda m: (-m.importance, m.id))
        return found[:k]

    def get_memory_vectors(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, Vector]:
        cached = self._cached_vectors(user_id)
        out: dict[str, Vector] = {}
        for mid in memory_ids:
            i = cached.pos.get(mid)
            if i is not None and cached.live[i]:
                out[mid] = cached.mat[i].copy()
        return out

    def memory_candidates(
        self, user_id: str, query: str, vector: Vector, flt: MemoryFilter, *,
        knn_k: int, keyword_k: int, entities: Sequence[str] = (), entity_k: int = 0,
        frequent_k: int = 0,
    ) -> dict[str, Found]:
        ranks = self._rank_aside(user_id, query, keyword_k)
        return compose_candidates(
            self, user_id, query, vector, flt, knn_k=knn_k, keyword_k=keyword_k,
            entities=entities, entity_k=entity_k, frequent_k=frequent_k,
            keyword_hits=None if ranks is None
            else lambda: self._keyword_rows(user_id, ranks.result(), keyword_k, flt),
        )

    def _rank_aside(self, user_id: str, query: str, k: int
                    ) -> Future[list[tuple[str, float]]] | None:
        """The keyword channel's FTS5 ranking (_KEYWORD_RANKS), started on the store's
        side connection, read-only, while the caller runs the vector channel: apsw and
        NumPy release the GIL, so on two cores the bm25 over every match (~1 ms for a
        query of common words at the scale benchmark's target) overlaps the KNN and its
        rows. None where it would not be right or would wait: an in-memory store (no
        second connection sees it), a transaction of this thread (its writes are not
        committed), or the side connection busy with another thread's ranking. Under
        WAL the side connection reads the last commit, as the store's own would."""
        if k <= 0 or self.path == ":memory:" or self.in_transaction() or self._closed:
            return None
        match = fts_query(user_id, query)
        if match is None or not self._side_lock.acquire(blocking=False):
            return None
        try:
            if self._side_worker is None:
                self._side_worker = ThreadPoolExecutor(1, thread_name_prefix="memd-sqlite-side")
            return self._side_worker.submit(self._rank_on_side, match, _keyword_ranks_limit(k))
        except BaseException:
            self._side_lock.release()
            raise

    def _rank_on_side(self, match: str, limit: int) -> list[tuple[str, float]]:
        try:
            if self._side is None:
                self._side = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READONLY)
                self._side.set_busy_timeout(10_000)
                self._side.execute("PRAGMA cache_size = -16384")  # 16 MB: FTS5 pages
            return list(self._side.execute(_KEYWORD_RANKS, (match, limit)))
        except apsw.Error as exc:
            raise StorageError(f"SQLite: {exc}") from exc
        finally:
            self._side_lock.release()

    def record_access(self, user_id: str, hits: Sequence[AccessHit], now: float) -> None:
        with self.transaction():
            self._many(
                "UPDATE memories SET access_count = access_count + ?, last_accessed_at = ?, "
                "relevance_accumulator = relevance_accumulator + ? "
                "WHERE user_id = ? AND memory_id = ?",
                [(n, now, rel, user_id, mid) for mid, (n, rel) in access_totals(hits).items()],
            )

    def max_access_count(self, user_id: str) -> int:
        rows = self._q(
            "SELECT max(access_count) FROM memories WHERE user_id = ? AND is_active = 1",
            (user_id,),
        )
        return int(rows[0][0] or 0)

    def memory_users(self) -> list[str]:
        return [r[0] for r in self._q("SELECT DISTINCT user_id FROM memories ORDER BY user_id")]

    # -- facts -----------------------------------------------------------------------
    def get_facts(
        self, user_id: str, workspaces: tuple[str, ...] | None = None,
        active_only: bool = True, category: str | None = None, key: str | None = None,
    ) -> list[Fact]:
        clauses, params = ["user_id = ?"], [user_id]
        if active_only:
            clauses.append("is_active = 1")
        if workspaces is not None:
            clauses.append(f"workspace IN ({', '.join('?' * len(workspaces))})")
            params.extend(workspaces)
        if category is not None:
            clauses.append("category = ?")
            params.append(category)
        if key is not None:
            clauses.append("key = ?")
            params.append(key)
        rows = self._q(
            f"SELECT {_FACT_COLS} FROM facts WHERE {' AND '.join(clauses)} "
            "ORDER BY importance DESC, category, key, created_at",
            params,
        )
        return [self._fact(r) for r in rows]

    def insert_fact(self, fact: Fact) -> Fact:
        f = fact
        self._x(
            f"INSERT INTO facts ({_FACT_COLS}) VALUES ({', '.join('?' * 14)})",
            (f.id, f.user_id, f.category, f.key, f.value, f.confidence, f.importance,
             f.created_at, f.updated_at, _ws(f.workspace), int(f.is_active), f.superseded_by,
             f.source_message_id, _json(f.metadata)),
        )
        return fact

    def supersede_fact(self, user_id: str, fact_id: str, by: str, now: float) -> None:
        self._x(
            "UPDATE facts SET is_active = 0, superseded_by = ?, updated_at = ? "
            "WHERE user_id = ? AND fact_id = ?",
            (by, now, user_id, fact_id),
        )

    # -- entities --------------------------------------------------------------------
    def link_entities(self, user_id: str, memory_id: str, entities: Sequence[str]) -> None:
        self._many(
            "INSERT OR IGNORE INTO memory_entities (user_id, entity, memory_id) VALUES (?, ?, ?)",
            [(user_id, e, memory_id) for e in dict.fromkeys(entities)],
        )

    # -- calls -----------------------------------------------------------------------
    def record_call(
        self, call_id: str, user_id: str, session_id: str | None, workspace: str | None,
        model: str | None, now: float, report: dict[str, Any], status: int | None = None,
    ) -> None:
        self._x(
            "INSERT INTO calls (call_id, user_id, session_id, workspace, model_id, created_at, "
            "status, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (call_id, user_id, session_id, _ws(workspace), model, now, status, _json(report)),
        )

    def finish_call(self, call_id: str, status: int, metadata: dict[str, Any]) -> None:
        self._x("UPDATE calls SET status = ?, metadata = ? WHERE call_id = ?",
                (status, _json(metadata), call_id))

    def get_call(self, user_id: str, call_id: str) -> dict[str, Any] | None:
        rows = self._q(f"SELECT {CALL_COLUMNS} FROM calls WHERE user_id = ? AND call_id = ?",
                       (user_id, call_id))
        return call_record(rows[0], user_id, json.loads) if rows else None

    def list_calls(
        self, user_id: str, *, session_id: str | None = None, workspace: str | None = None,
        since: float | None = None, until: float | None = None, limit: int = 50,
    ) -> list[dict[str, Any]]:
        sql, params = calls_query(
            user_id, mark="?", session_id=session_id,
            workspace=None if workspace is None else _ws(workspace),
            since=since, until=until, limit=limit,
        )
        return [call_record(r, user_id, json.loads) for r in self._q(sql, params)]

    # -- usage -----------------------------------------------------------------------
    def record_usage(self, usage: Usage) -> None:
        u = usage
        self._x(
            "INSERT INTO usage_log (usage_id, user_id, session_id, workspace, model_id, "
            "prompt_tokens, completion_tokens, cost_microcents, latency_ms, created_at, "
            "metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (u.id, u.user_id, u.session_id, _ws(u.workspace), u.model, u.prompt_tokens,
             u.completion_tokens, u.cost_microcents, u.latency_ms, u.created_at,
             _json(u.metadata)),
        )

    def list_usage(self, user_id: str, limit: int = 100) -> list[Usage]:
        rows = self._q(
            "SELECT usage_id, user_id, created_at, session_id, workspace, model_id, "
            "prompt_tokens, completion_tokens, cost_microcents, latency_ms, metadata "
            "FROM usage_log WHERE user_id = ? ORDER BY created_at DESC LIMIT ?",
            (user_id, limit),
        )
        return [
            Usage(id=r[0], user_id=r[1], created_at=r[2], session_id=r[3], workspace=_unws(r[4]),
                  model=r[5], prompt_tokens=r[6], completion_tokens=r[7],
                  cost_microcents=r[8], latency_ms=r[9], metadata=json.loads(r[10]))
            for r in rows
        ]

    # -- jobs ------------------------------------------------------------------------
    def enqueue_job(
        self, kind: str, payload: dict[str, Any], user_id: str | None, now: float,
        run_after: float | None = None,
    ) -> str:
        job_id = uuid.uuid4().hex
        self._x(
            "INSERT INTO jobs (job_id, kind, user_id, payload, run_after, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, kind, user_id, _json(payload), now if run_after is None else run_after, now),
        )
        return job_id

    def claim_jobs(self, now: float, limit: int, lease_seconds: float = 60.0) -> list[Job]:
        with self.transaction():
            rows = self._q(
                "SELECT job_id, kind, payload, user_id, attempts, run_after, created_at, "
                "last_error FROM jobs WHERE status = 'pending' AND run_after <= ? "
                "AND (lease_until IS NULL OR lease_until <= ?) "
                "ORDER BY run_after, created_at LIMIT ?",
                (now, now, limit),
            )
            self._many(
                "UPDATE jobs SET lease_until = ?, attempts = attempts + 1 WHERE job_id = ?",
                [(now + lease_seconds, r[0]) for r in rows],
            )
        return [
            Job(id=r[0], kind=r[1], payload=json.loads(r[2]), user_id=r[3], attempts=r[4] + 1,
                run_after=r[5], created_at=r[6], last_error=r[7])
            for r in rows
        ]

    def complete_job(self, job_id: str) -> None:
        self._x("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    def fail_job(self, job_id: str, error: str, retry_at: float | None) -> None:
        if retry_at is None:
            self._x(
                "UPDATE jobs SET status = 'dead', last_error = ?, lease_until = NULL "
                "WHERE job_id = ?", (error, job_id),
            )
        else:
            self._x(
                "UPDATE jobs SET last_error = ?, run_after = ?, lease_until = NULL "
                "WHERE job_id = ?", (error, retry_at, job_id),
            )

    def pending_jobs(self) -> int:
        return int(self._q("SELECT count(*) FROM jobs WHERE status = 'pending'")[0][0])

    # -- embedding cache -------------------------------------------------------------
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        if not hashes:
            return {}
        unique = list(dict.fromkeys(hashes))
        out: dict[str, bytes] = {}
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            rows = self._q(
                "SELECT content_hash, vector FROM embedding_cache WHERE model = ? AND "
                f"content_hash IN ({', '.join('?' * len(chunk))})",
                (model, *chunk),
            )
            out.update({h: bytes(v) for h, v in rows})
        return out

    def put_cached_embeddings(self, model: str, items: Sequence[tuple[str, bytes]]) -> None:
        with self.transaction():
            self._many(
                "INSERT OR IGNORE INTO embedding_cache (model, content_hash, vector) "
                "VALUES (?, ?, ?)",
                [(model, h, v) for h, v in items],
            )

    # -- bulk ------------------------------------------------------------------------
    def iter_memories(self, user_id: str | None = None) -> Iterator[Memory]:
        last = ""
        while True:
            if user_id is None:
                rows = self._q(
                    f"SELECT {_MEMORY_COLS} FROM memories WHERE memory_id > ? "
                    "ORDER BY memory_id LIMIT 500", (last,),
                )
            else:
                rows = self._q(
                    f"SELECT {_MEMORY_COLS} FROM memories WHERE user_id = ? AND memory_id > ? "
                    "ORDER BY memory_id LIMIT 500", (user_id, last),
                )
            if not rows:
                return
            for r in rows:
                yield self._memory(r)
            last = rows[-1][0]

    def expire_memories(self, now: float) -> int:
        with self.transaction():
            ids = [r[0] for r in self._q(
                "SELECT memory_id FROM memories WHERE is_active = 1 AND expires_at IS NOT NULL "
                "AND expires_at <= ?", (now,),
            )]
            self._many(
                "UPDATE memories SET is_active = 0, updated_at = ? WHERE memory_id = ?",
                [(now, i) for i in ids],
            )
            self._many("UPDATE memory_vec SET active = 0 WHERE memory_id = ?", [(i,) for i in ids])
            self._drop_caches()
        return len(ids)

    def expire_sessions(self, now: float) -> int:
        return self._x(
            "UPDATE sessions SET status = ?, updated_at = ? WHERE expires_at IS NOT NULL "
            "AND expires_at <= ? AND status != ?",
            (int(SessionStatus.EXPIRED), now, now, int(SessionStatus.EXPIRED)),
        )

    def delete_session_working_memory(self, user_id: str, session_id: str) -> int:
        ids = [r[0] for r in self._q(
            "SELECT memory_id FROM memories WHERE user_id = ? AND session_id = ? "
            "AND memory_tier = 0", (user_id, session_id),
        )]
        with self.transaction():
            for mid in ids:
                self.delete_memory(user_id, mid)
        return len(ids)
