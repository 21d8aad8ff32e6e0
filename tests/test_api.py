"""The native HTTP API in-process (FastAPI TestClient, real SQLite, fake embedder):
round trips of every route, user and workspace isolation, the error shape, and that bad
input stores nothing."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

import memd
from memd.engine.memory import Memd

BASE = "http://127.0.0.1"


def ok(resp: Any, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def err(resp: Any, status: int, kind: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert isinstance(error["type"], str) and error["type"]
    assert isinstance(error["message"], str) and error["message"]
    if kind is not None:
        assert error["type"] == kind
    return dict(error)


def add(c: TestClient, text: str, prefix: str = "", **fields: Any) -> dict[str, Any]:
    body = ok(c.post(f"{prefix}/v1/memories", json={"text": text, **fields}), 201)
    assert isinstance(body, dict)
    return body


def search_ids(c: TestClient, query: str, prefix: str = "", **fields: Any) -> list[str]:
    hits = ok(c.post(f"{prefix}/v1/search", json={"query": query, **fields}))["hits"]
    return [h["id"] for h in hits]


def memory_ids(c: TestClient, **params: Any) -> list[str]:
    return [m["id"] for m in ok(c.get("/v1/memories", params=params))["memories"]]


# -- memories -------------------------------------------------------------------------
def test_memory_crud_round_trip(client: TestClient) -> None:
    created = add(client, "The staging  server runs Debian 12", tags=["style"], importance=0.7,
                  metadata={"source": "test"}, tier="procedural")
    assert created["action"] == "inserted" and created["replaced"] == []
    mem = created["memory"]
    assert mem["text"] == "The staging server runs Debian 12"
    assert mem["user_id"] == "local" and mem["workspace"] is None
    assert (mem["tier"], mem["scope"], mem["provenance"], mem["kind"]) == (
        4, "global", "user_stated", "memory")
    assert mem["tags"] == ["style"] and mem["metadata"] == {"source": "test"}
    assert mem["importance"] == 0.7 and mem["confidence"] == 1.0 and mem["is_active"] is True
    assert mem["access_count"] == 1 and mem["superseded_by"] is None
    assert mem["token_count"] > 0 and mem["created_at"] == mem["updated_at"]
    assert set(mem) >= {"last_accessed_at", "expires_at", "entities", "session_id"}

    assert ok(client.get(f"/v1/memories/{mem['id']}")) == mem
    assert memory_ids(client) == [mem["id"]]

    patched = ok(client.patch(f"/v1/memories/{mem['id']}",
                              json={"tier": 3, "tags": ["style", "editor"], "importance": 0.9,
                                    "metadata": {"source": "edited"}}))
    assert patched["tier"] == 3 and patched["tags"] == ["style", "editor"]
    assert patched["importance"] == 0.9 and patched["metadata"] == {"source": "edited"}
    assert patched["text"] == mem["text"]
    assert ok(client.get(f"/v1/memories/{mem['id']}"))["tags"] == ["style", "editor"]

    assert ok(client.delete(f"/v1/memories/{mem['id']}")) == {"deleted": mem["id"], "pruned": []}
    err(client.get(f"/v1/memories/{mem['id']}"), 404, "not_found_error")
    err(client.delete(f"/v1/memories/{mem['id']}"), 404, "not_found_error")
    assert memory_ids(client) == []


def test_duplicate_add_bumps_access_count(client: TestClient) -> None:
    first = add(client, "My dog is called Rex")
    again = add(client, "  my dog is CALLED rex ")
    assert again["action"] == "duplicate"
    assert again["memory"]["id"] == first["memory"]["id"]
    assert again["memory"]["access_count"] == 2
    assert memory_ids(client) == [first["memory"]["id"]]


def test_list_paging_and_limits(client: TestClient) -> None:
    ids = [add(client, f"note number {w}")["memory"]["id"]
           for w in ("alpha", "bravo", "charlie")]
    page1, page2 = memory_ids(client, limit=2), memory_ids(client, limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 1 and set(page1 + page2) == set(ids)
    err(client.get("/v1/memories", params={"limit": 0}), 422)


def test_patch_text_changes_what_search_finds(client: TestClient) -> None:
    mid = add(client, "I love hiking in the Alps")["memory"]["id"]
    add(client, "The office wifi password is on the fridge")
    before = ok(client.post("/v1/search", json={"query": "hiking Alps", "k": 1}))["hits"]
    assert before[0]["id"] == mid and before[0]["breakdown"]["keyword"] > 0

    patched = ok(client.patch(f"/v1/memories/{mid}",
                              json={"text": "My favourite editor is neovim"}))
    assert patched["text"] == "My favourite editor is neovim"
    assert patched["updated_at"] >= patched["created_at"]
    hits = ok(client.post("/v1/search", json={"query": "neovim editor", "k": 1}))["hits"]
    assert [(h["id"], h["text"]) for h in hits] == [(mid, "My favourite editor is neovim")]
    assert hits[0]["breakdown"]["keyword"] > 0
    after = ok(client.post("/v1/search", json={"query": "hiking Alps"}))["hits"]
    assert [h["breakdown"]["keyword"] for h in after if h["id"] == mid] == [0]
    err(client.patch(f"/v1/memories/{mid}", json={}), 400)
    err(client.patch(f"/v1/memories/{mid}", json={"colour": "red"}), 422)


def test_deleted_memory_never_comes_back(client: TestClient) -> None:
    mid = add(client, "My locker code is 4417")["memory"]["id"]
    add(client, "I drink green tea every morning")
    ask = {"messages": [{"role": "user", "content": "What is my locker code?"}]}
    assert mid in search_ids(client, "locker code")
    ctx = ok(client.post("/v1/context", json=ask))
    assert mid in [i["id"] for i in ctx["report"]["items"]]
    assert "4417" in json.dumps(ctx["messages"])

    ok(client.delete(f"/v1/memories/{mid}"))
    err(client.get(f"/v1/memories/{mid}"), 404)
    assert mid not in search_ids(client, "locker code 4417", k=50)
    assert mid not in memory_ids(client, include_inactive=True)
    ctx = ok(client.post("/v1/context", json=ask))
    assert mid not in [i["id"] for i in ctx["report"]["items"]]
    assert "4417" not in json.dumps(ctx["messages"])


# -- isolation ------------------------------------------------------------------------
def test_another_users_memory_is_not_found(client: TestClient) -> None:
    mid = add(client, "Alice's secret recipe uses saffron", user_id="alice")["memory"]["id"]
    bob = {"X-Memd-User": "bob"}
    err(client.get(f"/v1/memories/{mid}", headers=bob), 404, "not_found_error")
    err(client.patch(f"/v1/memories/{mid}", json={"text": "hijacked"}, headers=bob), 404)
    err(client.delete(f"/v1/memories/{mid}", headers=bob), 404)
    hits = ok(client.post("/v1/search", json={"query": "secret recipe saffron"}, headers=bob))
    assert hits == {"hits": []}
    assert ok(client.get("/v1/memories", headers=bob)) == {"memories": []}
    # alice's memory is untouched, and the header and the body must agree
    assert ok(client.get(f"/v1/memories/{mid}", params={"user_id": "alice"}))["text"] == (
        "Alice's secret recipe uses saffron")
    assert search_ids(client, "secret recipe saffron", user_id="alice") == [mid]
    err(client.post("/v1/search", json={"query": "x", "user_id": "alice"}, headers=bob), 400)


def test_workspace_routes_scope_memory(client: TestClient) -> None:
    local = add(client, "projA builds with cargo and uses sqlx", "/w/projA")["memory"]
    assert local["workspace"] == "projA"
    shared = add(client, "I always write commit messages in English")["memory"]
    assert shared["workspace"] is None

    assert local["id"] in search_ids(client, "cargo sqlx build", "/w/projA")
    assert local["id"] not in search_ids(client, "cargo sqlx build", "/w/projB")
    for ws in ("projA", "projB"):
        assert shared["id"] in search_ids(client, "commit messages English", f"/w/{ws}")
    listed = ok(client.get("/w/projB/v1/memories"))["memories"]
    assert [m["id"] for m in listed] == [shared["id"]]
    # the path decides; a body naming another workspace is a 400
    err(client.post("/w/projA/v1/search", json={"query": "x", "workspace": "projB"}), 400)
    err(client.get("/w/projA/v1/memories", params={"workspace": "projB"}), 400)


# -- sessions, messages, context ------------------------------------------------------
def test_sessions_and_messages_round_trip(client: TestClient, engine: Memd) -> None:
    sess = ok(client.post("/v1/sessions", json={
        "model": "gpt-4o-mini", "context_window": 16000, "metadata": {"app": "test"},
        "system_prompt": "You are terse."}), 201)
    sid = sess["id"]
    assert (sess["user_id"], sess["model"], sess["context_window"]) == (
        "local", "gpt-4o-mini", 16000)
    assert sess["metadata"] == {"app": "test"} and sess["status"] == "active"
    assert ok(client.get(f"/v1/sessions/{sid}")) == sess

    call = {"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}
    sent = [
        {"role": "user", "content": "What's the weather in Oslo for my kayak trip?",
         "metadata": {"client": "cli", "trace": 7}},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 18C"},
    ]
    stored = ok(client.post(f"/v1/sessions/{sid}/messages", json={"messages": sent}), 201)
    msgs = stored["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool"]
    assert [m["turn_index"] for m in msgs] == sorted({m["turn_index"] for m in msgs})
    assert msgs[0]["metadata"] == {"client": "cli", "trace": 7}
    assert msgs[1]["tool_calls"] == [call] and msgs[1]["content"] is None
    assert msgs[2]["tool_call_id"] == "call_1" and all(m["token_count"] > 0 for m in msgs)
    assert ok(client.get(f"/v1/sessions/{sid}/messages")) == stored

    engine.run_jobs()
    hits = ok(client.post("/v1/search", json={"query": "kayak trip weather Oslo",
                                              "kinds": ["message"]}))["hits"]
    assert hits[0]["kind"] == "message" and hits[0]["id"] == msgs[0]["id"]
    assert hits[0]["session_id"] == sid
    assert hits[0]["metadata"] == {"client": "cli", "trace": 7, "role": "user"}

    err(client.get(f"/v1/sessions/{sid}", headers={"X-Memd-User": "bob"}), 404)
    err(client.get(f"/v1/sessions/{sid}/messages", headers={"X-Memd-User": "bob"}), 404)
    err(client.post("/v1/sessions/nope/messages", json={"messages": sent}), 404)


def test_context_is_a_valid_openai_message_list(client: TestClient, engine: Memd) -> None:
    # a fact about what the question asks (one about something else stays out)
    fact = ok(client.put("/v1/facts", json={"category": "coding", "key": "parsing_language",
                                            "value": "Rust"}))
    ok(client.put("/v1/facts", json={"category": "identity", "key": "name", "value": "Ada"}))
    mem = add(client, "The Rust parsing crate tinyparse has code examples on GitLab")["memory"]
    assert mem["tags"] == []
    sid = ok(client.post("/v1/sessions", json={"system_prompt": "You are a helpful coder."}),
             201)["id"]
    ok(client.post(f"/v1/sessions/{sid}/messages", json={"messages": [
        {"role": "user", "content": "How do I read a file in Rust?"},
        {"role": "assistant", "content": "Use std::fs::read_to_string."},
    ]}), 201)
    body = ok(client.post("/v1/context", json={
        "session_id": sid, "context_window": 4096, "max_response_tokens": 512,
        "messages": [{"role": "user", "content": "Show me Rust code examples for parsing"}]}))
    adapter = TypeAdapter(ChatCompletionMessageParam)
    for m in body["messages"]:
        adapter.validate_python(m)
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful coder."}
    assert body["messages"][-1] == {"role": "user",
                                    "content": "Show me Rust code examples for parsing"}
    rendered = json.dumps(body["messages"])
    assert "parsing_language: Rust" in rendered and mem["text"] in rendered
    assert "Ada" not in rendered
    report = body["report"]
    assert report["budget"] and all(isinstance(v, int) for v in report["budget"].values())
    assert report["total_tokens"] > 0
    sections = {(i["section"], i["id"]) for i in report["items"]}
    assert ("fact", fact["fact"]["id"]) in sections and ("memory", mem["id"]) in sections
    assert sum(1 for i in report["items"] if i["section"] == "history") >= 2
    err(client.post("/v1/context", json={"session_id": "missing"}), 404)


# -- facts ----------------------------------------------------------------------------
def test_facts_put_get_and_rejected_update(client: TestClient) -> None:
    first = ok(client.put("/v1/facts", json={"category": "Location", "key": "City",
                                             "value": "Berlin", "confidence": 0.9}))
    assert first["action"] == "inserted" and first["previous"] is None
    assert (first["fact"]["category"], first["fact"]["key"], first["fact"]["value"]) == (
        "location", "city", "Berlin")

    weaker = ok(client.put("/v1/facts", json={"category": "location", "key": "city",
                                              "value": "Paris", "confidence": 0.4}))
    assert weaker["action"] == "rejected" and weaker["fact"]["value"] == "Berlin"
    assert [f["value"] for f in ok(client.get("/v1/facts"))["facts"]] == ["Berlin"]

    fixed = ok(client.put("/v1/facts", json={"category": "location", "key": "city",
                                             "value": "Paris", "confidence": 0.4,
                                             "is_correction": True}))
    assert fixed["action"] == "updated" and fixed["previous"]["value"] == "Berlin"
    assert [f["value"] for f in ok(client.get("/v1/facts"))["facts"]] == ["Paris"]
    history = ok(client.get("/v1/facts", params={"include_history": True}))["facts"]
    assert sorted((f["value"], f["is_active"]) for f in history) == [
        ("Berlin", False), ("Paris", True)]
    assert ok(client.get("/v1/facts", headers={"X-Memd-User": "bob"})) == {"facts": []}
    err(client.put("/v1/facts", json={"category": "x", "key": "y", "value": "  "}), 400)
    err(client.put("/v1/facts", json={"category": "x", "key": "y", "value": "z",
                                      "confidence": 2}), 422)


# -- embeddings -----------------------------------------------------------------------
def test_embeddings_float_and_base64(client: TestClient, engine: Memd) -> None:
    texts = ["hello world", "memory daemons are useful"]
    floats = ok(client.post("/v1/embeddings", json={"input": texts,
                                                    "model": "text-embedding-3-small"}))
    assert floats["object"] == "list" and floats["model"] == engine.embedder.name
    assert [d["index"] for d in floats["data"]] == [0, 1]
    assert all(d["object"] == "embedding" for d in floats["data"])
    assert len(floats["data"][0]["embedding"]) == engine.embedder.dim
    assert floats["usage"]["prompt_tokens"] == floats["usage"]["total_tokens"] > 0

    b64 = ok(client.post("/v1/embeddings", json={"input": texts,
                                                 "encoding_format": "base64"}))
    for f, b in zip(floats["data"], b64["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        np.testing.assert_allclose(decoded, np.array(f["embedding"]), atol=1e-6)

    single = ok(client.post("/v1/embeddings", json={"input": "hello world"}))
    np.testing.assert_allclose(single["data"][0]["embedding"],
                               floats["data"][0]["embedding"], atol=1e-6)
    ok(client.post("/v1/embeddings", json={"input": "x", "dimensions": engine.embedder.dim}))


@pytest.mark.parametrize("payload", [
    {"input": ""}, {"input": []}, {"input": ["ok", "  "]}, {"input": ["ok", 3]},
    {"input": [[1, 2, 3]]}, {"input": ["x"] * 2049}, {"input": "x", "dimensions": 3},
])
def test_embeddings_reject_bad_input(client: TestClient, payload: dict[str, Any]) -> None:
    err(client.post("/v1/embeddings", json=payload), 400, "invalid_request_error")


def test_embeddings_reject_wrong_shapes(client: TestClient) -> None:
    err(client.post("/v1/embeddings", json={"input": 5}), 422)
    err(client.post("/v1/embeddings", json={"input": "x", "encoding_format": "hex"}), 422)


# -- bad input stores nothing ---------------------------------------------------------
BAD_MEMORY_WRITES = [
    pytest.param({"content": b'{"text": "half', "headers": {
        "content-type": "application/json"}}, 400, id="malformed-json"),
    pytest.param({"json": {"tags": ["x"]}}, 422, id="missing-text"),
    pytest.param({"json": {"text": 42}}, 422, id="text-wrong-type"),
    pytest.param({"json": {"text": "x", "importance": "high"}}, 422, id="importance-type"),
    pytest.param({"json": {"text": "x", "tags": "a,b"}}, 422, id="tags-wrong-type"),
    pytest.param({"json": {"text": "x", "txet": "typo"}}, 422, id="unknown-field"),
    pytest.param({"json": {"text": ""}}, 400, id="empty-text"),
    pytest.param({"json": {"text": " \n\t "}}, 400, id="blank-text"),
    pytest.param({"json": {"text": "x", "user_id": "no spaces allowed"}}, 400, id="bad-user"),
    pytest.param({"json": {"text": "x", "tier": "L9"}}, 422, id="bad-tier"),
    pytest.param({"json": {"text": "x", "scope": "local"}}, 400, id="local-no-session"),
    pytest.param({"json": {"text": "x", "session_id": "missing"}}, 404, id="unknown-session"),
    pytest.param({"content": b'{"text": "' + b"a" * (65 * 1024 * 1024) + b'"}', "headers": {
        "content-type": "application/json"}}, 413, id="65MB-body"),
]


@pytest.mark.parametrize(("request_kw", "status"), BAD_MEMORY_WRITES)
def test_bad_memory_write_stores_nothing(client: TestClient, request_kw: dict[str, Any],
                                         status: int) -> None:
    err(client.post("/v1/memories", **request_kw), status)
    assert ok(client.get("/v1/memories", params={"include_inactive": True})) == {
        "memories": []}


@pytest.mark.parametrize(("messages", "status"), [
    pytest.param([{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}], 422,
                 id="bad-role"),
    pytest.param([{"role": "tool", "content": "orphan"}], 400, id="tool-without-id"),
    pytest.param([{"role": "user"}], 400, id="user-without-content"),
    pytest.param([], 422, id="empty-list"),
    pytest.param([{"content": "no role"}], 422, id="missing-role"),
    pytest.param([{"role": "user", "content": 7}], 422, id="content-wrong-type"),
    pytest.param("hello", 422, id="not-a-list"),
])
def test_bad_messages_store_nothing(client: TestClient, messages: Any, status: int) -> None:
    sid = ok(client.post("/v1/sessions", json={}), 201)["id"]
    err(client.post(f"/v1/sessions/{sid}/messages", json={"messages": messages}), status)
    assert ok(client.get(f"/v1/sessions/{sid}/messages")) == {"messages": []}


def test_unknown_ids_are_404(client: TestClient) -> None:
    for resp in (client.get("/v1/memories/nope"), client.delete("/v1/memories/nope"),
                 client.patch("/v1/memories/nope", json={"text": "x"}),
                 client.get("/v1/sessions/nope"), client.get("/v1/nowhere")):
        err(resp, 404, "not_found_error")


def test_bad_search_requests(client: TestClient) -> None:
    err(client.post("/v1/search", json={"query": ""}), 400)
    err(client.post("/v1/search", json={"query": "x", "k": 0}), 422)
    err(client.post("/v1/search", json={"query": "x", "kinds": ["books"]}), 422)
    err(client.post("/v1/search", json={"query": "x", "filters": {"tier": [1]}}), 422)


def test_foreign_host_is_refused(client: TestClient) -> None:
    e = err(client.post("/v1/memories", json={"text": "rebinding attack"},
                        headers={"Host": "evil.example"}), 421, "host_not_allowed")
    assert "evil.example" in e["message"]
    assert memory_ids(client) == []


# -- meta -----------------------------------------------------------------------------
def test_health(client: TestClient) -> None:
    body = ok(client.get("/health"))
    assert body["status"] == "ok" and body["version"] == memd.__version__


def test_openapi_lists_the_routes(client: TestClient) -> None:
    spec = ok(client.get("/openapi.json"))
    paths = spec["paths"]
    expected = {
        "/v1/memories": {"get", "post"},
        "/v1/memories/{memory_id}": {"get", "patch", "delete"},
        "/v1/memories/{memory_id}/forget-preview": {"get"},
        "/v1/facts/{category}/{key}/forget-preview": {"get"},
        "/v1/search": {"post"}, "/v1/context": {"post"}, "/v1/sessions": {"post"},
        "/v1/sessions/{session_id}": {"get"},
        "/v1/sessions/{session_id}/messages": {"get", "post"},
        "/v1/facts": {"get", "put"}, "/v1/embeddings": {"post"},
        "/v1/jobs": {"get"}, "/v1/jobs/{job_id}/retry": {"post"}, "/v1/sweeps": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
        assert methods <= set(paths["/w/{workspace}" + path]), path
    add_op = paths["/v1/memories"]["post"]
    assert add_op["description"].startswith("Store a memory")
    schema = spec["components"]["schemas"]["MemoryCreate"]
    assert schema["required"] == ["text"] and schema["additionalProperties"] is False
    assert "201" in add_op["responses"] and "400" in add_op["responses"]
