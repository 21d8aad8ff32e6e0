"""The engine's accounts part (users, keys, workspace members) and the registry's choice
of a store by the ``db`` setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import memd
from memd.errors import InvalidInput, NotFound
from memd.registry import names, store_class, store_for


def test_a_key_works_until_revoked_and_only_its_hash_is_stored(tmp_path: Path) -> None:
    with memd.open(tmp_path, embedder="fake") as m:
        m.accounts.add_user("alice", "Alice")
        made = m.accounts.create_key("alice", "laptop")
        assert made.secret.startswith("memd_") and made.user_id == "alice"
        assert m.accounts.user_of_key(made.secret) == "alice"
        assert m.accounts.user_of_key(made.secret + "x") is None
        assert m.accounts.user_of_key("not a key") is None
        [listed] = m.accounts.keys("alice")
        assert listed.id == made.id and listed.label == "laptop"
        assert made.secret not in repr(listed)
        m.accounts.revoke_key(made.id)
        assert m.accounts.user_of_key(made.secret) is None
        with pytest.raises(NotFound, match="no live key"):
            m.accounts.revoke_key(made.id)
        with pytest.raises(InvalidInput):
            m.accounts.add_user("bad id!")


def test_leaving_a_workspace_is_all_or_nothing(tmp_path: Path) -> None:
    with memd.open(tmp_path, embedder="fake") as m:
        for uid in ("alice", "bob", "carol"):
            m.accounts.add_user(uid)
        assert sorted(m.accounts.join("team", ["alice", "bob", "carol"])) == [
            "alice", "bob", "carol"]
        with pytest.raises(NotFound, match="'dave' is not a member"):
            m.accounts.leave("team", ["alice", "dave"])
        assert sorted(m.accounts.members("team")) == ["alice", "bob", "carol"]
        assert sorted(m.accounts.leave("team", ["alice"])) == ["bob", "carol"]


def test_the_registry_chooses_the_store_each_registered_store_says_it_opens() -> None:
    assert store_for("sqlite") is store_class("sqlite")
    assert store_for("/var/lib/memd/team.db") is store_class("sqlite")
    assert store_for("postgresql://memd@localhost/memd") is store_class("postgres")
    with pytest.raises(InvalidInput) as err:
        store_for("mysql://memd@localhost/memd")
    for name in names("memd.stores"):  # the error lists what every store opens
        assert store_class(name).db_forms in str(err.value)


def test_status_and_calls_go_through_the_engine(tmp_path: Path) -> None:
    with memd.open(tmp_path, embedder="fake") as m:
        m.add("I deploy on Fridays", "local")
        status = m.status()
        assert status["store"] == "SQLiteStore" and status["users"] == 1
        assert status["schema"] >= 1 and status["pending_jobs"] == m.pending_jobs()
        assert m.calls("local") == []
        with pytest.raises(NotFound, match="no call 'nope'"):
            m.call("local", "nope")
        with pytest.raises(InvalidInput):
            m.calls("local", session_id="bad id!")


def test_the_cli_manages_accounts_and_status_names_the_store(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from memd.cli import main

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, ["--data-dir", str(tmp_path), *args],
                                    env={"MEMD_EMBEDDER": "fake"})
        assert result.exit_code == 0, result.output
        return result.output

    run("user", "add", "alice")
    secret = run("key", "create", "--user", "alice").strip().splitlines()[-1]
    assert run("workspace", "add", "team", "alice") == "team: alice\n"
    with memd.open(tmp_path, embedder="fake") as m:
        assert m.accounts.user_of_key(secret) == "alice"
    status = run("status")
    assert "store:     SQLiteStore\n" in status
    assert re.search(r"^schema:    v\d+$", status, re.M)


def test_the_readme_team_block_works_as_written_on_postgresql(tmp_path: Path) -> None:
    """--data-dir, --config and --db after the command as well as before it: the users,
    keys and workspaces land in the PostgreSQL the daemon serves, and status names it."""
    from click.testing import CliRunner
    from servers import postgres_url

    from memd.cli import main

    dsn = postgres_url()

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, list(args), env={"MEMD_EMBEDDER": "fake"})
        assert result.exit_code == 0, result.output
        return result.output

    where = ("--data-dir", str(tmp_path), "--db", dsn)
    run("user", "add", "alice", *where)
    run("user", "add", "bob", *where)
    secret = run("key", "create", "--user", "alice", *where).strip().splitlines()[-1]
    assert run("workspace", "add", "rocket", "alice", "bob", *where) == "rocket: alice, bob\n"
    status = run("status", *where)
    assert "store:     PostgresStore\n" in status and dsn.split("@")[0] not in status
    assert not (tmp_path / "memd.db").exists()  # nothing went to SQLite
    with memd.open(tmp_path, embedder="fake", db=dsn) as m:
        assert m.accounts.user_of_key(secret) == "alice"
        assert sorted(m.accounts.members("rocket")) == ["alice", "bob"]
    # serve takes them after the command too (the port is refused, not the options)
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path), "--config",
                                       str(tmp_path / "none.toml"), "--port", "70000"])
    assert result.exit_code == 2 and "No such option" not in result.output
    assert "70000" in result.output
