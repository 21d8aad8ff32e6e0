"""``memd migrate`` (SQLite -> PostgreSQL) and ``memd postgres`` on real databases.

A data dir with 10,000 messages and 2,000 memories (plus facts, supersession chains,
pending jobs, usage, calls, cached embeddings, a local memory, workspaces, auth rows and
unicode) is built once per module through the engine and the store; each test migrates
into a fresh database of the session's embedded PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pg
import psycopg
import pytest
from click.testing import CliRunner, Result

import memd
from memd.backends.postgres import PostgresStore
from memd.backends.sqlite import SQLiteStore
from memd.cli import main
from memd.config import Settings
from memd.context_objects import AdmissionDecision, ContextObject, Fault, FidelityTransition
from memd.engine.memory import Memd
from memd.models.embedder import FakeEmbedder
from memd.types import Memory, MemoryFilter, Provenance, Scope, Tier, Usage

DIM = 384
PARTITIONS = (4, 4, 4)
T0 = 1_780_000_000.0  # 2026-05-28: the history spans May, June and July 2026
USERS = ("alice", "bob", "zoe")  # ids are ASCII; the text is not
TEXT = "Grüße aus Zürich, 東京 and café ☕ — 🚀 naïve façade"
TOKEN = "ghp_mSM9wCZ7Uw9xfogoEmvnEN5N1aE6PwZPf1Qh"


class Clock:
    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        self.t += 0.731  # irregular fractions: exact floats must survive
        return self.t


def build(data_dir: Path, n_sessions: int, per_session: int, n_memories: int) -> Path:
    """A realistic data dir, mostly through the engine; bulk rows through the store."""
    clock = Clock(T0)
    store = SQLiteStore(data_dir / "memd.db", dim=DIM)
    embedder = FakeEmbedder(DIM)
    m = Memd(store, embedder, Settings(data_dir=data_dir), clock=clock)
    sessions = []
    for i in range(n_sessions):
        user = USERS[i % len(USERS)]
        s = m.create_session(user, workspace=None if i % 3 else f"proj-{i % 2}",
                             model="gpt-x", system_prompt=f"You help {i % 4}. {TEXT}",
                             metadata={"i": i, "ratio": 0.1 * i, "note": TEXT})
        sessions.append(s)
        msgs: list[dict[str, Any]] = []
        for j in range(per_session):
            if j % 8 == 0:  # a secret: the message's sanitized copy is copied too
                msgs.append({"role": "user", "content": f"{i}-{j}: my token is {TOKEN}"})
            elif j % 2 == 0:
                msgs.append({"role": "user", "content": f"{i}-{j}: I use vim for {TEXT}"})
            elif j % 10 == 1:
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{i}_{j}", "type": "function",
                     "function": {"name": "lookup", "arguments": '{"q": "Zürich", "n": 1.50}'}}
                ]})
            elif j % 10 == 3:
                msgs.append({"role": "tool", "tool_call_id": f"call_{i}_{j - 2}",
                             "content": f"result {j} ✓"})
            else:
                msgs.append({"role": "assistant", "content": f"reply {i}-{j} {TEXT}"})
        stored = m.append(s.id, user, msgs)
        # two thirds of the messages embedded, the rest left to their pending jobs
        embed = [x for x in stored if x.content and x.turn_index % 3]
        store.set_message_embeddings(
            user, list(zip([x.id for x in embed],
                           embedder.embed([x.content or "" for x in embed]), strict=True)))
        clock.t += 86400.0 * 60 / n_sessions  # two months of history
    # memories: a few through the full write path, the bulk straight into the store
    alice = sessions[0]
    m.add(f"Alice prefers tabs — {TEXT}", "alice", tags=["style", "ü"], importance=0.9)
    m.add("Local to one session", "alice", scope="local", session_id=alice.id)
    m.add("Workspace rule: run ruff", "bob", workspace="proj-1", tier="L4")
    m.set_fact("alice", "preference", "editor", "vim", confidence=0.6)
    m.set_fact("alice", "preference", "editor", "helix", confidence=0.9)  # supersedes
    m.set_fact("bob", "project", "lang", "Python 🐍", workspace="proj-1")
    texts = [f"memory {k} about topic {k % 97}: {TEXT} #{k}" for k in range(n_memories)]
    vectors = embedder.embed(texts)
    ids: list[str] = []
    with store.transaction():
        for k, (text, vec) in enumerate(zip(texts, vectors, strict=True)):
            now = clock()
            mem = Memory(
                id=uuid.uuid4().hex, user_id=USERS[k % 3], text=text,
                content_hash=hashlib.sha256(text.encode()).hexdigest(), token_count=12,
                created_at=now, updated_at=now, workspace="proj-1" if k % 4 == 0 else None,
                tier=Tier(k % 5), scope=Scope.GLOBAL, provenance=Provenance(k % 8),
                confidence=0.3 + (k % 7) / 10, importance=1 / 3, access_count=k % 11,
                last_accessed_at=now if k % 2 else None, tags=("t", f"k{k % 5}"),
                entities=("zürich", f"e{k % 13}") if k % 6 == 0 else (),
                metadata={"k": k, "nested": {"ü": [1, 2.5, None, True]}},
                expires_at=now + 86400 if k % 9 == 0 else None,
            )
            store.insert_memory(mem, vec if k % 50 else None)  # a few without a vector
            ids.append(mem.id)
        # supersession chains of one user's memories: ids[k] -> ids[k+30] -> ids[k+60]
        for k in range(30):
            for a, b in ((k, k + 30), (k + 30, k + 60)):
                store.update_memory(USERS[a % 3], ids[a], superseded_by=ids[b],
                                    is_active=False, updated_at=clock())
        for k in range(40):
            now = clock()
            store.record_usage(Usage(id=uuid.uuid4().hex, user_id=USERS[k % 3], created_at=now,
                                     session_id=sessions[k % n_sessions].id, model="gpt-x",
                                     prompt_tokens=100 + k, completion_tokens=k,
                                     cost_microcents=1234567 * k, latency_ms=k * 3,
                                     metadata={"k": k}))
            call = uuid.uuid4().hex
            store.record_call(call, USERS[k % 3], sessions[k % n_sessions].id,
                              "proj-0" if k % 2 else None, "gpt-x", now,
                              {"budget": 8192, "items": [{"id": f"m{k}", "score": 0.5}]})
            if k % 2:
                store.finish_call(call, 200, {"tokens": k, "ok": True})
        for user in USERS:  # what a forget leaves behind
            store.add_forgotten(user, [hashlib.sha256(f"{user}{k}".encode()).hexdigest()
                                       for k in range(3)], clock())
            # long paragraphs seen in two sessions (memd.engine.learning.recurring)
            for sid in (sessions[0].id, sessions[1].id):
                store.see_paragraphs(user, sid, f"m-{sid}", [f"p-{user}"], clock())
            # the sessions of answers kept upstream (memd.server.responses)
            store.link_response(user, f"resp-{user}", sessions[0].id, clock())
            # a long session's tool results as context objects (memd.engine.virtual)
            now = clock()
            store.add_context_objects([ContextObject(
                object_id=f"ctx-{user}-{k}", user_id=user, session_id=sessions[0].id,
                content_hash=f"h{k}", object_type="file_context", source_tool="read",
                source_key=f"src/ü{k}.py" if k else None, tool_call_id=f"tc{k}",
                turn_start=1, turn_end=1, content=f"{TEXT} {k}", compact="excerpt",
                stub="stub", tokens_l0=12, tokens_l2=3, tokens_l3=2, pinned=k == 1,
                created_at=now, updated_at=now) for k in range(3)])
            store.apply_transitions(user, sessions[0].id, [FidelityTransition(
                f"ctx-{user}-0", 0, 3, "supersede", "warning", 5000, "call-x")],
                {f"ctx-{user}-0": f"ctx-{user}-2"}, clock())
            # how one of them was admitted (memd.engine.virtual.admission)
            store.add_admissions(user, [AdmissionDecision(
                f"ctx-{user}-1", sessions[0].id, 2, 0.3125, {"type": 0.5, "size": 0.25},
                "call-x", clock())])
            # a fault served from them (memd.engine.virtual.faults)
            store.add_fault(user, Fault(f"fault-{user}", sessions[0].id, "query",
                                        "which file?", f"{TEXT} 0", (f"ctx-{user}-0",),
                                        10, 2, 1, "call-x", clock()))
            # where the user paused learning (memd.engine.learning.pause)
            store.set_paused(user, "proj-1", True, clock())
    db = apsw.Connection(str(data_dir / "memd.db"))  # auth rows: no engine API yet
    with db:
        db.execute("INSERT INTO users VALUES ('alice', 'Alice Ünver', ?), ('bob', '', ?)",
                   (T0, T0 + 0.5))
        db.execute("INSERT INTO api_keys VALUES ('key_1', 'alice', ?, 'laptop', ?, NULL, NULL)",
                   (hashlib.sha256(b"k").hexdigest(), T0))
        db.execute("INSERT INTO workspace_members VALUES ('proj-1', 'alice', ?), "
                   "('proj-1', 'bob', ?)", (T0, T0))
    db.close()
    m.close()
    return data_dir / "memd.db"


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("big"), 100, 100, 2000)


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("small"), 12, 100, 300)


def migrated_template() -> str:
    """A new database with memd's schema (cloned from a template migrated once)."""
    def setup(dsn: str) -> None:
        PostgresStore(dsn, dim=DIM, partitions=PARTITIONS).close()

    return pg.database(("migrate", DIM, PARTITIONS), setup)


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def migrate_json(db: Path, dsn: str, *extra: str) -> dict[str, Any]:
    res = run("migrate", "--from", str(db), "--to", dsn, "--partitions", "4,4,4", "--json",
              *extra)
    assert res.exit_code == 0, res.output
    report: dict[str, Any] = json.loads(res.stdout)
    return report


def assert_matches(report: dict[str, Any]) -> None:
    assert report["matches"] is True
    for name, t in report["tables"].items():
        assert t["source_rows"] == t["target_rows"], name
        assert t["source_checksum"] == t["target_checksum"], name
        assert len(t["source_checksum"]) == 64


def sqlite_rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    import sqlite_vec

    conn = apsw.Connection(str(db))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    try:
        return list(conn.execute(query))
    finally:
        conn.close()


def test_migrate_copies_everything_exactly(big_db: Path) -> None:
    dsn = migrated_template()
    res = run("migrate", "--from", str(big_db), "--to", dsn, "--partitions", "4,4,4", "--json")
    assert res.exit_code == 0, res.output
    assert "copying" in res.stderr  # the progress bar
    report = json.loads(res.stdout)
    print(f"\nmigrated the 10k/2k data dir: {report['phases']}")
    assert_matches(report)
    tables = report["tables"]
    assert tables["messages"]["source_rows"] == 10_000
    assert tables["memories"]["source_rows"] >= 2_000
    for name, t in tables.items():  # every declared table was exercised
        assert t["source_rows"] > 0, name
        assert t["copied"] == t["source_rows"], name
    assert report["absent_in_source"] == []

    # second run: nothing to copy, and it says so
    res = run("migrate", "--from", str(big_db), "--to", dsn, "--partitions", "4,4,4")
    assert res.exit_code == 0, res.output
    assert "nothing to copy" in res.stdout and "all tables match" in res.stdout

    # read back through the PostgreSQL store and compare field by field
    src = memd.open(big_db.parent, embedder="fake")
    dst = memd.open(big_db.parent, db=dsn, embedder="fake")
    try:
        s, d = src.store, dst.store
        assert isinstance(d, PostgresStore) and d.partitions == PARTITIONS
        for user in USERS:
            sessions = s.list_sessions(user, limit=1000)
            assert sessions and d.list_sessions(user, limit=1000) == sessions
            for sess in sessions[:5]:
                copied = d.get_messages(user, sess.id)
                assert copied == s.get_messages(user, sess.id)
                assert any(x.sanitized == f"{x.content.split(':')[0]}: my token is "
                           "[API_KEY_1]" for x in copied if x.content)
                if sess.system_prompt_hash:
                    assert (d.get_system_prompt(sess.system_prompt_hash)
                            == s.get_system_prompt(sess.system_prompt_hash))
            mems = {x.id: x for x in s.iter_memories(user)}
            assert {x.id: x for x in d.iter_memories(user)} == mems
            assert any(x.superseded_by for x in mems.values())
            assert any(x.scope == Scope.LOCAL for x in mems.values()) == (user == "alice")
            sv, dv = (st.get_memory_vectors(user, list(mems)) for st in (s, d))
            assert sv.keys() == dv.keys() and len(sv) > 0
            for mid, vec in sv.items():
                assert np.asarray(dv[mid], dtype=np.float32).tobytes() == \
                    np.asarray(vec, dtype=np.float32).tobytes()
            assert d.get_facts(user, active_only=False) == s.get_facts(user, active_only=False)
            assert d.list_usage(user) == s.list_usage(user)
            flt = MemoryFilter()
            assert d.count_memories(user, flt) == s.count_memories(user, flt)
            # the vector index works on the copy: the same nearest neighbours (HNSW is
            # approximate and the fake embedder makes ties: compare the similarities)
            q = src.embedder.embed([f"memory 5 about topic 5: {TEXT} #5"])[0]
            near_d, near_s = (st.nearest_memories(user, q, 5, flt) for st in (d, s))
            assert len(near_d) == 5 and near_d[0][1] > 0.5
            assert [round(x, 5) for _, x in near_d] == [round(x, 5) for _, x in near_s]
        assert d.pending_jobs() == s.pending_jobs() > 0
    finally:
        src.close()
        dst.close()

    # message embeddings, bit for bit
    want = dict(sqlite_rows(big_db, "SELECT message_id, embedding FROM message_vec"))
    with psycopg.connect(dsn) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        got = dict(conn.execute(
            "SELECT message_id, embedding FROM messages WHERE embedding IS NOT NULL").fetchall())
        assert len(got) == len(want) > 5000
        for mid, blob in want.items():
            assert np.asarray(got[mid].to_numpy(), dtype="<f4").tobytes() == blob
        # history sits in its month partitions, vector indexes were rebuilt
        leaves = conn.execute("SELECT DISTINCT tableoid::regclass::text FROM messages").fetchall()
        assert {r[-6:] for (r,) in leaves} == {"202605", "202606", "202607"}  # no _default
        assert conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname IN "
            "('idx_messages_embedding', 'idx_memories_embedding')").fetchone() == (2,)
        assert conn.execute(
            "SELECT count(*) FROM schema_meta WHERE key LIKE 'migrate.%'").fetchone() == (0,)


def test_killed_run_resumes(small_db: Path) -> None:
    dsn = pg.database()  # empty: the run creates the schema itself
    total = sqlite_rows(small_db, "SELECT count(*) FROM messages")[0][0]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memd.cli", "migrate", "--from", str(small_db), "--to", dsn,
         "--partitions", "4,4,4", "--batch-size", "20"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    pg.kill_when(proc, dsn, "SELECT count(*) FROM messages", timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with psycopg.connect(dsn, autocommit=True) as conn:
        copied = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        # killed midway through messages, after whole batches were committed
        assert 0 < copied < total and copied % 20 == 0
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        assert conn.execute(  # the vector index waits to be built after the last batch
            "SELECT count(*) FROM schema_meta WHERE key LIKE 'migrate.deferred_index.%'"
        ).fetchone()[0] >= 1

    report = migrate_json(small_db, dsn)
    assert_matches(report)
    assert report["tables"]["messages"]["copied"] == total - copied
    assert report["tables"]["memories"]["copied"] == report["tables"]["memories"]["source_rows"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = "
                            "'idx_messages_embedding'").fetchone() == (1,)

    third = migrate_json(small_db, dsn)
    assert third["copied"] == 0
    assert [t["target_checksum"] for t in third["tables"].values()] == \
        [t["target_checksum"] for t in report["tables"].values()]


def test_conflicting_target_is_refused(small_db: Path) -> None:
    dsn = migrated_template()
    assert_matches(migrate_json(small_db, dsn))
    victim = sqlite_rows(small_db, "SELECT user_id, memory_id FROM memories LIMIT 1")[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memories SET content_text = 'tampered' "
                     "WHERE user_id = %s AND memory_id = %s", victim)
        conn.execute("DELETE FROM facts")  # something to copy, which must not be copied
    res = run("migrate", "--from", str(small_db), "--to", dsn, "--partitions", "4,4,4")
    assert res.exit_code == 1
    assert isinstance(res.exception, SystemExit)  # no traceback
    assert "different data for 1 row(s)" in res.stderr and victim[1] in res.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM facts").fetchone() == (0,)


def test_row_postgresql_refuses_is_named(small_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "memd.db"
    db.write_bytes(small_db.read_bytes())
    conn = apsw.Connection(str(db))
    (user, mid), = conn.execute("SELECT user_id, memory_id FROM memories LIMIT 1 OFFSET 7")
    with conn:  # PostgreSQL text cannot hold NUL
        conn.execute("UPDATE memories SET content_text = 'a' || char(0) || 'b' "
                     "WHERE memory_id = ?", (mid,))
    conn.close()
    dsn = migrated_template()
    res = run("migrate", "--from", str(db), "--to", dsn, "--partitions", "4,4,4")
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    assert f"error: copying memories {{'user_id': '{user}', 'memory_id': '{mid}'}}" \
        in res.stderr
    with psycopg.connect(dsn, autocommit=True) as pconn:  # left searchable
        assert pconn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = "
                             "'idx_memories_embedding'").fetchone() == (1,)


@pytest.mark.parametrize(("target", "code", "message"), [
    ("postgresql://nobody@127.0.0.1:1/nowhere", 1, "cannot open the PostgreSQL store"),
    ("mysql://root@localhost/memd", 2, "--to must be a postgresql:// URL"),
])
def test_bad_target_is_a_clear_error(small_db: Path, target: str, code: int,
                                     message: str) -> None:
    res = run("migrate", "--from", str(small_db), "--to", target)
    assert res.exit_code == code, res.output
    assert isinstance(res.exception, SystemExit)
    assert f"error: {message}" in res.stderr and "Traceback" not in res.output


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    res = run("migrate", "--from", str(tmp_path / "none.db"), "--to", pg.cluster().dsn())
    assert res.exit_code == 2 and "no memd database" in res.stderr


@pytest.mark.parametrize("args", [["migrate"], ["postgres"], ["postgres", "start"],
                                  ["postgres", "stop"], ["postgres", "status"]])
def test_help(args: list[str]) -> None:
    res = run(*args, "--help")
    assert res.exit_code == 0 and "Usage:" in res.output


def test_local_postgres_start_status_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    cmd = [sys.executable, "-m", "memd.cli", "--data-dir", str(data_dir), "postgres"]
    try:
        out = subprocess.run([*cmd, "start"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        dsn = out.stdout.strip().splitlines()[-1]
        assert dsn.startswith("postgresql://") and "/memd" in dsn
        # the server outlived the command that started it
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("memd",)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        status = run("--data-dir", str(data_dir), "postgres", "status")
        assert status.exit_code == 0 and status.stdout.startswith("running") \
            and dsn in status.stdout
        again = run("--data-dir", str(data_dir), "postgres", "start")
        assert again.exit_code == 0 and "already running" in again.stderr
        assert again.stdout.strip() == dsn
    finally:
        stop = run("--data-dir", str(data_dir), "postgres", "stop")
    assert stop.exit_code == 0 and "stopped" in stop.stdout
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)
    status = run("--data-dir", str(data_dir), "postgres", "status")
    assert status.stdout.startswith("stopped")
    assert run("--data-dir", str(data_dir), "postgres", "stop").stdout.startswith(
        "PostgreSQL was not running")


def test_a_daemon_serving_the_target_never_caches_a_session_before_its_messages(
    tmp_path: Path,
) -> None:
    """The history cache keys a session's history by its (turn_count, history_version),
    which no copy changes: were a session copied before its messages, a compile by a
    daemon serving the target in between would cache a partial history under the final
    state and serve it for good (appends only read newer turns). Sessions come after
    messages, so any prefix of the tables a run copies (a run killed between tables, then
    resumed) shows either no session or one with every message."""
    from memd.engine.conversation.history import recent_history
    from memd.migrate import TABLES, migrate

    src = memd.open(tmp_path / "src", embedder="fake")
    s = src.create_session("u")
    src.append(s.id, "u", [{"role": "user", "content": f"turn {i} about otters"}
                           for i in range(6)])
    src.close()
    names = [t.name for t in TABLES]
    assert names.index("messages") < names.index("sessions")
    dsn = pg.database()
    db = tmp_path / "src" / "memd.db"
    eng = memd.open(tmp_path / "dst", embedder="fake", db=dsn, pg_partitions=PARTITIONS)
    try:
        for end in range(1, len(TABLES) + 1):
            migrate(db, dsn, partitions=PARTITIONS, tables=TABLES[:end])
            session = eng.store.get_session("u", s.id)
            if session is not None:  # what a compile would cache now
                cached = eng.history.read(eng.store, "u", session, 5000)
                assert len(cached) == 6, (TABLES[end - 1].name, len(cached))
        eng.append(s.id, "u", [{"role": "user", "content": "turn 6"}])
        session = eng.session(s.id, "u")
        assert [m.content for m in eng.history.read(eng.store, "u", session, 5000)] == \
            [m.content for m in recent_history(eng.store, "u", session, 5000)]
        assert len(recent_history(eng.store, "u", session, 5000)) == 7
    finally:
        eng.close()
