"""The CLI talks to the store the user named: through the daemon of the data dir when it
serves that store (or none is named), else on the named store itself; as the user of the
key in MEMD_API_KEY; and `memd status` and `memd doctor` tell the daemon's own store and
upstream.

The daemon is the real app on uvicorn in a thread, announced in daemon.json as `memd
serve` announces it, so that the CLI finds it exactly as it finds a daemon process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from servers import FakeUpstream, postgres_url, serve

import memd
from memd.cli import main
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.discovery import remove_daemon_file, store_place, write_daemon_file


def cli(*args: str, env: dict[str, str] | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(main, list(args), env=env or {})
    assert result.exit_code == code, result.output
    return result.output


@contextmanager
def daemon(data_dir: Path, db: str = "sqlite", **overrides: Any) -> Iterator[Memd]:
    """A daemon serving ``db`` for ``data_dir``; yields its engine."""
    settings = replace(load_settings(data_dir=data_dir, db=db), **overrides)
    engine = memd.open(settings=settings)
    try:
        with serve(create_app(engine, settings, run_jobs=False)) as url:
            port = int(url.rsplit(":", 1)[1])
            marker = write_daemon_file(data_dir, "127.0.0.1", port, store_place(settings))
            try:
                yield engine
            finally:
                remove_daemon_file(marker)
    finally:
        engine.close()


def texts(engine: Memd, user: str = "local") -> list[str]:
    return [m.text for m in engine.list(user)]


def other_store(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / "other.db") if kind == "sqlite" else postgres_url()


@pytest.mark.parametrize(("served", "named"), [
    ("sqlite", "sqlite"), ("sqlite", "postgres"), ("postgres", "sqlite")])
def test_add_with_another_db_writes_there_only(hermetic_env: Path, tmp_path: Path,
                                               served: str, named: str) -> None:
    served_db = "sqlite" if served == "sqlite" else postgres_url()
    other = other_store(named, tmp_path)
    with daemon(hermetic_env, served_db) as engine:
        assert cli("add", "The staging host is staging.rocket.internal", "--db",
                   other).startswith("inserted ")
        assert texts(engine) == []  # not in the daemon's store
        listed = json.loads(cli("list", "--json", "--db", other))
        assert [m["text"] for m in listed] == ["The staging host is staging.rocket.internal"]
        hits = json.loads(cli("search", "staging host", "--json", "--db", other))
        assert hits and hits[0]["text"].startswith("The staging host")
        # no --db: the daemon's store, through the daemon
        cli("add", "Deploys go out on Tuesdays")
        assert texts(engine) == ["Deploys go out on Tuesdays"]
    with memd.open(hermetic_env, db=other) as m:
        assert texts(m) == ["The staging host is staging.rocket.internal"]


def test_naming_the_daemons_store_goes_through_the_daemon(hermetic_env: Path) -> None:
    dsn = postgres_url()
    with daemon(hermetic_env, dsn) as engine:
        cli("add", "I prefer tabs over spaces", "--db", dsn)
        cli("add", "My cat is called Miso", env={"MEMD_DB": dsn})
        assert sorted(texts(engine)) == ["I prefer tabs over spaces", "My cat is called Miso"]
    assert not (hermetic_env / "memd.db").exists()


def test_a_command_that_opens_the_store_names_one_beside_a_daemon_on_another(
        hermetic_env: Path) -> None:
    with daemon(hermetic_env, postgres_url()):
        for command in (["user", "add", "bob"], ["export", str(hermetic_env / "x.jsonl")]):
            out = cli(*command, code=2)
            assert "serves PostgreSQL" in out and "--db" in out, command
        assert not (hermetic_env / "memd.db").exists()  # nothing written to SQLite
        cli("user", "add", "bob", "--db", "sqlite")  # named: the default store itself
    with memd.open(hermetic_env) as m:
        assert [u.id for u in m.accounts.users()] == ["bob"]


def test_with_a_key_the_cli_acts_as_its_user_and_list_needs_it_as_search_does(
        hermetic_env: Path) -> None:
    dsn = postgres_url()
    cli("user", "add", "alice", "--db", dsn)
    secret = cli("key", "create", "--user", "alice", "--db", dsn).strip().splitlines()[-1]
    with daemon(hermetic_env, dsn, auth=True) as engine:
        for command in (["list"], ["search", "tabs"], ["facts"]):
            out = cli(*command, "--db", dsn, code=2)
            assert "MEMD_API_KEY" in out, command  # both need the key, through the daemon
        key = {"MEMD_API_KEY": secret}
        cli("add", "I prefer tabs over spaces", "--db", dsn, env=key)
        assert texts(engine, "alice") == ["I prefer tabs over spaces"]
        assert "I prefer tabs over spaces" in cli("list", "--db", dsn, env=key)
        assert "I prefer tabs" in cli("search", "tabs", "--db", dsn, env=key)
        assert "cannot act as 'bob'" in cli("add", "x", "--user", "bob", "--db", dsn,
                                            env=key, code=2)


def test_with_a_key_on_a_store_opened_directly_the_cli_acts_as_its_user(
        hermetic_env: Path, tmp_path: Path) -> None:
    other = str(tmp_path / "team.db")
    cli("user", "add", "carol", "--db", other)
    secret = cli("key", "create", "--user", "carol", "--db", other).strip().splitlines()[-1]
    with daemon(hermetic_env) as engine:
        cli("add", "Carol reviews the release notes", "--db", other,
            env={"MEMD_API_KEY": secret})
        assert texts(engine) == [] and texts(engine, "carol") == []
        out = cli("add", "x", "--db", other, env={"MEMD_API_KEY": "memd_" + "x" * 40},
                  code=2)
        assert "MEMD_API_KEY is not a live key of this store" in out
    with memd.open(hermetic_env, db=other) as m:
        assert texts(m, "carol") == ["Carol reviews the release notes"]
        assert texts(m) == []


def test_status_names_the_daemons_store_and_upstream(hermetic_env: Path) -> None:
    dsn = postgres_url()
    password_dsn = dsn.replace("postgres:@", "postgres:hunter22@", 1)  # trust: unchecked
    assert password_dsn != dsn
    upstream = "http://user:sk-secret@127.0.0.1:9/v1"
    with daemon(hermetic_env, password_dsn, upstream_url=upstream):
        out = cli("status")
        assert "daemon:    answers at http://127.0.0.1:" in out
        assert "database:  PostgreSQL, database " in out
        assert "upstream:  http://127.0.0.1:9/v1\n" in out
        assert "hunter22" not in out and "sk-secret" not in out
        # a named store that is not the daemon's is the one told
        own = cli("status", "--db", "sqlite")
        assert "database:  SQLite, " in own and "for another store (it serves PostgreSQL" in own


def test_status_under_auth_without_a_key_still_names_the_store(hermetic_env: Path) -> None:
    with daemon(hermetic_env, postgres_url(), auth=True):
        out = cli("status")
    assert "database:  PostgreSQL, database " in out and "MEMD_API_KEY" in out


def test_doctor_checks_the_daemons_upstream_and_store(hermetic_env: Path) -> None:
    fake = FakeUpstream()
    with serve(fake.app) as upstream, daemon(hermetic_env, postgres_url(),
                                             upstream_url=f"{upstream}/v1"):
        found = {c["check"]: c for c in json.loads(cli("doctor", "--json"))}
    assert found["upstream"]["status"] == "ok", found["upstream"]
    assert found["upstream"]["detail"].startswith(f"the daemon's: {upstream}/v1 (asked "
                                                  "through the daemon) answers")
    assert found["store"]["detail"].startswith("the daemon's: PostgreSQL, database ")


def test_doctor_under_auth_without_a_key_asks_for_one(hermetic_env: Path) -> None:
    with daemon(hermetic_env, postgres_url(), auth=True, upstream_url="http://h:9/v1"):
        found = {c["check"]: c for c in json.loads(cli("doctor", "--json"))}
    assert found["upstream"]["status"] == "info"
    assert "does not tell its upstream without an API key" in found["upstream"]["detail"]
    assert found["upstream"]["fix"].startswith("set MEMD_API_KEY")


def test_doctor_warns_of_a_daemon_without_upstream(hermetic_env: Path) -> None:
    with daemon(hermetic_env):
        found = {c["check"]: c for c in json.loads(cli("doctor", "--json", code=0))}
    assert found["upstream"]["status"] == "warn"
    assert found["upstream"]["detail"].startswith("the daemon runs without one")


def test_an_empty_list_says_so_and_its_json_stays_a_list(hermetic_env: Path) -> None:
    assert cli("list") == "no memories\n"
    assert json.loads(cli("list", "--json")) == []
    with daemon(hermetic_env):
        assert cli("list") == "no memories\n"
        assert json.loads(cli("list", "--json")) == []
