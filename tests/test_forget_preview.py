"""A forget's preview names what the forget would remove, changes nothing, and matches
what the forget then does, on both backends and through the API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from servers import open_memd

from memd.engine.memory import Memd
from memd.server.app import create_app

SAID = "My name is Zorblax and I fly the Quasar rocket to Mars every week."
REPLY = "Nice to meet you, Zorblax! Flying the Quasar rocket sounds fun."


@pytest.fixture
def engine(backend: str, tmp_path: Path) -> Iterator[Memd]:
    m = open_memd(tmp_path / "d", backend)
    yield m
    m.close()


def tell(m: Memd, *turns: str) -> str:
    session = m.create_session("alice")
    roles = ["user", "assistant"] * len(turns)
    m.append(session.id, "alice", [{"role": r, "content": t}
                                   for r, t in zip(roles, turns, strict=False)])
    while m.run_jobs():
        pass
    return session.id


def test_the_preview_of_a_fact_forget_is_what_the_forget_removes(engine: Memd) -> None:
    sid = tell(engine, SAID, REPLY, "I also like tea.", "Tea is nice.")
    [source, *_] = engine.store.get_messages("alice", sid)
    summary = engine.add("Summary: Zorblax flies the Quasar rocket", "alice").memory
    engine.store.mark_compressed("alice", sid, [source.id], summary.id)
    seen = engine.forget_fact_preview("alice", "identity", "name")
    assert [f.value for f in seen.facts] == ["Zorblax"]
    assert [(m.role, m.content) for m in seen.pruned] == [("user", SAID), ("assistant", REPLY)]
    assert seen.summaries == [summary.id]
    assert [t for _, t in seen.titles] == [engine.store.get_session("alice", sid).title]
    # nothing changed: the fact, the messages and the title are all still there
    assert [f.value for f in engine.facts("alice")] == ["Zorblax"]
    assert not any(m.is_pruned for m in engine.store.get_messages("alice", sid))
    gone = engine.forget_fact_with_sources("alice", "identity", "name")
    assert [f.id for f in gone.facts] == [f.id for f in seen.facts]
    assert [m.id for m in gone.memories] == [m.id for m in seen.memories]
    assert [m.id for m in gone.pruned] == [m.id for m in seen.pruned]
    assert engine.store.get_session("alice", sid).title is None


def test_the_preview_of_a_memory_forget_names_its_facts_and_messages(engine: Memd) -> None:
    tell(engine, SAID, REPLY)
    [mem] = [x for x in engine.list("alice") if "Zorblax" in x.text]
    seen = engine.forget_preview(mem.id, "alice")
    assert [m.id for m in seen.memories] == [mem.id]
    assert [f.key for f in seen.facts] == ["name"]
    assert [m.content for m in seen.pruned] == [SAID, REPLY]
    assert engine.get(mem.id, "alice").text == mem.text  # still there
    gone = engine.forget_with_sources(mem.id, "alice")
    assert [m.id for m in gone.pruned] == [m.id for m in seen.pruned]
    assert engine.store.get_message("alice", seen.pruned[0].id).is_pruned


def test_the_api_previews_and_refuses_what_is_not_the_users(engine: Memd) -> None:
    sid = tell(engine, SAID, REPLY)
    [mem] = [x for x in engine.list("alice") if "Zorblax" in x.text]
    with TestClient(create_app(engine, run_jobs=False), base_url="http://127.0.0.1") as c:
        got = c.get(f"/v1/memories/{mem.id}/forget-preview", params={"user_id": "alice"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert [m["id"] for m in body["memories"]] == [mem.id]
        assert [f["value"] for f in body["facts"]] == ["Zorblax"]
        assert [(p["session_id"], p["role"], p["text"]) for p in body["pruned"]] == [
            (sid, "user", SAID), (sid, "assistant", REPLY)]
        fact = c.get("/v1/facts/identity/name/forget-preview", params={"user_id": "alice"})
        assert fact.status_code == 200 and fact.json()["pruned"] == body["pruned"]
        assert c.get(f"/v1/memories/{mem.id}/forget-preview",
                     params={"user_id": "bob"}).status_code == 404
        assert c.get("/v1/facts/identity/nope/forget-preview",
                     params={"user_id": "alice"}).status_code == 404
        assert c.get("/v1/memories/bad id!/forget-preview").status_code in (400, 422)
        assert engine.get(mem.id, "alice").is_active  # a preview deletes nothing
