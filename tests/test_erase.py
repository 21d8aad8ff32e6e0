"""Erasure (``memd forget --all``, ``--session``, ``--message``, ``DELETE
/v1/users/{id}``, ``/v1/sessions/{id}``, ``/v1/sessions/{id}/messages/{message_id}``,
``/v1/calls/{id}``) on both backends: after erasing a user no row of theirs is left in any
table (every partition, on PostgreSQL), on SQLite no byte of their text is left in any
file of the data dir, and another user is untouched."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from servers import open_memd, postgres_url

import memd
from memd.auth import acting_as
from memd.backends.common.erase import (
    ACCOUNT_TABLES,
    ERASED_USER,
    SHARED_TABLES,
    USER_TABLES,
)
from memd.cli import main as cli
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.errors import NotFound, StorageError
from memd.migrate.tables import TABLES
from memd.models.embedder import text_hash
from memd.server.app import create_app
from memd.types import Usage

# What each user says: words found nowhere else, to look for in the files.
SAYS = {
    "ursula": ("Quokkamander", "Zephyrbloom", "Vermilionite", "Xylobarista", "Hushpuppetry"),
    "victor": ("Otterlumen", "Bramblequartz", "Cobaltwhisk", "Dandelynx", "Emberfjord"),
}


@pytest.fixture
def engine(backend: str, tmp_path: Path) -> Iterator[Memd]:
    m = open_memd(tmp_path / "d", backend)
    yield m
    m.close()


def seed(m: Memd, user: str) -> dict[str, str]:
    """A row of ``user`` in every table, through the engine (and the store for what only
    the proxy and the CLI write); returns some ids."""
    memory, prompt, message, fact, call = SAYS[user]
    now = time.time()
    m.store.create_user(user, user.title(), now)
    m.store.add_api_key(f"key-{user}", user, f"hash-{user}", "", now)
    m.store.add_workspace_member("team", user, now)
    m.add(f"My deploy target is {memory} in Frankfurt", user)
    s = m.create_session(user, system_prompt=f"You are the {prompt} assistant")
    other = m.create_session(user)
    m.append(s.id, user, [{"role": "user", "content": f"my name is {message}"},
                          {"role": "assistant", "content": "Noted!"}])
    m.append(other.id, user, [{"role": "user", "content": "a second session"}])
    m.set_fact(user, "project", "codename", fact)
    m.run_jobs()
    m.store.record_call(f"call-{user}", user, s.id, None, "m", now, {"said": call})
    dead = m.store.enqueue_job("ingest", {"session_id": s.id, "text": call}, user, now)
    m.store.fail_job(dead, "planted", None)
    m.store.add_forgotten(user, ["digest"], now)
    m.search(f"{memory} {fact}", user)  # facts' embeddings are cached on the way
    return {"session": s.id, "other": other.id, "call": f"call-{user}"}


def user_tables(m: Memd) -> list[str]:
    """Every table of the schema with a user_id column (on PostgreSQL the parents:
    a query of a parent reads all its partitions)."""
    store: Any = m.store
    if m.settings.db.startswith("postgres"):
        rows = store.connection.rows(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND a.attname = 'user_id' AND NOT a.attisdropped")
        return sorted(r[0] for r in rows)
    read = store.connection.rows
    names = [r[0] for r in read("SELECT name FROM sqlite_master WHERE type = 'table' "
                                "AND sql NOT LIKE 'CREATE VIRTUAL%'")]
    return sorted(t for t in names
                  if any(c[1] == "user_id" for c in read(f"PRAGMA table_info({t})")))


def rows_of(m: Memd, user: str) -> dict[str, int]:
    store: Any = m.store
    mark = "%s" if m.settings.db.startswith("postgres") else "?"
    return {t: int(store.connection.rows(f"SELECT count(*) FROM {t} WHERE user_id = {mark}",
                               (user,))[0][0]) for t in user_tables(m)}


def test_erasure_covers_every_table_with_a_user(engine: Memd) -> None:
    """A table added to the schema or to memd migrate's list fails here until erasure
    covers it (memd.backends.common.erase)."""
    covered = {*USER_TABLES, *ACCOUNT_TABLES, *engine.store.erasure._memory_side_tables}  # type: ignore[attr-defined]
    assert set(user_tables(engine)) <= covered, set(user_tables(engine)) - covered
    assert {t.name for t in TABLES} <= covered | set(SHARED_TABLES) | {"memory_stats"}
    seed(engine, "ursula")
    counts = engine.erase_user("ursula")
    assert set(counts) == covered | set(SHARED_TABLES)


def test_erasing_a_user_leaves_no_row_of_theirs(engine: Memd) -> None:
    seed(engine, "ursula")
    seed(engine, "victor")
    before = rows_of(engine, "victor")
    assert all(before[t] for t in ("messages", "memories", "facts", "sessions", "calls",
                                   "jobs", "users", "api_keys", "forgotten"))
    counts = engine.erase_user("ursula")
    assert counts["messages"] == 3 and counts["sessions"] == 2 and counts["users"] == 1
    assert counts["system_prompts"] == 1 and counts["embedding_cache"] >= 3
    assert set(rows_of(engine, "ursula").values()) == {0}
    assert rows_of(engine, "victor") == before
    assert engine.list("ursula") == [] and engine.facts("ursula") == []
    assert engine.search("Quokkamander", "ursula", kinds=["memory", "message"]) == []
    assert [h.text for h in engine.search("Otterlumen", "victor")][:1] \
        == ["My deploy target is Otterlumen in Frankfurt"]
    with pytest.raises(NotFound):
        engine.erase_user("ursula")


def test_sqlite_files_keep_no_byte_of_an_erased_user(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d") as m:
        seed(m, "ursula")
        seed(m, "victor")
        m.forget(m.list("victor")[0].id, "victor")  # a forget alone does not scrub
        m.erase_user("ursula")
        files = sorted(p for p in (tmp_path / "d").iterdir() if p.is_file())
        assert any(p.name.endswith("-wal") for p in files)  # open: db, -wal, -shm
        data = b"".join(p.read_bytes() for p in files).lower()
        for word in SAYS["ursula"]:
            assert word.lower().encode() not in data, word
        for word in SAYS["victor"][1:]:
            assert word.lower().encode() in data, word


def test_postgres_acting_user_erases_only_itself(tmp_path: Path) -> None:
    settings = replace(load_settings(data_dir=tmp_path / "d"), db=postgres_url(),
                       pg_partitions=(4, 4, 4))
    with memd.open(settings=settings) as m:
        seed(m, "ursula")
        seed(m, "victor")
        before = rows_of(m, "ursula")
        with acting_as("victor"), pytest.raises(StorageError):
            m.store.erase_user("ursula")
        assert rows_of(m, "ursula") == before
        with acting_as("ursula"):
            m.erase_user("ursula")
        assert set(rows_of(m, "ursula").values()) == {0}
        assert rows_of(m, "victor")["memories"] > 0


def test_anonymized_usage_keeps_the_totals_and_names_no_one(engine: Memd) -> None:
    """With erase_usage = "anonymize", erasing a session and then the user keeps their
    usage rows' figures under ERASED_USER, with no session, workspace or metadata."""
    engine.settings = replace(engine.settings, erase_usage="anonymize")
    ids = seed(engine, "ursula")
    for sid, tokens in ((ids["session"], 100), (ids["other"], 30)):
        engine.store.record_usage(Usage(id=f"u-{tokens}", user_id="ursula", session_id=sid,
                                        workspace="team", prompt_tokens=tokens,
                                        metadata={"said": "Hushpuppetry"}, created_at=1.0))
    counts = engine.erase_session("ursula", ids["session"])
    assert counts["usage_log"] == 0 and counts["usage_log_anonymized"] == 1
    assert [u.prompt_tokens for u in engine.store.list_usage("ursula")] == [30]
    counts = engine.erase_user("ursula")
    assert counts["usage_log_anonymized"] == 1
    assert set(rows_of(engine, "ursula").values()) == {0}
    kept = engine.store.list_usage(ERASED_USER)
    assert sorted(u.prompt_tokens for u in kept) == [30, 100]
    assert {(u.session_id, u.workspace or None, json.dumps(u.metadata)) for u in kept} \
        == {(None, None, "{}")}


def test_postgres_acting_user_anonymizes_only_its_own_usage(tmp_path: Path) -> None:
    settings = replace(load_settings(data_dir=tmp_path / "d"), db=postgres_url(),
                       pg_partitions=(4, 4, 4), erase_usage="anonymize")
    with memd.open(settings=settings) as m:
        seed(m, "ursula")
        m.store.record_usage(Usage(id="u1", user_id="ursula", prompt_tokens=7, created_at=1.0))
        with acting_as("victor"), pytest.raises(StorageError):
            m.store.erase_user("ursula", anonymize_usage=True)
        with acting_as("ursula"):
            assert m.erase_user("ursula")["usage_log_anonymized"] == 1
        assert [u.prompt_tokens for u in m.store.list_usage(ERASED_USER)] == [7]


def test_erasing_a_session_keeps_the_rest(engine: Memd) -> None:
    ids = seed(engine, "ursula")
    seed(engine, "victor")
    victor = rows_of(engine, "victor")
    counts = engine.erase_session("ursula", ids["session"])
    assert counts["messages"] == 2 and counts["sessions"] == 1 and counts["calls"] == 1
    assert counts["facts"] == 1 and counts["memories"] >= 1 and counts["jobs"] == 1
    assert "users" not in counts and engine.store.get_user("ursula") is not None
    with pytest.raises(NotFound):
        engine.session(ids["session"], "ursula")
    assert [m.content for m in engine.messages(ids["other"], "ursula")] == ["a second session"]
    assert [m.text for m in engine.list("ursula")] \
        == ["My deploy target is Quokkamander in Frankfurt"]
    assert engine.facts("ursula")[0].value == "Xylobarista"  # set outside the session
    assert rows_of(engine, "victor") == victor
    with pytest.raises(NotFound):
        engine.erase_session("victor", ids["other"])


def test_erasing_a_message_keeps_its_session_and_the_rest(engine: Memd) -> None:
    ids = seed(engine, "ursula")
    victor = rows_of(engine, "victor") if seed(engine, "victor") else {}
    said, noted = engine.messages(ids["session"], "ursula")
    assert any(m.provenance_message_id == said.id for m in engine.list("ursula"))
    version = engine.session(ids["session"], "ursula").history_version
    counts = engine.erase_message("ursula", ids["session"], said.id)
    assert counts["messages"] == 1 and counts["memories"] >= 1
    assert "sessions" not in counts and "calls" not in counts
    assert [m.id for m in engine.messages(ids["session"], "ursula")] == [noted.id]
    assert engine.session(ids["session"], "ursula").history_version == version + 1
    assert not any(m.provenance_message_id == said.id for m in engine.list("ursula"))
    assert not any("Vermilionite" in h.text for h in engine.search(
        "Vermilionite", "ursula", kinds=["memory", "message", "fact"]))
    assert [m.text for m in engine.list("ursula")] \
        == ["My deploy target is Quokkamander in Frankfurt"]
    assert rows_of(engine, "victor") == victor
    with pytest.raises(NotFound):
        engine.erase_message("ursula", ids["session"], said.id)
    with pytest.raises(NotFound):  # another user's session
        engine.erase_message("victor", ids["session"], noted.id)


def test_sqlite_files_keep_no_byte_of_an_erased_message(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with memd.open(data) as m:
        ids = seed(m, "ursula")
        said = m.messages(ids["session"], "ursula")[0]
        m.erase_message("ursula", ids["session"], said.id)
        assert [x.content for x in m.messages(ids["session"], "ursula")] == ["Noted!"]
    for f in data.rglob("*"):
        if f.is_file():
            assert b"Vermilionite" not in f.read_bytes(), f
    with memd.open(data) as m:  # the rest of the user's text is still there
        assert m.list("ursula")


def test_forgetting_a_mixed_case_memory_leaves_no_cached_vector(engine: Memd) -> None:
    text = "Our Staging Cluster runs in Oslo"
    mem = engine.add(text, "ursula").memory
    name = engine.embedder.name
    assert engine.store.get_cached_embeddings(name, [text_hash(text)])
    engine.forget(mem.id, "ursula")
    assert engine.store.get_cached_embeddings(name, [text_hash(text)]) == {}


def test_erasure_through_the_api(engine: Memd) -> None:
    ids = seed(engine, "ursula")
    seed(engine, "victor")
    app = create_app(engine, run_jobs=False)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.delete(f"/v1/calls/{ids['call']}?user_id=victor").status_code == 404
        assert c.delete(f"/v1/calls/{ids['call']}?user_id=ursula").json() \
            == {"deleted": ids["call"]}
        assert c.delete(f"/v1/calls/{ids['call']}?user_id=ursula").status_code == 404
        said = engine.messages(ids["session"], "ursula")[0].id
        path = f"/v1/sessions/{ids['session']}/messages/{said}"
        assert c.delete(f"{path}?user_id=victor").status_code == 404
        gone = c.delete(f"{path}?user_id=ursula").json()
        assert gone["deleted"] == said and gone["rows"]["messages"] == 1
        assert c.delete(f"{path}?user_id=ursula").status_code == 404
        assert len(c.get(f"/v1/sessions/{ids['session']}/messages?user_id=ursula")
                   .json()["messages"]) == 1
        assert c.delete(f"/v1/sessions/{ids['session']}?user_id=victor").status_code == 404
        gone = c.delete(f"/v1/sessions/{ids['session']}?user_id=ursula").json()
        assert gone["deleted"] == ids["session"] and gone["rows"]["messages"] == 1
        assert c.get(f"/v1/sessions/{ids['session']}?user_id=ursula").status_code == 404
        erased = c.delete("/v1/users/ursula").json()
        assert erased["deleted"] == "ursula" and erased["rows"]["users"] == 1
        assert c.delete("/v1/users/ursula").status_code == 404
        assert c.get("/v1/memories?user_id=victor").json()["memories"]
    assert set(rows_of(engine, "ursula").values()) == {0}


def test_cli_forget_all_and_session(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    with memd.open(data) as m:
        ids = seed(m, "ursula")
        seed(m, "victor")
    runner = CliRunner()
    out = runner.invoke(cli, ["--data-dir", data, "forget", "--session", ids["other"],
                              "--user", "ursula"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"erased session {ids['other']}: ") and "messages 1" in out.output
    alone = runner.invoke(cli, ["--data-dir", data, "forget", "--message", "m1"])
    assert alone.exit_code == 2 and "--message needs --session" in alone.output
    with memd.open(data) as m:
        said = m.messages(ids["session"], "ursula")[0].id
    out = runner.invoke(cli, ["--data-dir", data, "forget", "--session", ids["session"],
                              "--message", said, "--user", "ursula"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith(f"erased message {said}: ") and "messages 1" in out.output
    refused = runner.invoke(cli, ["--data-dir", data, "forget", "--all", "--user", "ursula"],
                            input="n\n")
    assert refused.exit_code != 0 and "Aborted" in refused.output
    both = runner.invoke(cli, ["--data-dir", data, "forget", "--all", "--session", "x"])
    assert both.exit_code == 2 and "give one of" in both.output
    out = runner.invoke(cli, ["--data-dir", data, "forget", "--all", "--user", "ursula",
                              "--yes"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("erased user ursula: ") and "users 1" in out.output
    with memd.open(data) as m:
        assert set(rows_of(m, "ursula").values()) == {0}
        assert m.list("victor")
