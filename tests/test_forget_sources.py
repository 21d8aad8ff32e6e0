"""Forgetting a memory or a fact also stops memd reading the messages it came from, on
both backends: no later memory block recalls them, search does not find them, a compiled
history does not replay them, and the session title that quotes them is cleared; their
owner still reads them back, and the CLI says how to erase them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from servers import FakeUpstream, open_memd, postgres_url

import memd
from memd.cli import main as cli
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.server.app import create_app

SAID = "My name is Zorblax and I fly the Quasar rocket to Mars every week."
REPLY = "Nice to meet you, Zorblax! Flying the Quasar rocket sounds fun."
QUESTION = "Who flies the Quasar rocket to Mars?"


@pytest.fixture
def engine(backend: str, tmp_path: Path) -> Iterator[Memd]:
    # what a forget leaves recalled, not whether a line reads as an answer (the fake
    # embedder's cosines are not MiniLM's, which the answer score was fitted on)
    m = open_memd(tmp_path / "d", backend, recall_question_floor=0)
    yield m
    m.close()


def tell(m: Memd, *turns: str) -> str:
    """A session where the user says ``turns[0]`` and gets ``turns[1]``, and so on, with
    its jobs run; its id."""
    session = m.create_session("alice")
    roles = ["user", "assistant"] * len(turns)
    m.append(session.id, "alice", [{"role": r, "content": t} for r, t in zip(roles, turns,
                                                                             strict=False)])
    while m.run_jobs():
        pass
    return session.id


def block(m: Memd, question: str = QUESTION) -> str:
    """A later chat's compiled context, as text."""
    ctx = m.context("alice", messages=[{"role": "user", "content": question}])
    return "\n".join(str(x["content"]) for x in ctx.messages)


def test_forgetting_a_fact_stops_recall_of_its_message(engine: Memd) -> None:
    sid = tell(engine, SAID, REPLY, "I also like tea.", "Tea is nice.")
    other = tell(engine, "The Quasar rocket launches from pad 39.", "Noted.")
    assert "Zorblax" in block(engine)  # recalled before the forget
    assert "Zorblax" in (engine.store.get_session("alice", sid).title or "")
    gone = engine.forget_fact_with_sources("alice", "identity", "name")
    assert [f.value for f in gone.facts] == ["Zorblax"]
    assert [(p.role, p.content) for p in gone.pruned] == [("user", SAID), ("assistant", REPLY)]
    assert all(p.is_pruned for p in gone.pruned)
    later = block(engine)
    assert "Zorblax" not in later
    assert "pad 39" in later  # the rest of what the user said is still recalled
    hits = engine.search("Zorblax Quasar rocket", "alice", kinds=["message"])
    assert hits and not any("Zorblax" in h.text for h in hits)
    assert engine.store.get_session("alice", sid).title is None
    assert engine.store.get_session("alice", other).title is not None
    # the owner reads the messages back as sent; memd's own history skips them
    stored = engine.store.get_messages("alice", sid)
    assert [m.content for m in stored] == [SAID, REPLY, "I also like tea.", "Tea is nice."]
    assert [m.content for m in engine.store.get_messages("alice", sid, active_only=True)] == [
        "I also like tea.", "Tea is nice."]
    ctx = engine.context("alice", session_id=sid,
                         messages=[{"role": "user", "content": QUESTION}])
    assert "Zorblax" not in "\n".join(str(x["content"]) for x in ctx.messages)
    # a pruned message is never embedded again, and a second forget prunes nothing new
    assert engine.store.messages_missing_embedding("alice", 10) == []
    assert engine.store.prune_messages("alice", [p.id for p in gone.pruned]) == []


def test_forgetting_a_memory_prunes_its_source(engine: Memd) -> None:
    tell(engine, SAID, REPLY)
    [mem] = [x for x in engine.list("alice") if "Zorblax" in x.text]
    assert "Zorblax" in block(engine)
    gone = engine.forget_with_sources(mem.id, "alice")
    assert [p.content for p in gone.pruned] == [SAID, REPLY]
    assert "Zorblax" not in block(engine)
    assert engine.facts("alice") == []


def test_copies_of_the_source_message_are_pruned_too(engine: Memd) -> None:
    first = tell(engine, SAID, REPLY)
    branch = tell(engine, SAID, "Hello again, Zorblax.")  # a branch: the same words again
    tell(engine, "Zorblax is also a game.", "Fun.")  # another user message naming it
    gone = engine.forget_fact_with_sources("alice", "identity", "name")
    assert sorted((p.session_id, p.role) for p in gone.pruned) == sorted(
        [(first, "user"), (first, "assistant"), (branch, "user"), (branch, "assistant")])
    assert "Zorblax is also a game" in block(engine, "What is Zorblax?")
    assert SAID not in block(engine)


def test_a_copy_stored_after_the_forget_is_pruned_as_it_arrives(engine: Memd) -> None:
    """A client that resends the old conversation in a new chat, or branches it, stores
    the forgotten message again: it is pruned with its reply, and titles nothing."""
    tell(engine, SAID, REPLY)
    engine.forget_fact("alice", "identity", "name")
    again = tell(engine, SAID, REPLY, "Now, about the launch window.", "Sure.")
    stored = engine.store.get_messages("alice", again)
    assert [m.is_pruned for m in stored] == [True, True, False, False]
    assert "Zorblax" not in (engine.store.get_session("alice", again).title or "")
    assert engine.facts("alice") == []
    assert "Zorblax" not in block(engine)
    said_anew = tell(engine, "Call me Zorblax from now on, my name is Zorblax.", "OK.")
    assert not any(m.is_pruned for m in engine.store.get_messages("alice", said_anew))


def test_a_summary_of_a_pruned_message_goes(engine: Memd) -> None:
    sid = tell(engine, SAID, REPLY)
    [source, _] = engine.store.get_messages("alice", sid)
    summary = engine.add("Summary: Zorblax flies the Quasar rocket", "alice").memory
    engine.store.mark_compressed("alice", sid, [source.id], summary.id)
    engine.store.update_session("alice", sid, summary_text="Zorblax flies rockets",
                                summary_token_count=5)
    engine.forget_fact("alice", "identity", "name")
    assert summary.id not in [x.id for x in engine.list("alice", include_inactive=True)]
    assert engine.store.get_session("alice", sid).summary_text is None


def test_a_later_chat_through_the_proxy_gets_no_block_with_it(backend: str,
                                                               tmp_path: Path) -> None:
    """What the issue saw: forget the fact, then a new chat through the proxy."""
    upstream = FakeUpstream()
    settings = replace(load_settings(data_dir=tmp_path / "d"),
                       upstream_url="http://upstream/v1")
    if backend == "postgres":
        settings = replace(settings, db=postgres_url(), pg_partitions=(4, 4, 4))
    engine = memd.open(settings=settings)
    app = create_app(engine, settings, run_jobs=False,
                     upstream_transport=httpx.ASGITransport(app=upstream.app))
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": SAID}]}
    ask = {"model": "fake-model", "messages": [{"role": "user", "content": QUESTION}]}
    try:
        with TestClient(app, base_url="http://127.0.0.1") as c:
            assert c.post("/v1/chat/completions", json=chat).status_code == 200
            while engine.run_jobs():
                pass
            assert c.post("/v1/chat/completions", json=ask).status_code == 200
            assert "Zorblax" in str(upstream.requests[-1]["messages"])  # recalled
            gone = c.delete("/v1/facts/identity/name", params={"user_id": "local"})
            assert gone.status_code == 200 and gone.json()["pruned"], gone.text
            assert c.post("/v1/chat/completions", json=ask).status_code == 200
            assert "Zorblax" not in str(upstream.requests[-1]["messages"])
    finally:
        engine.close()


def test_api_and_cli_name_the_pruned_messages(engine: Memd, tmp_path: Path) -> None:
    sid = tell(engine, SAID, REPLY)
    with TestClient(create_app(engine, run_jobs=False), base_url="http://127.0.0.1") as c:
        resp = c.delete("/v1/facts/identity/name", params={"user_id": "alice"})
        assert resp.status_code == 200, resp.text
        pruned = resp.json()["pruned"]
        assert [(p["session_id"], p["role"]) for p in pruned] == [(sid, "user"),
                                                                  (sid, "assistant")]
        kept = c.get(f"/v1/sessions/{sid}/messages", params={"user_id": "alice"})
        assert SAID in kept.text  # the owner still reads it


def test_cli_forget_fact_says_what_happened_to_the_message(tmp_path: Path) -> None:
    with open_memd(tmp_path / "d") as m:
        sid = tell(m, SAID, REPLY)
        user_msg = m.store.get_messages("alice", sid)[0].id
    out = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "forget", "--fact",
                                   "identity/name", "--user", "alice"])
    assert out.exit_code == 0, out.output
    assert "forgot identity/name (1 value: Zorblax)" in out.output
    assert "2 messages" in out.output and "kept for you" in out.output
    assert f"memd forget --session {sid} --message {user_msg}" in out.output
    erase = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "d"), "forget",
                                     "--session", sid, "--message", user_msg,
                                     "--user", "alice"])
    assert erase.exit_code == 0, erase.output
    with open_memd(tmp_path / "d") as m:
        assert SAID not in [x.content for x in m.store.get_messages("alice", sid)]


def test_cli_scrub_alone_and_after_a_forget_on_sqlite(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with open_memd(data) as m:
        tell(m, SAID, REPLY)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--data-dir", str(data), *args])
        assert result.exit_code == 0, result.output
        return result.output

    out = run("forget", "--fact", "identity/name", "--user", "alice", "--scrub")
    assert out.index("forgot identity/name") < out.index("scrubbed the store's files")
    assert "database vacuumed" in run("forget", "--scrub")
    nothing = CliRunner().invoke(cli, ["--data-dir", str(data), "forget"])
    assert nothing.exit_code == 2 and "only --scrub" in nothing.output


def test_a_forget_before_the_jobs_run_leaves_them_nothing_to_write(engine: Memd) -> None:
    """The memory of a fact is written by a queued job: a forget of the fact while the
    job still waits (a busy queue, a stopped daemon) is not undone when it runs."""
    session = engine.create_session("alice")
    engine.append(session.id, "alice", [{"role": "user", "content": SAID}])
    assert [f.value for f in engine.facts("alice")] == ["Zorblax"]  # set inline
    assert engine.list("alice") == []  # its memory waits in the queue
    gone = engine.forget_fact_with_sources("alice", "identity", "name")
    assert [p.content for p in gone.pruned] == [SAID]
    while engine.run_jobs():
        pass
    assert not any("Zorblax" in m.text for m in engine.store.iter_memories("alice"))
    assert "Zorblax" not in block(engine)
