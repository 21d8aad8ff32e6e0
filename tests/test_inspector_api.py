"""The inspector's routes: sessions a page at a time, usage per day/model/client/
workspace, and pausing learning (through the proxy: forwarded with memory, nothing
stored)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pg import BACKENDS
from servers import FakeUpstream, memd_in_front

from memd.engine.block.inject import USER_OPEN
from memd.engine.memory import Memd
from memd.types import Usage


def ok(resp: Any) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


def sessions(engine: Memd, n: int, workspace: str | None = None) -> list[str]:
    ids = []
    for i in range(n):
        s = engine.create_session("local", workspace=workspace)
        engine.append(s.id, "local", [{"role": "user", "content": f"hello {i}"}] * (i + 1))
        ids.append(s.id)
    return ids


def test_sessions_are_listed_newest_first_a_page_at_a_time(client: TestClient,
                                                           engine: Memd) -> None:
    made = sessions(engine, 5)
    seen, cursor, counts = [], None, {}
    while True:
        page = ok(client.get("/v1/sessions", params={"limit": 2, **(
            {"cursor": cursor} if cursor else {})}))
        assert len(page["data"]) <= 2
        seen += [s["id"] for s in page["data"]]
        counts.update({s["id"]: s["message_count"] for s in page["data"]})
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))  # newest first, each once
    assert [counts[i] for i in made] == [1, 2, 3, 4, 5]
    row = ok(client.get("/v1/sessions", params={"limit": 1}))["data"][0]
    assert set(row) >= {"id", "title", "client", "workspace", "created_at",
                        "last_active_at", "message_count"}


def test_sessions_filter_by_workspace_and_client(client: TestClient, engine: Memd) -> None:
    ours = sessions(engine, 2, workspace="proj")
    sessions(engine, 1)
    s = engine.create_session("local")
    engine.store.update_session("local", s.id, metadata={"identity": {"client": "opencode"}})
    assert [x["id"] for x in ok(client.get("/v1/sessions?workspace=proj"))["data"]] == \
        list(reversed(ours))
    assert [x["id"] for x in ok(client.get("/w/proj/v1/sessions"))["data"]] == \
        list(reversed(ours))
    got = ok(client.get("/v1/sessions", params={"client": "opencode"}))["data"]
    assert [(x["id"], x["client"]) for x in got] == [(s.id, "opencode")]
    assert ok(client.get("/v1/sessions", params={"user_id": "someone"}))["data"] == []


@pytest.mark.parametrize("params", [{"cursor": "not-a-cursor"}, {"cursor": "12~../x"},
                                    {"cursor": "1e999~s"}, {"limit": 0}, {"limit": 501},
                                    {"limit": "x"}])
def test_a_bad_cursor_or_limit_is_a_clear_400(client: TestClient, engine: Memd,
                                               params: dict[str, Any]) -> None:
    sessions(engine, 1)
    resp = client.get("/v1/sessions", params=params)
    assert resp.status_code in (400, 422), resp.text
    assert ("cursor" in resp.text) if "cursor" in params else ("limit" in resp.text)


def usage(engine: Memd, when: float, model: str, tokens: int, cost: int,
          workspace: str | None = None, client: str | None = None) -> None:
    engine.store.record_usage(Usage(
        id=f"u{when}{model}", user_id="local", created_at=when, workspace=workspace,
        model=model, prompt_tokens=tokens, completion_tokens=1, cost_microcents=cost,
        metadata={"client": client}))


def test_usage_sums_per_day_model_client_and_workspace(client: TestClient,
                                                       engine: Memd) -> None:
    day = 86400.0
    usage(engine, 20000 * day + 10, "gpt", 10, 100, "proj", "opencode")
    usage(engine, 20000 * day + 20, "llama", 20, 0, None, None)
    usage(engine, 20001 * day + 5, "gpt", 30, 300, "proj", "opencode")
    by_day = ok(client.get("/v1/usage"))
    assert [(r["key"], r["prompt_tokens"], r["calls"]) for r in by_day["data"]] == [
        ("2024-10-04", 30, 2), ("2024-10-05", 30, 1)]
    assert by_day["total"]["total_tokens"] == 63 and by_day["total"]["cost_usd"] == 400 / 1e8
    by_model = ok(client.get("/v1/usage?group_by=model"))["data"]
    assert {r["key"]: r["prompt_tokens"] for r in by_model} == {"gpt": 40, "llama": 20}
    by_client = ok(client.get("/v1/usage?group_by=client"))["data"]
    assert {r["key"]: r["calls"] for r in by_client} == {"opencode": 2, None: 1}
    by_ws = ok(client.get("/v1/usage?group_by=workspace"))["data"]
    assert {r["key"]: r["calls"] for r in by_ws} == {"proj": 2, None: 1}
    since = ok(client.get("/v1/usage", params={"since": "2024-10-05T00:00:00Z"}))
    assert [r["key"] for r in since["data"]] == ["2024-10-05"]
    until = ok(client.get("/v1/usage", params={"until": 20000 * day + 15}))
    assert until["total"]["calls"] == 1


@pytest.mark.parametrize("query", ["group_by=hour", "since=yesterday", "until=nan"])
def test_bad_usage_queries_are_400(client: TestClient, query: str) -> None:
    resp = client.get(f"/v1/usage?{query}")
    assert resp.status_code in (400, 422), resp.text
    assert query.split("=")[0] in resp.text


def test_pause_and_resume_per_user_and_workspace(client: TestClient) -> None:
    assert ok(client.get("/v1/pause"))["paused"] is False
    state = ok(client.post("/v1/pause", json={"workspace": "proj"}))
    assert state["changed"] and state["workspaces"][0]["workspace"] == "proj"
    assert ok(client.get("/w/proj/v1/pause"))["paused"] is True
    assert ok(client.get("/v1/pause"))["paused"] is False  # only that workspace
    assert ok(client.post("/v1/pause", json={}))["everywhere"] is True
    assert ok(client.get("/v1/pause?workspace=other"))["paused"] is True
    assert ok(client.post("/v1/resume", json={"workspace": "proj"}))["paused"] is True
    state = ok(client.post("/v1/resume", json={}))
    assert state["paused"] is False and state["workspaces"] == [] and state["changed"]
    assert ok(client.post("/v1/resume", json={}))["changed"] is False
    bad = client.post("/v1/pause", json={"workspace": "../x"})
    assert bad.status_code in (400, 422) and "workspace" in bad.text
    assert ok(client.get("/v1/pause"))["paused"] is False  # nothing written


@pytest.fixture(params=BACKENDS)
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeUpstream,
                                                                             Memd]]:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d", request.param) as (base, engine):
        yield base, upstream, engine


def test_a_paused_chat_is_forwarded_with_memory_and_stores_nothing(
        stack: tuple[str, FakeUpstream, Memd]) -> None:
    base, upstream, engine = stack
    engine.add("I deploy with Kubernetes", "local")
    ok(httpx.post(f"{base}/v1/pause", json={}, timeout=30))
    chat = {"model": "m", "messages": [{"role": "user",
                                        "content": "Which tool do I deploy with, Kubernetes?"}]}
    resp = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-memd-paused"] == "true" and "x-memd-session" not in resp.headers
    sent = upstream.requests[-1]["messages"][-1]["content"]
    assert USER_OPEN in str(sent) and "Kubernetes" in str(sent)  # injected all the same
    assert engine.store.list_sessions("local") == []  # nothing of the call stored
    assert [m.text for m in engine.list("local")] == ["I deploy with Kubernetes"]
    ok(httpx.post(f"{base}/v1/resume", json={}, timeout=30))
    chat["messages"][0]["content"] = "My name is Priya"
    assert httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=30).status_code == 200
    [session] = engine.store.list_sessions("local")
    assert engine.messages(session.id, "local")[0].content == "My name is Priya"


def test_messages_say_where_compaction_left_them(client: TestClient, engine: Memd) -> None:
    s = engine.create_session("local")
    stored = engine.append(s.id, "local", [{"role": "user", "content": "first words"},
                                           {"role": "assistant", "content": "a reply"}])
    engine.store.mark_compressed("local", s.id, [stored[0].id], "summary-1")
    got = ok(client.get(f"/v1/sessions/{s.id}/messages"))["messages"]
    assert [(m["is_compressed"], m["compressed_summary_id"], m["is_pruned"])
            for m in got] == [(True, "summary-1", False), (False, None, False)]
    assert all("sanitized" in m for m in got)


def test_calls_and_usage_take_the_same_time_bounds(client: TestClient) -> None:
    """One pair of since/until parameters serves both listings: their schemas agree."""
    paths = ok(client.get("/openapi.json"))["paths"]

    def bounds(path: str) -> dict[str, Any]:
        return {p["name"]: p for p in paths[path]["get"]["parameters"]
                if p["name"] in ("since", "until")}

    calls, usage = bounds("/v1/calls"), bounds("/v1/usage")
    assert set(calls) == {"since", "until"}
    assert calls == usage
    assert "date-time" in str(calls["since"]["schema"])
