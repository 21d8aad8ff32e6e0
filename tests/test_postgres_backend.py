"""The PostgreSQL backend's own workings, beyond the Store contract
(test_store_contract.py): hash partitions and their pruning, query plans and indexes,
row-level security, the connection pools, pipelines and prepared statements, and its
migrations."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pg
import psycopg
import pytest
import test_auth
from store_data import (
    DIM,
    PG_PARTITIONS,
    call_ids,
    fact,
    memory,
    open_store,
    pg_dsn,
    record_calls,
    session,
    vec,
)
from test_auth import Team, seed

import memd
from memd.auth import acting_as
from memd.errors import InvalidInput, MigrationError, NotFound, StorageError
from memd.types import Memory, MemoryFilter, NewMessage, Scope, Tier, Usage

team = test_auth.team  # the fixture: an authenticated daemon (here on PostgreSQL)


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[Any]:
    s = open_store("postgres", (pg_dsn(), {"partitions": PG_PARTITIONS}))
    yield s
    s.close()


def test_pg_keyword_channel_runs_beside_the_other_channels(pg_store: Any) -> None:
    """Outside transactions, the memory candidates' keyword channel is a statement of
    its own on a worker thread (and its own connection), run while the caller runs the
    other channels, as the acting user too; inside a transaction it is a branch of the
    caller's one statement. All give the same candidates."""
    import threading

    s = pg_store
    for i, text in enumerate(("rust notes", "rust compiler", "tea", "coffee")):
        s.insert_memory(memory(text, entities=("rust",) if "rust" in text else ()),
                        vec(i))
    calls: list[tuple[str, bool, bool]] = []  # thread, has the keyword, the KNN channel
    real = s.connection.rows_in

    def spy(tables: Any, query: str, params: Any, generic: bool = True) -> Any:
        calls.append((threading.current_thread().name, "'k' AS via" in query,
                      "'v' AS via" in query))
        return real(tables, query, params, generic)

    s.connection.rows_in = spy
    kw: dict[str, Any] = dict(knn_k=2, keyword_k=2, entities=["rust"], entity_k=2,
                              frequent_k=2)
    flt = MemoryFilter(now=time.time())
    here = threading.current_thread().name
    beside = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert len(calls) == 2 and (here, False, True) in calls
    worker = next(call for call in calls if call[0] != here)
    assert worker[0].startswith("memd-keyword") and worker[1:] == (True, False)
    assert any(f.keyword > 0 for f in beside.values())
    calls.clear()
    with s.transaction():
        inline = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert calls == [(here, True, True)]
    assert {k: (f.memory.id, round(f.similarity, 6), round(f.keyword, 6), f.entity)
            for k, f in beside.items()} == {
        k: (f.memory.id, round(f.similarity, 6), round(f.keyword, 6), f.entity)
        for k, f in inline.items()}
    # acting as the user (row-level security), beside the others too, as that user
    calls.clear()
    with acting_as("alice"):
        acted = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert len(calls) == 2 and (here, False, True) in calls
    assert next(c for c in calls if c[0] != here)[0].startswith("memd-keyword")
    assert {k: (f.memory.id, round(f.keyword, 6)) for k, f in acted.items()} == {
        k: (f.memory.id, round(f.keyword, 6)) for k, f in beside.items()}
    calls.clear()
    with acting_as("alice"), s.transaction():
        s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert [c[0] for c in calls] == [here] * len(calls)  # in a transaction: in line
    # A user who shares their partitions gets custom plans: the worker's statement then
    # goes through _q, on the side pool, never on the main pool, which the caller may
    # hold (a read batch) while it waits.
    other = next(u for u in (f"other{i}" for i in range(2000))
                 if s.connection.tables(u).memory_leaves
                 == s.connection.tables("alice").memory_leaves)
    s.insert_memory(memory("other's rust", user=other), vec(0))
    s.connection._sole_owners.clear()
    assert not s.connection.sole_owner("alice", s.connection.tables("alice"))
    main_pool = s.connection._pool.connection

    def main_pool_but_not_for_workers(*args: Any, **kwargs: Any) -> Any:
        assert not threading.current_thread().name.startswith("memd-keyword")
        return main_pool(*args, **kwargs)

    s.connection._pool.connection = main_pool_but_not_for_workers
    calls.clear()
    with s.read_batch():
        shared = s.memory_candidates("alice", "rust", vec(2), flt, **kw)
    assert len(calls) == 2 and shared.keys() == beside.keys()


def _hash_partition(relname: str) -> str:
    """'messages_p002_202611' -> 'p002': which hash partition a leaf belongs to."""
    return next(part for part in relname.split("_") if re.fullmatch(r"p\d{3}", part))


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a JSON plan that reads a relation or an index."""
    out = [plan] if "Relation Name" in plan or "Index Name" in plan else []
    for child in plan.get("Plans", []):
        out += _scans(child)
    return out


@contextmanager
def _executed_plans(store: Any, *settings: str) -> Iterator[list[dict[str, Any]]]:
    """The plans of the statements the store runs inside the block, as PostgreSQL ran
    them: auto_explain sends each plan to the client as a NOTICE (JSON format) when the
    statement's portal is dropped, i.e. on the next statement: the closing SET (a utility
    statement, not planned itself) delivers the last one."""
    plans: list[dict[str, Any]] = []

    def on_notice(diag: Any) -> None:
        text = diag.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1])["Plan"])

    with store.transaction():
        conn = store.connection.current()
        role = conn.execute("SELECT current_user").fetchone()[0]
        conn.execute("SET LOCAL ROLE NONE")  # auto_explain's settings are superuser's
        conn.execute("LOAD 'auto_explain'")
        for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_format = json",
                        "auto_explain.log_level = notice",
                        "auto_explain.log_nested_statements = on", *settings):
            conn.execute(f"SET LOCAL {setting}")
        conn.execute(f"SET LOCAL ROLE {role}")  # memd_app when acting as a user (RLS)
        conn.add_notice_handler(on_notice)
        try:
            yield plans
            conn.execute("SET LOCAL ROLE NONE")
            conn.execute("SET LOCAL auto_explain.log_min_duration = -1")
        finally:
            conn.remove_notice_handler(on_notice)


def _load(store: Any, user: str, memories: int, now: float) -> None:
    """``memories`` memories for ``user`` (every 10th in working memory), in one statement;
    the word ``rare<user>`` appears in two of them."""
    with store.transaction():
        store.connection.current().execute(
            "INSERT INTO memories (memory_id, user_id, memory_tier, memory_scope, content_text, "
            "content_hash, provenance_type, created_at, updated_at, token_count, embedding) "
            "SELECT md5(%(u)s || i), %(u)s, CASE WHEN i %% 10 = 0 THEN 0 ELSE 3 END, 1, "
            "'note ' || i || ' about topic' || (i %% 13) || "
            "CASE WHEN i %% 200 = 7 THEN ' rare' || %(u)s ELSE '' END, md5(%(u)s || i || 'h'), "
            "0, %(now)s, %(now)s, 5, "
            "(SELECT array_agg(random()::real) FROM generate_series(1, %(dim)s) WHERE i > 0)"
            "::vector FROM generate_series(1, %(n)s) i",
            {"u": user, "now": now, "dim": DIM, "n": memories},
        )


def test_pg_each_user_lands_in_one_partition_of_each_table(pg_store: Any) -> None:
    s, now = pg_store, time.time()
    for user in ("alice", "bob", "carol", "dave", "erin"):
        sess = s.create_session(session(user))
        s.append_messages(user, sess.id, [NewMessage("user", "hi"), NewMessage("user", "ho")],
                          [1, 1], [None, None], now)
        s.insert_memory(memory("durable", user=user), vec(0))
        s.insert_memory(memory("scratch", user=user, tier=Tier.WORKING, session_id=sess.id,
                               scope=Scope.LOCAL), vec(1))
        s.insert_fact(fact("Alex", user_id=user))
        s.link_entities(user, "m1", ["python"])
        s.record_usage(Usage(id=f"u-{user}", user_id=user, created_at=now))
    tables = ("sessions", "messages", "memories_durable", "memories_working", "facts",
              "memory_entities", "usage_log")
    with s.transaction():
        conn = s.connection.current()
        for user in ("alice", "bob", "carol", "dave", "erin"):
            leaves: dict[str, set[str]] = {}
            for table in tables:
                rows = conn.execute(
                    f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE user_id = %s",
                    (user,),
                ).fetchall()
                leaves[table] = {r[0] for r in rows}
                assert len(leaves[table]) == 1, (user, table, leaves[table])
            # Equal partition counts (4, 4, 4): the same hash partition in every table.
            assert len({_hash_partition(next(iter(v))) for v in leaves.values()}) == 1
            (history_leaf,) = leaves["messages"]
            assert history_leaf.endswith(time.strftime("_%Y%m", time.gmtime(now)))
        (working_leaf,) = conn.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE memory_tier = 0 "
            "AND user_id = 'alice'"
        ).fetchone()
        persistence = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = %s::regclass", (working_leaf,)
        ).fetchone()
        assert working_leaf.startswith("memories_working_") and persistence == ("u",)


def test_pg_hot_queries_touch_one_partition_through_indexes(pg_store: Any) -> None:
    s, now = pg_store, time.time()
    for user in ("alice", "bob", "carol", "dave", "erin", "frank"):
        _load(s, user, 1000, now)  # enough that the GIN probe beats reading the user's rows
        sess = s.create_session(session(user))
        s.append_messages(user, sess.id, [NewMessage("user", f"turn {i}") for i in range(200)],
                          [1] * 200, [None] * 200, now)
    with s.transaction():
        s.connection.current().execute("ANALYZE")
    alice_session = s.list_sessions("alice")[0].id
    (part,) = {_hash_partition(r[0]) for r in s.connection.rows(
        "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE user_id = 'alice'")}

    def check(plan: dict[str, Any], index_part: str) -> None:
        scans = _scans(plan)
        assert scans, plan
        assert all(n["Node Type"] != "Seq Scan" for n in scans), plan
        assert {_hash_partition(n["Relation Name"]) for n in scans if "Relation Name" in n} \
            == {part}
        assert any(index_part in n.get("Index Name", "") for n in scans), (
            index_part, [(n["Node Type"], n.get("Index Name")) for n in scans])

    # A test partition holds a few hundred rows per user, where reading them all (a
    # sequential scan, or a user_id index scan plus a sort for KNN) is genuinely cheaper
    # than any index made for millions of rows, and the planner rightly picks that. With
    # those paths disabled it may only choose an index that can answer the query, so the
    # plan shows (1) pruning to the user's one hash partition and (2) that the intended
    # index is usable by the store's exact SQL (e.g. the partial HNSW index's WHERE
    # is_active is implied by the memory filter). enable_* only penalizes, never forbids.
    with _executed_plans(s, "enable_seqscan = off") as plans:
        history = s.get_messages("alice", alice_session, active_only=True, newest_first=True,
                                 limit=20)
    assert [m.turn_index for m in history] == list(range(200, 180, -1))
    (plan,) = plans
    check(plan, "turn_index")  # idx_messages_session_active, on every monthly leaf

    with _executed_plans(s, "enable_seqscan = off", "enable_sort = off") as plans:
        near = s.nearest_memories("alice", vec(0), 10, MemoryFilter(now=now))
    assert len(near) == 10
    (plan,) = plans
    check(plan, "embedding")  # HNSW on memories_durable_pNNN and memories_working_pNNN

    with _executed_plans(s, "enable_seqscan = off") as plans:
        hits = s.keyword_memories("alice", "rarealice", 10, MemoryFilter(now=now))
    assert len(hits) == 5 and hits[0][1] == 1.0
    (plan,) = plans
    check(plan, "content_tsv")  # GIN over the generated tsvector

    # The same under Row-Level Security (an authenticated request acting as alice, as the
    # role memd_app): still one partition, through the same indexes. Keyword search
    # probes the GIN index inside memd_keyword_memory_ids (the @@ match is not LEAKPROOF,
    # so PostgreSQL would not use the index below a policy), then reads rows by key.
    with acting_as("alice"):
        with _executed_plans(s, "enable_seqscan = off") as plans:
            assert s.get_messages("alice", alice_session, active_only=True,
                                  newest_first=True, limit=20) == history
        (plan,) = plans
        check(plan, "turn_index")
        with _executed_plans(s, "enable_seqscan = off", "enable_sort = off") as plans:
            assert [m.id for m, _ in s.nearest_memories("alice", vec(0), 10,
                                                        MemoryFilter(now=now))] \
                == [m.id for m, _ in near]
        (plan,) = plans
        check(plan, "embedding")
        with _executed_plans(s, "enable_seqscan = off") as plans:
            assert s.keyword_memories("alice", "rarealice", 10, MemoryFilter(now=now)) == hits
        inner = [p for p in plans if any("content_tsv" in n.get("Index Name", "")
                                         for n in _scans(p))]
        assert len(inner) == 1 and len(plans) == 2, plans
        for plan in plans:  # the GIN probe, and the rows read back by an index
            check(plan, "content_tsv" if plan is inner[0] else "memories_")


def test_pg_hnsw_candidate_list_covers_the_candidates_knn(pg_store: Any) -> None:
    """Every pooled connection searches HNSW with a candidate list (hnsw.ef_search) at
    least as long as the memory candidates' KNN limit: a shorter one makes each such
    KNN go on iteratively past its first pass."""
    from memd.engine.retrieval.retrieve import Channels

    s = pg_store
    for pool in (s.connection._pool, s.connection._side_pool, s.connection._own_pool):
        with pool.connection() as conn:
            (ef,), = conn.execute("SHOW hnsw.ef_search").fetchall()
            assert int(ef) >= Channels().knn_k, (pool.name, ef)


def test_pg_keyword_relevance_is_ts_rank_alike_with_and_without_rls(pg_store: Any) -> None:
    """Keyword relevance on PostgreSQL is ts_rank (term frequency) of the OR of the query's
    words, relative to the best hit; the row-level-security path's function (migration
    005) ranks exactly as the owner's query does."""
    s = pg_store
    texts = ["docker", "docker compose and docker swarm", "docker docker docker, only docker",
             "nothing relevant"]
    made = [s.insert_memory(memory(t), vec(i)) for i, t in enumerate(texts)]
    expected = [float(r) for (r,) in s.connection.rows(
        "SELECT ts_rank(to_tsvector('english', t), websearch_to_tsquery('english', 'docker'))"
        "::float8 FROM unnest(%s::text[]) WITH ORDINALITY AS x (t, n) ORDER BY n",
        (texts[:3],))]
    top = max(expected)
    hits = s.keyword_memories("alice", "docker", 10, MemoryFilter())
    assert {m.id: round(rel, 6) for m, rel in hits} \
        == {made[i].id: round(expected[i] / top, 6) for i in range(3)}
    assert [m.id for m, _ in hits][0] == made[2].id and len(set(expected)) == 3
    with acting_as("alice"):
        assert s.keyword_memories("alice", "docker", 10, MemoryFilter()) == hits


def _filters(plan: dict[str, Any]) -> list[str]:
    """Every Filter of a JSON plan's nodes."""
    own = [plan[k] for k in ("Filter", "Join Filter") if k in plan]
    return own + [f for child in plan.get("Plans", []) for f in _filters(child)]


def test_pg_rls_tests_own_rows_before_the_sharing_functions(pg_store: Any) -> None:
    """Under row-level security, a user's reads of their own memories and stats test
    ``user_id = memd.user_id`` before calling memd_shared_memory or memd_shares_workspace
    (migration 006): PostgreSQL stops an OR at its first true arm, and the functions cost
    a lookup per row, on the ~100 stats rows a compile reads. Sharing still works: a
    fellow member's workspace memory is read through them."""
    s = pg_store
    s.check_row_security()
    for user in ("alice", "bob"):
        s.create_user(user, user, 1.0)
        s.add_workspace_member("team", user, 1.0)
    mine = [s.insert_memory(memory(f"deploy note {i}", workspace=ws), vec(i))
            for i, ws in enumerate(("team", "team", None))]
    theirs = s.insert_memory(memory("deploy note of bob", user="bob", workspace="team"), vec(3))
    s.record_access("alice", [(m.id, 1.0) for m in mine], now=2.0)
    s.record_access("bob", [(theirs.id, 1.0)], now=2.0)
    flt = MemoryFilter(workspaces=("team", ""))
    with acting_as("alice"), _executed_plans(s) as plans:
        found = s.memory_candidates("alice", "deploy note", vec(0), flt, knn_k=10,
                                    keyword_k=10, entities=("deploy",), entity_k=10,
                                    frequent_k=10)
        shared = s.memory_candidates("bob", "deploy note", vec(3),
                                     MemoryFilter(workspaces=("team",)), knn_k=10,
                                     keyword_k=10)
    assert set(found) == {m.id for m in mine} and set(shared) == {theirs.id}
    # The policies' filters (the functions' own statements, logged as nested ones, have
    # no test of memd.user_id around their calls).
    checked = [f for plan in plans for f in _filters(plan) if "memd.user_id" in f
               and ("memd_shared_memory" in f or "memd_shares_workspace" in f)]
    assert len(checked) >= 3
    for f in checked:
        first = min(i for i in (f.find("memd_shared_memory"), f.find("memd_shares_workspace"))
                    if i >= 0)
        assert -1 < f.find("current_setting('memd.user_id'") < first, f


def test_pg_entity_reads_under_rls_plan_only_the_users_partition(pg_store: Any) -> None:
    """memory_entities' workspace-read policy calls memd_shared_memory (migration 007):
    its EXISTS over memories could not be pruned, so every read of memory_entities under
    row-level security planned a subquery over every memories partition, which is slow
    at the production layout. A fellow member's
    workspace memory is still found by its entities, their private one is not."""
    s = pg_store
    s.check_row_security()
    for user in ("alice", "bob"):
        s.create_user(user, user, 1.0)
        s.add_workspace_member("team", user, 1.0)
    made = {}
    for key, user, ws in (("own", "alice", None), ("shared", "bob", "team"),
                          ("private", "bob", None), ("outsider", "carol", "team")):
        made[key] = s.insert_memory(memory(f"{key} rust notes", user=user, workspace=ws,
                                           entities=("rust",)), vec(len(made)))
        s.link_entities(user, made[key].id, ["rust"])
    (part,) = {_hash_partition(r[0]) for r in s.connection.rows(
        "SELECT DISTINCT tableoid::regclass::text FROM memories WHERE user_id = 'alice'")}
    with acting_as("alice"):
        with _executed_plans(s) as plans:
            mine = s.memories_by_entities("alice", ["rust"], 10, MemoryFilter())
        assert [m.id for m in mine] == [made["own"].id]
        read = {_hash_partition(n["Relation Name"]) for plan in plans for n in _scans(plan)
                if "Relation Name" in n}
        assert read == {part}, read
        shared = s.memories_by_entities("bob", ["rust"], 10, MemoryFilter(workspaces=("team",)))
        assert [m.id for m in shared] == [made["shared"].id]
        assert s.memories_by_entities("bob", ["rust"], 10, MemoryFilter()) == shared
        # The links themselves: a fellow member's workspace memory's, not their private
        # one's, nor those of a "team" memory of carol, who is no member.
        links = {r[0] for r in s.connection.rows("SELECT memory_id FROM memory_entities")}
        assert links == {made["own"].id, made["shared"].id}, links


def test_pg_access_bumps_leave_memory_rows_alone(pg_store: Any) -> None:
    """Access stats live in memory_stats: a bump writes no new version of the memory's
    row (which would go into its HNSW, GIN and b-tree indexes again)."""
    s = pg_store
    a = s.insert_memory(memory("often used"), vec(0))
    version = "SELECT xmin::text FROM memories WHERE user_id = 'alice' AND memory_id = %s"
    before = s.connection.rows(version, (a.id,))
    s.record_access("alice", [(a.id, 0.5)], now=5.0)
    s.update_memory("alice", a.id, access_count=7)
    assert s.connection.rows(version, (a.id,)) == before
    got = s.get_memory("alice", a.id)
    assert got is not None and got.access_count == 7 and got.last_accessed_at == 5.0
    assert s.connection.rows("SELECT count(*) FROM memory_stats")[0][0] == 1
    assert s.delete_memory("alice", a.id)
    assert s.connection.rows("SELECT count(*) FROM memory_stats")[0][0] == 0


def test_pg_schema_3_database_keeps_its_access_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database made by an older memd (schema 3: access stats in memories) is moved to
    memory_stats by migration 004 with every count intact."""
    import shutil
    from importlib import resources

    from memd.backends import postgres
    from memd.backends.common import migrations

    real = resources.files("memd.sql") / "postgres"
    old = tmp_path / "sql" / "postgres"
    old.mkdir(parents=True)
    for f in real.iterdir():
        if f.name.endswith(".sql") and int(f.name.split("_", 1)[0]) <= 3:
            shutil.copy(str(f), old / f.name)
    dsn = pg.database()
    with monkeypatch.context() as mp:
        mp.setattr(migrations.resources, "files", lambda _pkg: tmp_path / "sql")
        v3 = postgres.PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS)
    assert v3.schema_version() == 3
    with v3.transaction():
        for i, user in enumerate(("alice", "bob")):
            v3.connection.current().execute(
                "INSERT INTO memories (memory_id, user_id, memory_tier, memory_scope, "
                "content_text, content_hash, provenance_type, created_at, updated_at, "
                "token_count, access_count, last_accessed_at, relevance_accumulator) "
                "VALUES (%s, %s, 3, 1, 'x', 'h', 0, 1, 1, 1, %s, %s, %s)",
                (f"m{i}", user, 3 + i, 40.0 + i, 0.5 + i))
    v3.close()
    v4 = postgres.PostgresStore(dsn, dim=DIM, partitions=PG_PARTITIONS)
    try:
        assert v4.schema_version() == max(int(f.name.split("_", 1)[0]) for f in real.iterdir()
                                          if f.name.endswith(".sql"))
        for i, user in enumerate(("alice", "bob")):
            got = v4.get_memory(user, f"m{i}")
            assert got is not None
            assert (got.access_count, got.last_accessed_at, got.relevance_accumulator) \
                == (3 + i, 40.0 + i, 0.5 + i)
        v4.record_access("alice", [("m0", 1.0)], now=99.0)
        got = v4.get_memory("alice", "m0")
        assert got is not None and got.access_count == 4 and got.last_accessed_at == 99.0
    finally:
        v4.close()


def test_pg_migrations_are_recorded_once_and_keep_the_layout(pg_store: Any) -> None:
    from memd.backends.postgres import PostgresStore

    dsn = pg.cluster().dsn(pg_store.database)
    pg_store.insert_memory(memory("kept across reopen"), vec(0))
    again = PostgresStore(dsn, dim=DIM, partitions=(8, 8, 8))
    assert again.schema_version() == pg_store.schema_version() >= 5
    assert again.partitions == PG_PARTITIONS
    assert len(again.list_memories("alice", MemoryFilter())) == 1
    again.close()
    with pytest.raises(MigrationError, match="8-dim.*16-dim"):
        PostgresStore(dsn, dim=16)


def test_pg_concurrent_appends_keep_turns_unique(pg_store: Any) -> None:
    s = pg_store
    sess = s.create_session(session())

    def append(i: int) -> None:
        for j in range(10):
            s.append_messages("alice", sess.id, [NewMessage("user", f"{i}-{j}")], [1], [None],
                              float(j))

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    turns = [m.turn_index for m in s.get_messages("alice", sess.id)]
    assert turns == list(range(1, 41))
    assert s.get_session("alice", sess.id).turn_count == 40


def test_pg_a_caught_failure_without_savepoint_rolls_the_transaction_back_loudly(
    pg_store: Any,
) -> None:
    """Jobs and appended messages join the caller's transaction without a savepoint (two
    round trips fewer each). If one fails and the caller catches the error inside the
    transaction, leaving the transaction raises: psycopg's COMMIT of an aborted
    transaction would otherwise be a silent ROLLBACK of everything in it."""
    s = pg_store
    sess = s.create_session(session())
    with pytest.raises(StorageError, match="rolled back"), s.transaction():
        s.record_usage(Usage(id="u1", user_id="alice", created_at=1.0))
        s.append_messages("alice", sess.id, [NewMessage("user", "kept?")], [1], [None], 1.0)
        with pytest.raises(InvalidInput):  # the server refuses \u0000 in jsonb
            s.enqueue_job("ingest", {"text": "a\x00b"}, "alice", 1.0)
    assert s.list_usage("alice") == []
    assert s.get_messages("alice", sess.id) == []
    assert s.claim_jobs(10.0, 10) == []
    assert s.get_session("alice", sess.id).turn_count == 0
    # Without a caught error the same writes commit, turn numbers and all.
    with s.transaction():
        s.append_messages("alice", sess.id, [NewMessage("user", "one"),
                                             NewMessage("assistant", "two")], [1, 1],
                          [None, None], 2.0)
        s.enqueue_job("embed_messages", {"ids": []}, "alice", 2.0)
    assert [m.turn_index for m in s.get_messages("alice", sess.id)] == [1, 2]
    assert s.get_session("alice", sess.id).turn_count == 2
    with pytest.raises(NotFound):
        s.append_messages("alice", "no-such-session", [NewMessage("user", "x")], [1], [None],
                          3.0)


def test_pg_reads_are_one_statement_each_and_a_batch_write_is_atomic(
    pg_store: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pooled connections are in autocommit: a read outside a transaction, alone or in a
    read batch (a compile's), is its statement alone, with no BEGIN and COMMIT round
    trips around it. A write in a read batch still runs in a transaction of its own, so
    one that fails halfway leaves nothing behind and the batch goes on."""
    from psycopg._connection_base import BaseConnection

    s = pg_store
    sess = s.create_session(session())
    commands: list[bytes] = []
    exec_command = BaseConnection._exec_command

    me = threading.current_thread()

    def spy(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is me:  # not the pool's threads making connections
            commands.append(command if isinstance(command, bytes) else str(command).encode())
        return exec_command(self, command, *args, **kwargs)

    monkeypatch.setattr(BaseConnection, "_exec_command", spy)
    assert s.get_session("alice", sess.id) is not None
    with s.read_batch():
        assert s.get_session("alice", sess.id) is not None
        assert s.get_messages("alice", sess.id) == []
    assert commands == []
    with s.read_batch():
        # The session's turn count is raised before the message insert fails (the
        # server refuses NUL in text): both are undone.
        with pytest.raises(InvalidInput):
            s.append_messages("alice", sess.id, [NewMessage("user", "a\x00b")], [1], [None],
                              1.0)
        assert s.get_session("alice", sess.id).turn_count == 0
        s.append_messages("alice", sess.id, [NewMessage("user", "kept")], [1], [None], 2.0)
    assert any(c.startswith(b"BEGIN") for c in commands)
    assert [m.content for m in s.get_messages("alice", sess.id)] == ["kept"]
    assert s.get_session("alice", sess.id).turn_count == 1


def test_pg_own_partition_statements_read_what_the_parents_would() -> None:
    """Outside row-level security and transactions, the memory candidates and the history
    are read from the user's own partitions (named from the server's hash function),
    prepared once per pooled connection and run with their generic plan; they return what
    the same reads through the partitioned parents return."""
    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        now = time.time()
        users = [f"user-{i}" for i in range(40)] + ["ünïcode", "x" * 200]
        sessions = {}
        for i, user in enumerate(users):
            sess = sessions[user] = s.create_session(session(user))
            s.append_messages(user, sess.id, [NewMessage("user", f"turn {j} of {user}")
                                              for j in range(6)], [3] * 6, [None] * 6, now)
            kept = s.insert_memory(memory(f"rust notes {i}", user=user, entities=("rust",)),
                                   vec(i % DIM))
            s.insert_memory(memory(f"scratch rust {i}", user=user, tier=Tier.WORKING,
                                   session_id=sess.id, scope=Scope.LOCAL), vec((i + 1) % DIM))
            s.link_entities(user, kept.id, ["rust"])
            s.record_access(user, [(kept.id, 1.0)], now)
        with s.transaction():  # inside one: the parents, which see its writes
            assert not any(s.connection.tables(user).own for user in users)
        flt = MemoryFilter(now=now)

        def reads(user: str) -> tuple[Any, ...]:
            return (
                s.memory_candidates(user, "rust notes", vec(0), flt, knn_k=5, keyword_k=5,
                                    entities=["rust"], entity_k=5, frequent_k=5),
                s.recent_messages(user, sessions[user].id, 10),
            )

        mine = {user: reads(user) for user in users}
        assert all(s.connection.tables(user).own for user in users)
        for user in users:
            tables = s.connection.tables(user)
            for table in ("memory_stats", "memory_entities", "messages"):
                (leaf,), = s.connection.rows(
                    f"SELECT DISTINCT tableoid::regclass::text FROM {table} "
                    "WHERE user_id = %s", (user,))
                assert leaf.startswith(getattr(tables, table)), (user, table, leaf)
            sharing = 0
            for table in ("memories_durable", "memories_working"):
                (leaf,), = s.connection.rows(
                    f"SELECT DISTINCT tableoid::regclass::text FROM {table} "
                    "WHERE user_id = %s", (user,))
                assert re.search(rf"FROM {leaf}\b", tables.memories), (user, leaf)
                sharing += s.connection.rows(f"SELECT count(DISTINCT user_id) FROM {leaf} "
                                "WHERE user_id <> %s", (user,))[0][0]
            # A generic plan only for a user alone in their memory partitions.
            assert s.connection.sole_owner(user, tables) == (sharing == 0), (user, sharing)
        alone = [user for user in users if s.connection.sole_owner(user, s.connection.tables(user))]
        assert 0 < len(alone) < len(users)  # 42 users in 32 partitions: both kinds
        pool = s.connection._own_pool
        conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
        try:  # every connection of the pool: what it prepared, and how it planned it
            prepared = [row for conn in conns for row in conn.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")]
        finally:
            for conn in conns:
                pool.putconn(conn)
        # The candidates' statements (the KNN's), and their keyword channels' (beside).
        unions = [row for row in prepared if "'v' AS via" in row[0]]
        keyword = [row for row in prepared if "'k' AS via" in row[0]]
        assert unions and all(g >= 1 and c == 0 for _, g, c in prepared), prepared
        # A generic plan over a parent would lock every partition: none is named here.
        parents = re.compile(r"\b(memories|memory_stats|memory_entities|messages)\b(?!_)")
        assert not [st for st, _, _ in prepared if parents.search(st.replace(" AS memories", ""))]
        # Users who share their partitions ran their candidates elsewhere (custom plans).
        assert len(unions) <= len(alone) and len(keyword) <= len(alone)
        s._tables = lambda user, **_: pgb.PARENTS  # type: ignore[method-assign]
        for user in users:
            found, history = mine[user]
            assert reads(user) == mine[user]
            assert len(found) == 2 and len(history) == 4  # 10 tokens: 3 + 3 + 3 (+ 1 over)
            assert all(f.memory.user_id == user for f in found.values())
    finally:
        s.close()


def test_pg_own_partitions_under_row_level_security_hold_only_the_acting_users_rows() -> None:
    """An authenticated request's memory candidates for its own user come from that
    user's partitions, whose own policies (migration 009) show memd_app the acting user's
    rows only: prepared in the request's transaction and run with their generic plan for
    a user alone in their partitions, planned per call for one who shares them; either
    way what the parents' policies give. A leaf read directly as memd_app shows no other
    user's row, and takes no write."""
    import psycopg

    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        s.check_row_security()
        guarded = s.connection.rows(
            "SELECT c.relname, c.relrowsecurity, (SELECT count(*) FROM pg_policies p "
            "WHERE p.tablename = c.relname AND p.policyname = 'memd_own_rows') "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname IN "
            "('memories_working', 'memories_durable', 'memory_stats', 'memory_entities')")
        assert len(guarded) == 4 * 32 and all(rls and n == 1 for _, rls, n in guarded)
        alice = s.connection.tables("alice")  # no request: computed as the owner
        bob = next(u for u in (f"bob{i}" for i in range(200))
                   if s.connection.tables(u).memory_leaves != alice.memory_leaves)
        carol = next(u for u in (f"carol{i}" for i in range(2000))
                     if s.connection.tables(u).memory_leaves == alice.memory_leaves)
        now = time.time()
        flt = MemoryFilter(now=now, workspaces=("team", ""))
        kw: dict[str, Any] = dict(knn_k=5, keyword_k=5, entities=["rust"], entity_k=5,
                                  frequent_k=5)
        for user in ("alice", bob):
            s.create_user(user, user, 1.0)
            s.add_workspace_member("team", user, 1.0)

        def add(user: str, text: str, workspace: str | None = None) -> Memory:
            made = s.insert_memory(memory(text, user=user, workspace=workspace,
                                          entities=("rust",)), vec(len(text) % DIM))
            s.link_entities(user, made.id, ["rust"])
            s.record_access(user, [(made.id, 1.0)], now)
            return made

        mine = {add("alice", "alice's rust notes").id,
                add("alice", "alice's team rust notes", "team").id}
        add(bob, "bob's private rust notes")
        add(bob, "bob's team rust notes", "team")

        def candidates() -> dict[str, Any]:
            with acting_as("alice"), s.read_batch():
                return s.memory_candidates("alice", "rust notes", vec(0), flt, **kw)

        def through_parents() -> dict[str, Any]:
            s._tables = lambda user, **_: pgb.PARENTS  # type: ignore[method-assign]
            try:
                return candidates()
            finally:
                del s._tables

        def prepared() -> list[tuple[str, int, int]]:
            pool = s.connection._pool
            conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
            try:
                return [row for conn in conns for row in conn.execute(
                    "SELECT statement, generic_plans, custom_plans "
                    "FROM pg_prepared_statements WHERE statement LIKE '%%UNION ALL%%'")]
            finally:
                for conn in conns:
                    pool.putconn(conn)

        assert s.connection.sole_owner("alice", alice)
        found = candidates()
        assert set(found) == mine and found == through_parents()
        unions = prepared()
        assert unions and all(g >= 1 and c == 0 for _, g, c in unions), unions
        assert all(alice.memory_leaves[1] in st for st, _, _ in unions)
        # carol shares alice's partitions: alice's candidates are planned per call now,
        # and carol's rows stay out of them.
        add(carol, "carol's rust notes")
        s.connection._sole_owners.clear()
        assert not s.connection.sole_owner("alice", alice)
        found = candidates()
        assert set(found) == mine and found == through_parents()
        with s.connection._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT set_config('role', 'memd_app', true), "
                         "set_config('memd.user_id', 'alice', true)")
            for leaf in (*alice.memory_leaves, alice.memory_stats, alice.memory_entities):
                users = {r[0] for r in conn.execute(f"SELECT user_id FROM {leaf}")}
                assert users <= {"alice"}, (leaf, users)
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(f"DELETE FROM {alice.memory_stats}")
            # The keyword probe over own leaves (migration 011) runs as the owner: it
            # answers for the acting user only, over memory partitions only.
            probe = ("SELECT memory_id FROM memd_keyword_own_memory_top(%s, %s, %s, "
                     "websearch_to_tsquery('english', 'rust'), 50, true, NULL, false, NULL, "
                     "NULL, NULL, NULL, NULL)")
            hits = {r[0] for r in conn.execute(probe, ("alice", *alice.memory_leaves))}
            assert hits == mine  # carol's rust notes share the leaves, not the answer
            for args in (("carol", *alice.memory_leaves),
                         (bob, *s.connection.tables(bob).memory_leaves)):
                with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                    conn.execute(probe, args)
            for leaves in ((alice.memory_stats, alice.memory_leaves[1]),
                           (alice.memory_leaves[1], alice.memory_leaves[0]),
                           ("api_keys", "users"), ('x"; DROP TABLE users; --', "y")):
                with pytest.raises(psycopg.errors.InvalidParameterValue), conn.transaction():
                    conn.execute(probe, ("alice", *leaves))
    finally:
        s.close()


def test_pg_own_leaves_keyword_probe_applies_the_whole_filter() -> None:
    """Under row-level security the keyword channel over a user's own leaves takes the
    probe's top k (memd_keyword_own_memory_top, migration 011), so the probe must apply
    every part of the filter the statement does: for each filter the keyword hits are
    those of the unauthenticated statement, though higher-ranked rows that the filter
    hides (inactive, superseded, expired, another session's, another tier, scope or
    workspace, without the tag) would fill a top k taken before it."""
    from memd.backends import postgres as pgb

    s = pgb.PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        s.create_user("alice", "alice", 1.0)
        now = time.time()
        here, there = "s-here", "s-there"
        loud = "rust rust rust rust notes"  # ranks above every "rust notes"
        hidden = [
            dict(is_active=False), dict(superseded_by="m-newer"), dict(expires_at=now - 60),
            dict(scope=Scope.LOCAL, session_id=there), dict(tier=Tier.EPISODIC),
            dict(workspace="elsewhere"),
        ]
        for kw in hidden:
            s.insert_memory(memory(loud, **kw), vec(1))
        shown = {s.insert_memory(memory(f"rust notes {i}", tags=("lang",)), vec(2)).id
                 for i in range(3)}
        shown.add(s.insert_memory(memory("rust notes here", scope=Scope.LOCAL,
                                         session_id=here, tags=("lang",)), vec(2)).id)
        filters = [
            MemoryFilter(now=now, workspaces=("",), session_id=here,
                         tiers=(Tier.SEMANTIC,), tags=("lang",)),
            MemoryFilter(now=now, workspaces=("",), session_id=here, scope=Scope.GLOBAL),
            MemoryFilter(now=now, workspaces=("",), session_id=here),
        ]

        def keyword_hits(flt: MemoryFilter, actor: str | None) -> dict[str, float]:
            with acting_as(actor), s.read_batch():
                found = s.memory_candidates("alice", "rust", vec(0), flt, knn_k=1,
                                            keyword_k=2)
            return {mid: f.keyword for mid, f in found.items() if f.keyword > 0}

        assert set(keyword_hits(filters[0], None)) <= shown  # every loud one hidden
        assert not set(keyword_hits(filters[2], None)) <= shown  # the other tier's shows
        for flt in filters:
            plain = keyword_hits(flt, None)
            assert len(plain) == 2 and keyword_hits(flt, "alice") == plain, flt
        wide = MemoryFilter(include_inactive=True, include_superseded=True,
                            include_expired=True)
        assert len(keyword_hits(wide, "alice")) == 2
        assert set(keyword_hits(wide, "alice")).isdisjoint(shown)  # the loud ones now
    finally:
        s.close()


def test_pg_own_partitions_are_not_read_for_another_user_under_row_level_security(
    pg_store: Any,
) -> None:
    """An authenticated request naming another user reads through the parents, whose
    policies bind it: bob's private memories stay out of alice's request."""
    s = pg_store
    s.insert_memory(memory("bob's private rust notes", user="bob"), vec(0))
    flt = MemoryFilter()
    kw: dict[str, Any] = dict(knn_k=5, keyword_k=5, entities=["rust"], entity_k=5,
                              frequent_k=5)
    assert len(s.memory_candidates("bob", "rust notes", vec(0), flt, **kw)) == 1
    with acting_as("alice"):
        assert s.memory_candidates("bob", "rust notes", vec(0), flt, **kw) == {}
    with s.transaction():  # a transaction's own write is seen by its reads
        made = s.insert_memory(memory("fresh rust notes", user="bob"), vec(1))
        assert made.id in s.memory_candidates("bob", "rust notes", vec(1), flt, **kw)
    with s.read_batch(), s.transaction():  # also one opened inside a read batch
        made = s.insert_memory(memory("newer rust notes", user="bob"), vec(2))
        assert made.id in s.memory_candidates("bob", "rust notes", vec(2), flt, **kw)


@contextmanager
def _protocol_trace(pool: Any) -> Iterator[list[str]]:
    """The libpq trace of every connection of ``pool`` while the block runs: one line a
    protocol message, "F" for the client's, "B" for the server's."""
    import tempfile

    from psycopg import pq

    lines: list[str] = []
    conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
    with tempfile.TemporaryFile("w+") as f:
        for conn in conns:
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            pool.putconn(conn)
        try:
            yield lines
        finally:
            conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
            for conn in conns:
                conn.pgconn.untrace()
                pool.putconn(conn)
            f.seek(0)
            lines += f.read().splitlines()


def test_pg_a_read_as_an_acting_user_is_one_round_trip_and_leaves_no_setting(
    pg_store: Any,
) -> None:
    """Under row-level security a read outside a transaction sends the role settings and
    its statement in one pipeline: one round trip (one ReadyForQuery, no BEGIN or
    COMMIT), in read batches too; its statement runs as memd_app for the acting user,
    and the pooled connection is back to the owner's role and no user after it."""
    s = pg_store
    s.check_row_security()
    s.create_session(session("alice", "s-a"))
    s.create_session(session("bob", "s-b"))
    whoami = "SELECT current_user::text, current_setting('memd.user_id', true)"
    with _protocol_trace(s.connection._pool) as trace, acting_as("alice"):
        assert s.connection.rows(whoami) == [("memd_app", "alice")]
        assert s.get_session("alice", "s-a") is not None
        assert s.get_session("bob", "s-b") is None  # bob's row: not the actor's
        with s.read_batch():
            assert s.get_facts("alice") == []
            assert s.get_session("alice", "s-a") is not None
    ready = [line for line in trace if "\tReadyForQuery" in line]
    assert len(ready) == 5, trace
    assert not [line for line in trace if "BEGIN" in line or "COMMIT" in line], trace
    owner = s.connection.rows(whoami)[0]
    assert owner[0] != "memd_app" and not owner[1]
    assert s.get_session("bob", "s-b") is not None


def test_pg_repeated_queries_keep_pruning_partitions() -> None:
    """psycopg prepares a statement once it has run 5 times; a generic plan for it would
    open (and lock) every partition, which at the production layout's thousands of leaves
    exhausts max_locks_per_transaction. The store keeps custom plans: the 30th run of
    the history query (prepared after 5, then planned
    generic after 5 more by default) still locks only the user's partition of each table."""
    from memd.backends.postgres import PostgresStore

    s = PostgresStore(pg.database(), dim=DIM, partitions=(32, 32, 32))
    try:
        sess = s.create_session(session())
        s.append_messages("alice", sess.id, [NewMessage("user", "hi")], [1], [None],
                          time.time())
        with s.transaction():
            conn = s.connection.current()
            for _ in range(30):
                assert len(s.get_messages("alice", sess.id, limit=5)) == 1
            locked = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'messages%%'"
            ).fetchone()[0]
        assert 0 < locked < 200, locked  # one hash partition: its months and indexes
    finally:
        s.close()


def test_pg_calls_list_under_row_level_security(pg_store: Any) -> None:
    """A request authenticated as alice lists her calls; bob's stay invisible to it even
    when it names bob, because the policies bind the statement, not just its filter."""
    s = pg_store
    s.check_row_security()
    record_calls(s)
    with acting_as("alice"):
        assert call_ids(s.list_calls("alice", since=300.0)) == ["c5", "c4", "c3"]
        assert s.list_calls("bob") == []
        with s.read_batch():
            assert call_ids(s.list_calls("alice", workspace="proj")) == ["c3", "c2"]
    assert call_ids(s.list_calls("bob")) == ["b1"]  # the owner, outside a request, sees it


def test_workers_never_wait_on_connections_their_callers_hold(tmp_path: Path) -> None:
    """A compile or a search holds a pooled connection (its read batch) while it waits
    for its worker thread; the workers read from a pool of their own. With every
    connection of the main pool held by a waiting request, they still finish (one
    shared pool would stall them until the pool's 30 s timeout, then fail)."""
    with memd.open(tmp_path / "d", embedder="fake", db=pg.database(),
                   pg_partitions=(4, 4, 4)) as m:
        s = m.create_session("u")
        m.append(s.id, "u", [{"role": "user", "content": "the narwhal tusk survey"}])
        while m.run_jobs():
            pass
        m.store.connection._pool.resize(min_size=1, max_size=1)  # type: ignore[attr-defined]
        out: dict[str, Any] = {}

        def run() -> None:
            out["ctx"] = m.context("u", session_id=s.id, query="narwhal")
            out["hits"] = m.search("narwhal", "u", k=5, kinds=["message"])

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(timeout=20)
        assert not worker.is_alive(), "a worker waited on a connection its caller held"
        assert out["ctx"].messages[-1]["content"] == "the narwhal tusk survey"
        assert [h.text for h in out["hits"]] == ["the narwhal tusk survey"]


def test_pg_row_security_check_fails_without_the_policies(pg_store: Any) -> None:
    """The start-up check of authenticated mode passes on a migrated database and
    raises once the row-level security policies are gone."""
    s = pg_store
    s.check_row_security()
    with s.transaction():
        conn = s.connection.current()
        for (table,) in conn.execute("SELECT format('%I.%I', schemaname, tablename) "
                                     "FROM pg_policies WHERE policyname = 'memd_own_rows'"
                                     ).fetchall():
            conn.execute(f"DROP POLICY memd_own_rows ON {table}")
    with pytest.raises(StorageError, match="policies"):
        s.check_row_security()


@pytest.mark.parametrize("backend", ["postgres"])
def test_row_level_security_holds_for_raw_sql(team: Team) -> None:
    """Under the application role, with memd.user_id naming alice, no statement reaches
    bob's rows, whatever its WHERE clause; without the setting it reaches nothing."""
    assert team.dsn is not None
    seed(team, "alice", "Aardvark")
    seed(team, "bob", "Zanzibar")
    deadline = time.monotonic() + 20
    while team.engine.store.pending_jobs():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    tables = ["sessions", "messages", "memories", "facts", "memory_entities", "usage_log",
              "calls", "users", "api_keys"]
    with psycopg.connect(team.dsn) as conn:
        owner = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE user_id = 'bob'").fetchone()
                 for t in tables}
        assert all(n is not None and n[0] > 0 for t, n in owner.items()
                   if t != "memory_entities"), owner
        conn.rollback()
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL ROLE memd_app")
            for t in tables:
                assert conn.execute(f"SELECT count(*) FROM {t}").fetchone() == (0,), t
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL ROLE memd_app")
            conn.execute("SELECT set_config('memd.user_id', 'alice', true)")
            for t in tables:
                rows = conn.execute(f"SELECT DISTINCT user_id FROM {t}").fetchall()
                assert rows in ([("alice",)], []), (t, rows)
            assert conn.execute("SELECT count(*) FROM messages WHERE user_id = 'bob' "
                                "OR content LIKE '%Zanzibar%'").fetchone() == (0,)
            zanzibar = "to_tsquery('english', 'zanzibar')"
            hits = conn.execute(f"SELECT * FROM memd_keyword_message_ranks('bob', {zanzibar}, "
                                f"{zanzibar}, 10, NULL)").fetchall()
            assert hits == []
            assert conn.execute(f"SELECT memd_keyword_message_counts('bob', "
                                f"ARRAY[{zanzibar}], 10)").fetchone() == ([0],)
            assert conn.execute("SELECT * FROM memd_keyword_memory_ids('bob', "
                                "to_tsquery('english', 'zanzibar'), 10, true, NULL)"
                                ).fetchall() == []
            assert conn.execute("UPDATE memories SET content_text = 'x' WHERE user_id = 'bob'"
                                ).rowcount == 0
            assert conn.execute("DELETE FROM sessions WHERE user_id = 'bob'").rowcount == 0
            deleted = conn.execute("DELETE FROM facts").rowcount
            assert deleted == 1  # alice's one fact, not bob's
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL ROLE memd_app")
            conn.execute("SELECT set_config('memd.user_id', 'alice', true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level"):
                conn.execute("UPDATE facts SET user_id = 'bob'")
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL ROLE memd_app")
            conn.execute("SELECT set_config('memd.user_id', 'alice', true)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("INSERT INTO usage_log (usage_id, user_id, created_at) "
                             "VALUES ('u1', 'bob', 0)")
        assert conn.execute("SELECT count(*) FROM facts WHERE user_id = 'bob'").fetchone() \
            == owner["facts"]


@pytest.mark.parametrize("actor", [None, "alice"], ids=["owner", "row-security"])
def test_pg_keyword_messages_ranks_a_bounded_part_of_a_long_history(
        pg_store: Any, monkeypatch: pytest.MonkeyPatch, actor: str | None) -> None:
    """Beyond RANK_ALL matches (counted per word) the message keyword channel ranks the
    matches of the query's rarest words, at any age, by the whole query, so in the
    whole ranking's order; a query of common words only, the matches among the newest
    messages. Up to RANK_ALL, every match is ranked. The same under row-level security,
    where no count or ranking reads another user's rows."""
    import memd.backends.postgres.messages as pm

    s = pg_store
    old = s.create_session(session())
    texts = ["an old note on the quokka migration and the build",  # rare + common, oldest
             "the quokka alone",  # rare word only, old
             "build build build build build failed once more"]  # common only, old
    texts += [f"the build step {i} ran {'again ' * (i % 5)}" for i in range(40)]
    new = s.create_session(replace(session(), created_at=2.0))  # the newest: 5 messages
    latest = [f"build server logs {'more ' * i}" for i in range(5)]
    ids = {m.id: m.content for m in s.append_messages(
        "alice", old.id, [NewMessage("user", t) for t in texts], [1] * len(texts),
        [None] * len(texts), 1.0)}
    ids.update({m.id: m.content for m in s.append_messages(
        "alice", new.id, [NewMessage("user", t) for t in latest], [1] * 5, [None] * 5, 2.0)})
    bob = s.create_session(session("bob"))
    s.append_messages("bob", bob.id, [NewMessage("user", "bob's quokka build")] * 30,
                      [1] * 30, [None] * 30, 3.0)

    def ranked(query: str, k: int = 100) -> list[str]:
        with acting_as(actor):
            return [ids[m.id] for m, _ in s.keyword_messages("alice", query, k)]

    whole = ranked("quokka build")  # 48 matches: every one ranked
    assert len(whole) == 48 and whole[0] == texts[0] and texts[2] in whole[:3]
    with acting_as(actor):  # within one session: its matches only
        in_new = [ids[m.id] for m, _ in s.keyword_messages("alice", "build", 100, new.id)]
    assert in_new == [t for t in whole if t in latest]
    monkeypatch.setattr(pm, "RANK_ALL", 10)
    monkeypatch.setattr(pm, "RARE_MATCHES", 3)
    monkeypatch.setattr(pm, "NEWEST_MESSAGES", 5)
    s.messages._counts = pm.WordCounts()  # counted afresh against the new caps
    # quokka's 2 matches (within 3), ranked as in the whole ranking: the first holds
    # "build" too, which counts in its rank; the 46 of build alone are not ranked, the
    # old one that says it five times among them
    assert ranked("quokka build") == [t for t in whole if "quokka" in t]
    assert ranked("quokka build", 1) == whole[:1]
    newest = ranked("build")
    assert newest == [t for t in whole if t in latest]
    monkeypatch.setattr(pm, "NEWEST_MESSAGES", 3)  # the newest session's last 3 turns
    assert set(ranked("build")) == set(latest[-3:])
    monkeypatch.setattr(pm, "NEWEST_MESSAGES", 7)  # and the 2 last of the one before
    assert set(ranked("build")) == {*latest, *texts[-2:]}
    monkeypatch.setattr(pm, "NEWEST_MESSAGES", 5)
    monkeypatch.setattr(pm, "RARE_MATCHES", 1)  # quokka's 2 matches are too many
    assert ranked("quokka build") == newest
    with acting_as(actor):
        counts = s.messages._word_counts("alice", ["quokka", "build", "zanzibar"])
    assert counts == [2, 11, 0]  # build: 46 matches, counted up to RANK_ALL + 1


def test_word_counts_expire_forget_and_hold_no_word() -> None:
    """The keyword search's per-word counts: reused for COUNTS_KEPT seconds, the least
    recently used dropped past the size, a user's dropped on demand, and no word kept
    as text."""
    from memd.backends.postgres.messages import COUNTS_KEPT, WordCounts

    counts = WordCounts(size=3)
    counts.put("alice", {"quokka": 2, "build": 501}, now=100.0)
    counts.put("bob", {"quokka": 7}, now=100.0)
    assert counts.get("alice", ["quokka", "build", "tea"], 100.0 + COUNTS_KEPT - 1) == {
        "quokka": 2, "build": 501}
    assert counts.get("alice", ["quokka"], 100.0 + COUNTS_KEPT) == {}
    assert "quokka" not in repr(counts._counts) and "build" not in repr(counts._counts)
    counts.get("alice", ["quokka"], 101.0)  # used: bob's is now the least recent
    counts.put("alice", {"tea": 1}, now=101.0)
    assert counts.get("bob", ["quokka"], 101.0) == {}
    counts.forget("alice")
    assert counts.get("alice", ["quokka", "build", "tea"], 101.0) == {}
