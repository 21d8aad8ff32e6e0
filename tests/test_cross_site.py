"""Web pages the user opens cannot use memd: the daemon listens on localhost, where any
page can send it requests, so it refuses requests a browser marks as cross-site (403) and
writes without a JSON body (415), which a page can send without a CORS preflight. Local
clients (no ``Origin``, memd's own origin, an origin in ``allowed_origins``) work
unchanged. In-process (TestClient, real SQLite, fake embedder, a mock upstream that
records every call)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.security import is_json

BASE = "http://127.0.0.1:8765"
LOCAL_UI = "http://localhost:3000"  # a web UI the user allows in the config
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# every table a request could leave a trace in
TABLES = ("memories", "memory_entities", "sessions", "messages", "system_prompts", "facts",
          "calls", "usage_log", "jobs", "embedding_cache")
# what a browser adds to a request a page on another site makes
FROM_EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
CHAT: dict[str, Any] = {"model": "m",
                        "messages": [{"role": "user", "content": "Remember: my PIN is 1234"}]}


@dataclass
class Upstream:
    """An OpenAI-compatible model server that records every request memd sends it and
    knows only chat completions."""

    requests: list[httpx.Request] = field(default_factory=list)

    def chats(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path.endswith("/chat/completions")]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "not found"}})
        return httpx.Response(200, json={
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "noted"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
def app(engine: Memd, upstream: Upstream) -> FastAPI:
    settings = replace(engine.settings, upstream_url="http://upstream/v1",
                       allowed_origins=(LOCAL_UI + "/",))  # the trailing slash is ignored
    return create_app(engine, settings, run_jobs=False,
                      upstream_transport=httpx.MockTransport(upstream.handle))


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, base_url=BASE) as c:
        yield c


def rows(engine: Memd) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table memd writes to, read from the database file."""
    engine.jobs.flush()
    with closing(sqlite3.connect(engine.settings.db_path)) as db:
        return {t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in TABLES}


def empty() -> dict[str, list[tuple[Any, ...]]]:
    return {t: [] for t in TABLES}


def refused(resp: Any, status: int, kind: str) -> str:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["type"] == kind and error["message"]
    return str(error["message"])


def app_routes(app: FastAPI) -> list[Any]:
    """The app's routes, those of included routers one by one."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # a FastAPI that copies included routes into app.routes
        return list(app.routes)
    return list(iter_route_contexts(app.routes))


def writing_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every route that writes or forwards."""
    found = sorted({(method, route.path) for route in app_routes(app)
                    for method in (getattr(route, "methods", None) or set()) & WRITES})
    paths = {path for _, path in found}
    assert {"/v1/chat/completions", "/w/{workspace}/v1/chat/completions",
            "/v1/memories/{memory_id}", "/w/{workspace}/v1/sessions/{session_id}/messages",
            "/v1/facts"} <= paths
    return found


# -- browsers' simple requests --------------------------------------------------------
@pytest.mark.parametrize("browser", [FROM_EVIL, {}], ids=["from-a-page", "headers-stripped"])
def test_text_plain_chat_is_refused(client: TestClient, engine: Memd, upstream: Upstream,
                                    browser: dict[str, str]) -> None:
    """What ``fetch(url, {method: "POST", mode: "no-cors", body: JSON.stringify(chat)})``
    sends: a JSON string as text/plain."""
    resp = client.post("/v1/chat/completions", content=json.dumps(CHAT),
                       headers={"Content-Type": "text/plain;charset=UTF-8", **browser})
    if browser:
        refused(resp, 403, "cross_site_request")
    else:
        assert "application/json" in refused(resp, 415, "unsupported_media_type")
    assert upstream.requests == []
    assert rows(engine) == empty()


BODIES = {
    "form": ("application/x-www-form-urlencoded", b"text=planted&query=x&messages=x"),
    "multipart": ("multipart/form-data; boundary=b",
                  b'--b\r\nContent-Disposition: form-data; name="text"\r\n\r\nplanted\r\n--b--'),
    "text": ("text/plain", b'{"text": "planted"}'),
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_non_json_writes_to_every_route_write_nothing(
        app: FastAPI, client: TestClient, engine: Memd, upstream: Upstream,
        body: tuple[str, bytes]) -> None:
    mid = engine.add("The boat is moored at pier 4", "local").memory.id
    sid = engine.create_session("local").id
    said = engine.append(sid, "local", [{"role": "user", "content": "planted"}])[0].id
    engine.set_fact("local", "preference", "indentation", "tabs")
    jid = engine.store.enqueue_job("access", {"hits": []}, "local", engine.now())
    engine.store.fail_job(jid, "planted", None)  # dead: a retry would revive it
    engine.store.record_call("c1", "local", sid, None, "m", engine.now(), {})
    before = rows(engine)
    assert before["memories"] and before["sessions"] and before["facts"]
    content_type, content = body
    for method, path in writing_routes(app):
        url = path.format(workspace="proj", memory_id=mid, session_id=sid,
                          category="preference", key="indentation", job_id=jid,
                          user_id="local", call_id="c1",
                          message_id=said)
        for browser, status, kind in ((FROM_EVIL, 403, "cross_site_request"),
                                      ({}, 415, "unsupported_media_type")):
            resp = client.request(method, url, content=content,
                                  headers={"Content-Type": content_type, **browser})
            assert resp.status_code == status, (method, url, resp.text)
            assert resp.json()["error"]["type"] == kind
    assert rows(engine) == before
    assert [q.job.id for q in engine.store.list_jobs("dead")] == [jid]
    assert upstream.requests == []


def test_json_without_content_type_is_refused(client: TestClient, engine: Memd) -> None:
    """A page can send a body with no Content-Type at all (a Blob without a type)."""
    resp = client.post("/v1/memories", content=json.dumps({"text": "planted"}))
    assert "no Content-Type" in refused(resp, 415, "unsupported_media_type")
    assert rows(engine) == empty()


# -- requests from other sites, even with JSON ----------------------------------------
FOREIGN = {
    "evil-origin": {"Origin": "https://evil.example"},
    "cross-site": {"Sec-Fetch-Site": "cross-site"},
    "same-site": {"Sec-Fetch-Site": "same-site"},  # another port of localhost
    "other-local-port": {"Origin": "http://127.0.0.1:9999"},
    "null-origin": {"Origin": "null"},
    "own-origin-but-cross-site": {"Origin": BASE, "Sec-Fetch-Site": "cross-site"},
}


@pytest.mark.parametrize("headers", FOREIGN.values(), ids=FOREIGN.keys())
def test_json_from_another_site_is_refused(client: TestClient, engine: Memd,
                                           upstream: Upstream, headers: dict[str, str]) -> None:
    refused(client.post("/v1/memories", json={"text": "planted"}, headers=headers),
            403, "cross_site_request")
    refused(client.post("/w/proj/v1/chat/completions", json=CHAT, headers=headers),
            403, "cross_site_request")
    refused(client.get("/v1/memories", headers=headers), 403, "cross_site_request")
    assert upstream.requests == []
    assert rows(engine) == empty()


def test_null_origin_is_refused_even_if_allowed(engine: Memd) -> None:
    settings = replace(engine.settings, allowed_origins=("null",))
    with TestClient(create_app(engine, settings, run_jobs=False), base_url=BASE) as c:
        refused(c.post("/v1/memories", json={"text": "planted"}, headers={"Origin": "null"}),
                403, "cross_site_request")
    assert rows(engine) == empty()


def test_bodyless_delete_from_another_site_is_refused(client: TestClient,
                                                      engine: Memd) -> None:
    mid = engine.add("The boat is moored at pier 4", "local").memory.id
    refused(client.delete(f"/v1/memories/{mid}", headers=FROM_EVIL), 403, "cross_site_request")
    assert client.get(f"/v1/memories/{mid}").status_code == 200
    assert client.delete(f"/v1/memories/{mid}").json() == {"deleted": mid, "pruned": []}
    assert client.get(f"/v1/memories/{mid}").status_code == 404


def test_health_answers_any_site(client: TestClient) -> None:
    resp = client.get("/health", headers=FROM_EVIL)
    assert resp.status_code == 200 and resp.json()["status"] == "ok"
    refused(client.post("/health", json={}, headers=FROM_EVIL), 403, "cross_site_request")


# -- local clients ----------------------------------------------------------------------
LOCAL = {
    "no-origin": {},  # curl, the openai SDK, editor plugins, the memd CLI
    "typed-url": {"Sec-Fetch-Site": "none"},
    "own-origin": {"Origin": BASE, "Sec-Fetch-Site": "same-origin"},
    "allowed-origin": {"Origin": LOCAL_UI, "Sec-Fetch-Site": "same-site"},
    "allowed-origin-cross-site": {"Origin": LOCAL_UI.upper(), "Sec-Fetch-Site": "cross-site"},
}


@pytest.mark.parametrize("headers", LOCAL.values(), ids=LOCAL.keys())
def test_local_clients_work(client: TestClient, upstream: Upstream,
                            headers: dict[str, str]) -> None:
    resp = client.post("/v1/memories", json={"text": "The boat is moored at pier 4"},
                       headers=headers)
    assert resp.status_code == 201, resp.text
    listed = client.get("/v1/memories", headers=headers)
    assert listed.status_code == 200, listed.text
    assert [m["text"] for m in listed.json()["memories"]] == ["The boat is moored at pier 4"]

    chat = client.post("/w/proj/v1/chat/completions", json=CHAT, headers=headers)
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == "noted"
    assert len(upstream.chats()) == 1
    session = client.get(f"/w/proj/v1/sessions/{chat.headers['x-memd-session']}/messages",
                         headers=headers)
    assert session.status_code == 200, session.text
    assert [m["content"] for m in session.json()["messages"]] == [
        CHAT["messages"][0]["content"], "noted"]


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
def test_json_media_types_are_accepted(client: TestClient, content_type: str) -> None:
    resp = client.post("/v1/memories", content=json.dumps({"text": "pier 4"}),
                       headers={"Content-Type": content_type})
    assert resp.status_code == 201, resp.text
    assert resp.json()["memory"]["text"] == "pier 4"


@pytest.mark.parametrize(("content_type", "expected"), [
    ("application/json", True), ("application/json;charset=utf-8", True),
    (" APPLICATION/JSON ", True), ("application/vnd.api+json", True),
    ("application/+json", False), ("application/jsonp", False), ("text/json", False),
    ("text/plain", False), ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False), ("", False),
])
def test_is_json(content_type: str, expected: bool) -> None:
    assert is_json(content_type) is expected
