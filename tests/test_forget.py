"""Forgetting forgets what was derived: a memory takes the facts it stated with it, and a
fact can be forgotten with every value it had and the memories that state it; neither
comes back in search, in the facts or in the next context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import memd
from memd.engine.memory import Memd
from memd.errors import NotFound


def facts_of(engine: Memd) -> list[str]:
    return [f"{f.category}/{f.key}={f.value}"
            for f in engine.facts("alice", include_history=True)]


def context_text(engine: Memd, question: str) -> str:
    ctx = engine.context("alice", messages=[{"role": "user", "content": question}])
    return "\n".join(str(m["content"]) for m in ctx.messages)


def test_forgetting_a_memory_takes_the_fact_it_stated(engine: Memd) -> None:
    said = engine.add("I prefer tabs over spaces", "alice")
    assert "preference/indentation=tabs" in facts_of(engine)
    assert "tabs" in context_text(engine, "Which indentation do I prefer over spaces?")
    engine.forget(said.memory.id, "alice")
    assert facts_of(engine) == []
    assert "tabs" not in context_text(engine, "Which indentation do I prefer over spaces?")
    assert engine.search("indentation tabs", "alice", kinds=["memory", "fact"]) == []


def test_a_value_stated_elsewhere_stays(engine: Memd) -> None:
    first = engine.add("I prefer tabs over spaces", "alice")
    engine.add("Actually, I prefer spaces over tabs", "alice")
    engine.forget(first.memory.id, "alice")
    assert facts_of(engine) == ["preference/indentation=spaces"]


def test_forget_fact_deletes_every_value_and_the_memories_stating_it(engine: Memd) -> None:
    engine.add("I prefer tabs over spaces", "alice")
    engine.add("Actually, I prefer spaces over tabs", "alice")
    engine.add("My cat is called Miso", "alice")
    gone = engine.forget_fact("alice", "Preference", "Indentation ")
    assert sorted(f.value for f in gone) == ["spaces", "tabs"]
    assert not any(f.startswith("preference/indentation") for f in facts_of(engine))
    assert [m.text for m in engine.list("alice")] == ["My cat is called Miso"]
    assert "spaces" not in context_text(engine, "How should I indent this file?")
    with pytest.raises(NotFound, match="no fact preference/indentation"):
        engine.forget_fact("alice", "preference", "indentation")
    with pytest.raises(NotFound):
        engine.forget_fact("bob", "pets", "cat")


def test_a_memory_extracted_from_a_message_takes_that_messages_fact(engine: Memd) -> None:
    session = engine.create_session("alice")
    engine.append(session.id, "alice", [{"role": "user",
                                         "content": "By the way, I prefer tabs over spaces."}])
    while engine.run_jobs():
        pass
    (mem,) = engine.list("alice")
    assert "preference/indentation=tabs" in facts_of(engine)
    engine.forget(mem.id, "alice")
    assert facts_of(engine) == []
    assert "tabs" not in context_text(engine, "How should I indent this file?")


# -- memd facts, memd forget --fact, DELETE /v1/facts/{category}/{key} -------------------
def cli(*args: str) -> Any:
    from click.testing import CliRunner

    from memd.cli import main

    return CliRunner().invoke(main, list(args))


def test_cli_lists_and_forgets_facts(hermetic_env: Path) -> None:
    with memd.open() as m:
        m.add("I prefer tabs over spaces", "local")
        m.add("My name is Ada Lovelace", "local")
    listed = cli("facts")
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines() == ["identity/name = Ada Lovelace",
                                          "preference/indentation = tabs"]
    assert json.loads(cli("facts", "--json").output)[1]["value"] == "tabs"
    done = cli("forget", "--fact", "Preference/Indentation")
    assert done.exit_code == 0, done.output
    assert done.output == "forgot preference/indentation (1 value: tabs)\n"
    assert cli("facts").output == "identity/name = Ada Lovelace\n"
    with memd.open() as m:
        assert [x.text for x in m.list("local")] == ["My name is Ada Lovelace"]
    again = cli("forget", "--fact", "preference/indentation")
    assert again.exit_code != 0 and "no fact preference/indentation" in again.output
    assert cli("forget", "--fact", "indentation").exit_code == 2
    assert cli("forget").exit_code == 2  # neither a memory id nor --fact
    assert cli("facts", "--user", "nobody").output == "no facts\n"


def test_cli_forgets_a_fact_through_a_running_daemon(tmp_path: Path,
                                                     hermetic_env: Path) -> None:
    from servers import serve

    from memd.server.app import create_app
    from memd.server.discovery import remove_daemon_file, write_daemon_file

    served = memd.open(tmp_path / "served")
    served.add("I prefer tabs over spaces", "local")
    try:
        with serve(create_app(served, run_jobs=False)) as base:
            marker = write_daemon_file(hermetic_env, "127.0.0.1", int(base.rsplit(":", 1)[1]))
            try:
                done = cli("forget", "--fact", "preference/indentation")
                assert done.exit_code == 0, done.output
                assert served.facts("local") == []  # the daemon's store, not the CLI's
                missing = httpx.delete(f"{base}/v1/facts/preference/indentation")
                assert missing.status_code == 404
                assert "no fact preference/indentation" in missing.json()["error"]["message"]
            finally:
                remove_daemon_file(marker)
    finally:
        served.close()


@pytest.mark.parametrize("prefix", ["", "/w/rocket"])
def test_delete_fact_over_http_keeps_to_the_user_and_workspace(client: Any,
                                                               prefix: str) -> None:
    for ws in ("rocket", "other"):
        assert client.put("/v1/facts", json={
            "user_id": "alice", "category": "tooling", "key": "runner", "value": "pytest",
            "workspace": ws}).status_code == 200
    assert client.put("/v1/facts", json={"user_id": "bob", "category": "tooling",
                                         "key": "runner", "value": "nose"}).status_code == 200
    resp = client.delete(f"{prefix}/v1/facts/tooling/runner", params={"user_id": "alice"})
    assert resp.status_code == 200, resp.text
    workspaces = sorted(f["workspace"] for f in resp.json()["deleted"])
    assert workspaces == (["rocket"] if prefix else ["other", "rocket"])
    left = client.get("/v1/facts", params={"user_id": "alice"}).json()["facts"]
    assert [f["workspace"] for f in left] == ([] if not prefix else ["other"])
    assert len(client.get("/v1/facts", params={"user_id": "bob"}).json()["facts"]) == 1
    bad = client.delete(f"{prefix}/v1/facts/tooling/%00", params={"user_id": "alice"})
    assert bad.status_code in (400, 422)


def test_a_forgotten_memory_and_fact_never_come_back_from_the_same_message(
    tmp_path: Path,
) -> None:
    """Forgetting leaves a tombstone of each item and the message text it came from: the
    same message stored again (a branch of the session, a client resending it in a new
    chat) extracts nothing of it; the user saying it again in new words is remembered."""
    said = "I prefer tabs over spaces."
    with memd.open(tmp_path, embedder="fake") as m:
        first = m.create_session("alice")
        m.append(first.id, "alice", [{"role": "user", "content": said}])
        m.run_jobs()
        [mem] = m.list("alice")
        assert [f.value for f in m.facts("alice")] == ["tabs"]
        m.forget(mem.id, "alice")
        assert m.list("alice") == [] and m.facts("alice") == []
        again = m.create_session("alice")
        m.append(again.id, "alice", [{"role": "user", "content": said}])
        m.run_jobs()
        assert m.list("alice") == [] and m.facts("alice") == []
        other = m.create_session("bob")  # a tombstone is its user's only
        m.append(other.id, "bob", [{"role": "user", "content": said}])
        m.run_jobs()
        assert [x.text for x in m.list("bob")] != []
        m.append(again.id, "alice", [{"role": "user", "content": "Actually I prefer tabs "
                                                                 "over spaces, always."}])
        m.run_jobs()
        assert [f.value for f in m.facts("alice")] == ["tabs"]


def test_a_forgotten_fact_never_comes_back_from_the_same_message(tmp_path: Path) -> None:
    said = "My name is Alex and I prefer dark mode."
    with memd.open(tmp_path, embedder="fake") as m:
        s = m.create_session("alice")
        m.append(s.id, "alice", [{"role": "user", "content": said}])
        m.run_jobs()
        names = [f for f in m.facts("alice") if f.key == "name"]
        assert [f.value for f in names] == ["Alex"]
        m.forget_fact("alice", names[0].category, "name")
        branch = m.create_session("alice")
        m.append(branch.id, "alice", [{"role": "user", "content": said}])
        m.run_jobs()
        keys = sorted(f.key for f in m.facts("alice"))
        assert "name" not in keys and keys, keys  # the other fact of the message stays
