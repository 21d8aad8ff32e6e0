"""Episodic recall through the proxy: what the user said in one chat reaches the model in
a later chat's memory block when it is related, and stays out when it is not. Real MiniLM
(the floor is a cosine), both backends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import FakeUpstream, memd_in_front

from memd.engine.block.compile import RECALL_HEADER
from memd.engine.memory import Memd

pytestmark = pytest.mark.real_model

STATEMENT = ("Before I forget: the staging host is staging.rocket.internal, and the deploy "
             "goes through the argo pipeline.")


@pytest.fixture
def proxy(tmp_path: Path, backend: str
          ) -> Iterator[tuple[str, FakeUpstream, Memd]]:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d", backend,
                       embedder="minilm-onnx") as (base, engine):
        yield base, upstream, engine


def chat(base: str, messages: list[dict[str, Any]]) -> httpx.Response:
    resp = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                      json={"model": "gpt-4o", "messages": messages})
    assert resp.status_code == 200, resp.text
    return resp


def settle(engine: Memd) -> None:
    """Run the background jobs now (embedding what was stored) instead of waiting for the
    daemon's worker."""
    engine.jobs.flush()
    deadline = time.monotonic() + 60
    while engine.store.pending_jobs():  # the daemon's worker may hold one: it ends soon
        assert time.monotonic() < deadline, "background jobs did not finish"
        if not engine.jobs.run_due():
            time.sleep(0.01)


def block_of(upstream: FakeUpstream) -> str:
    last_user = [m for m in upstream.requests[-1]["messages"] if m["role"] == "user"][-1]
    return str(last_user["content"]).split("</memory>")[0] if "<memory" in str(
        last_user["content"]) else ""


def test_a_statement_is_recalled_in_a_later_chat_and_only_when_related(
    proxy: tuple[str, FakeUpstream, Memd],
) -> None:
    base, upstream, engine = proxy
    chat(base, [{"role": "user", "content": STATEMENT}])
    settle(engine)
    for question in ("What is the staging host?", "Which hostname do we use for staging?",
                     "where does the staging deploy go?"):
        chat(base, [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": question}])
        block = block_of(upstream)
        assert RECALL_HEADER in block, (question, block)
        assert "staging.rocket.internal" in block, (question, block)
        assert "User: Before I forget" in block
        # the answer comes with it, as the assistant's reply, not as a fact
        assert "Assistant (earlier reply): ok: Before I forget" in block
    for unrelated in ("How long should sourdough bread proof?", "Recommend a sci-fi novel."):
        chat(base, [{"role": "user", "content": unrelated}])
        assert "staging.rocket.internal" not in block_of(upstream), unrelated


def test_what_the_client_sends_is_not_recalled(proxy: tuple[str, FakeUpstream, Memd]) -> None:
    base, upstream, engine = proxy
    first = [{"role": "user", "content": STATEMENT}]
    answer = chat(base, first).json()["choices"][0]["message"]
    settle(engine)
    # The same conversation goes on: its own statement is in the request already.
    chat(base, [*first, {"role": "assistant", "content": answer["content"]},
                {"role": "user", "content": "So what is the staging host again?"}])
    assert "staging.rocket.internal" not in block_of(upstream)
    # A regenerated copy of the same chat (a branch) sends the statement too, but not the
    # first answer (which the fake upstream made by echoing it): an assistant's reply is
    # not recalled on its own, without the user's words it answered.
    chat(base, [*first, {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "What is the staging host?"}])
    block = block_of(upstream)
    assert "User: Before I forget" not in block
    assert "ok: Before I forget" not in block


def test_recall_keeps_to_the_workspace(tmp_path: Path) -> None:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d", embedder="minilm-onnx") as (base, engine):
        httpx.post(f"{base}/w/rocket/v1/chat/completions", timeout=60,
                   json={"model": "gpt-4o", "messages": [{"role": "user",
                                                          "content": STATEMENT}]}
                   ).raise_for_status()
        settle(engine)
        for workspace, seen in (("rocket", True), ("other", False)):
            httpx.post(f"{base}/w/{workspace}/v1/chat/completions", timeout=60,
                       json={"model": "gpt-4o", "messages": [
                           {"role": "user", "content": "What is the staging host?"}]}
                       ).raise_for_status()
            assert ("staging.rocket.internal" in block_of(upstream)) is seen, workspace


def test_compiled_context_recalls_other_sessions_not_its_own(tmp_path: Path) -> None:
    import memd

    with memd.open(tmp_path / "c", embedder="minilm-onnx") as engine:
        said = engine.create_session("alice")
        engine.append(said.id, "alice", [{"role": "user", "content": STATEMENT},
                                         {"role": "assistant", "content": "Got it."}])
        settle(engine)
        asking = engine.create_session("alice")
        ctx = engine.context("alice", session_id=asking.id, messages=[
            {"role": "user", "content": "What is the staging host?"}])
        memory = "\n".join(str(m["content"]) for m in ctx.messages if m["role"] == "system")
        assert RECALL_HEADER in memory and "staging.rocket.internal" in memory
        assert "Assistant (earlier reply): Got it." in memory
        assert any(i.kind == "recall" for i in ctx.report.items)
        own = engine.context("alice", session_id=said.id, messages=[
            {"role": "user", "content": "What is the staging host?"}])
        assert not any(i.kind == "recall" for i in own.report.items)
        other_user = engine.context("bob", messages=[
            {"role": "user", "content": "What is the staging host?"}])
        assert [i.section for i in other_user.report.items] == ["history"]


def test_a_sessions_own_turn_beyond_the_historys_reach_is_recalled(tmp_path: Path) -> None:
    """A long session compiled into a small window: its first turns no longer fit the
    history, and what the user said there comes back through recall."""
    import memd

    filler = " ".join(f"Step {i}: the migration script renames column c{i}." for i in range(60))
    with memd.open(tmp_path / "c", embedder="minilm-onnx") as engine:
        s = engine.create_session("alice")
        engine.append(s.id, "alice", [{"role": "user", "content": STATEMENT},
                                      {"role": "assistant", "content": "Got it."}])
        for _ in range(6):
            engine.append(s.id, "alice", [{"role": "user", "content": filler},
                                          {"role": "assistant", "content": "Done."}])
        settle(engine)
        ask = [{"role": "user", "content": "What is the staging host?"}]
        small = engine.context("alice", session_id=s.id, messages=ask, context_window=4000,
                               max_response_tokens=500)
        kept = [str(m["content"]) for m in small.messages if m["role"] != "system"]
        assert not any("staging.rocket.internal" in t for t in kept)  # cut from history
        assert any(i.kind == "recall" for i in small.report.items)
        memory = "\n".join(str(m["content"]) for m in small.messages if m["role"] == "system")
        assert "staging.rocket.internal" in memory
        whole = engine.context("alice", session_id=s.id, messages=ask,
                               context_window=128_000)
        assert not any(i.kind == "recall" for i in whole.report.items)  # in the history


def test_recall_and_query_precision_are_settings(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import memd
    from memd.config import load_settings
    from memd.errors import InvalidInput

    monkeypatch.setenv("MEMD_MEMORY_RECALL", "off")
    monkeypatch.setenv("MEMD_QUERY_PRECISION", "float32")
    settings = load_settings(data_dir=tmp_path / "s", embedder="minilm-onnx")
    assert settings.memory_recall is False and settings.query_precision == "float32"
    with memd.open(settings=settings) as engine:
        assert engine.embedder.inner.query_precision == "float32"
        said = engine.create_session("alice")
        engine.append(said.id, "alice", [{"role": "user", "content": STATEMENT}])
        settle(engine)
        ctx = engine.context("alice", messages=[
            {"role": "user", "content": "What is the staging host?"}])
        assert not any(i.kind == "recall" for i in ctx.report.items)
    with pytest.raises(InvalidInput, match="query_precision"):
        load_settings(data_dir=tmp_path / "s", query_precision="int4")
    monkeypatch.setenv("MEMD_MEMORY_RECALL", "maybe")
    with pytest.raises(InvalidInput, match="memory_recall must be true or false"):
        load_settings(data_dir=tmp_path / "s")


def test_a_turn_that_fell_out_of_the_clients_window_is_recalled(
    proxy: tuple[str, FakeUpstream, Memd],
) -> None:
    """A client with a short window drops a long conversation's first turns; what the
    user said there still reaches the model when a later question needs it."""
    base, upstream, engine = proxy
    first = [{"role": "user", "content": STATEMENT}]
    answer = chat(base, first).json()["choices"][0]["message"]
    later = [{"role": "user", "content": "How long should sourdough bread proof?"},
             {"role": "assistant", "content": "Four to six hours at room temperature."}]
    chat(base, [*first, answer, *later])
    settle(engine)
    # The client keeps only its last turns: the statement is no longer in its request.
    chat(base, [*later, {"role": "user", "content": "What is the staging host?"}])
    sent = upstream.requests[-1]["messages"]
    assert not any("staging.rocket.internal" in str(m["content"]) for m in sent[:-1])
    block = block_of(upstream)
    assert "staging.rocket.internal" in block and "User: Before I forget" in block
