"""Outages answer like the rest of the API: a store out of reach is a JSON 503 with
Retry-After on every route that needs it, in local and team mode, after the configured
connect timeout rather than the pool's default (and /health says so at once, from the
last known state); a model server out of reach a JSON 502 on every proxied route,
/v1/models included."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from ollama_upstream import FakeOllama
from servers import FakeUpstream
from starlette.applications import Starlette

import memd
from bench.bench_outage import ROUTE_BODIES, ROUTE_PARAMS
from memd import pgserver
from memd.config import load_settings
from memd.errors import InvalidInput, StoreUnavailable
from memd.server.app import create_app
from memd.server.health import StoreHealth

pytestmark = pytest.mark.slow
BASE = "http://127.0.0.1:8765"


def test_a_postgresql_outage_is_a_503_with_retry_after_and_health_says_so(
    tmp_path: Path,
) -> None:
    started = pgserver.start(tmp_path / "pg")
    assert started.dsn is not None
    settings = replace(load_settings(data_dir=tmp_path / "d"), db=started.dsn,
                       embedder="fake", pg_partitions=(2, 2, 2))
    engine = memd.open(settings=settings)
    try:
        client = TestClient(create_app(engine, settings, run_jobs=False), base_url=BASE)
        assert client.post("/v1/memories", json={"text": "I deploy on Fridays"}
                           ).status_code == 201
        assert client.get("/health").json()["store_state"] == "ok"
        pgserver.stop(tmp_path / "pg")
        down = client.post("/v1/search", json={"query": "deploy"})
        assert down.status_code == 503, down.text
        assert down.headers["retry-after"].isdigit()
        assert down.json()["error"]["type"] == "store_unavailable"
        assert "psycopg" not in down.text and "connection" not in down.text.lower()
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["store_state"] == "unavailable"
        pgserver.start(tmp_path / "pg")  # back: the pool replaces its broken connections
        deadline = time.monotonic() + 60
        while (back := client.post("/v1/search", json={"query": "deploy"})).status_code \
                == 503 and time.monotonic() < deadline:
            pass
        assert back.status_code == 200, back.text
        assert [h["text"] for h in back.json()["hits"]] == ["I deploy on Fridays"]
        assert client.get("/health").status_code == 200
    finally:
        engine.close()
        pgserver.stop(tmp_path / "pg")


def test_models_answers_like_the_chat_route_when_the_upstream_is_out_of_reach(
    tmp_path: Path,
) -> None:
    settings = replace(load_settings(data_dir=tmp_path), embedder="fake",
                       upstream_url="http://127.0.0.1:9/v1")  # nothing listens on port 9
    with memd.open(settings=settings) as engine:
        client = TestClient(create_app(engine, settings, run_jobs=False), base_url=BASE)
        for method, path, body in (("GET", "/v1/models", None),
                                   ("POST", "/v1/chat/completions",
                                    {"model": "m", "messages": [
                                        {"role": "user", "content": "hi"}]})):
            resp = client.request(method, path, json=body)
            assert resp.status_code == 502, (path, resp.text)
            assert resp.json()["error"]["type"] == "upstream_unreachable"
    unset = replace(settings, upstream_url=None)
    with memd.open(settings=unset) as engine:
        resp = TestClient(create_app(engine, unset, run_jobs=False), base_url=BASE).get(
            "/v1/models")
        assert resp.status_code == 503 and resp.json()["error"]["type"] == \
            "upstream_not_configured"


# Routes that never read the store: in local mode they go on serving (a team daemon's
# key check reads the store, so there they are 503s like the rest).
_NO_STORE = {(method, prefix + path) for prefix in ("", "/w/{workspace}")
             for method, path in (("GET", "/v1/models"),
                                  ("POST", "/v1/messages/count_tokens"),
                                  # the scheduler's recent sweeps are kept in memory
                                  ("GET", "/v1/sweeps"),
                                  # Ollama's routes that only relay (generate records its call)
                                  ("GET", "/api/tags"),
                                  ("GET", "/api/ps"), ("GET", "/api/version"),
                                  ("POST", "/api/show"), ("POST", "/api/embed"))}


@pytest.mark.parametrize("mode", ["local", "team"])
def test_every_route_answers_a_json_503_while_postgresql_is_stopped(
    tmp_path: Path, mode: str,
) -> None:
    started = pgserver.start(tmp_path / "pg")
    assert started.dsn is not None
    settings = replace(load_settings(data_dir=tmp_path / "d"), db=started.dsn,
                       embedder="fake", pg_partitions=(2, 2, 2), auth=mode == "team",
                       upstream_url="http://upstream.test/v1", pg_connect_timeout=0.5)
    engine = memd.open(settings=settings)
    try:
        # The pools wait for a connection as long as configured, and each attempt to
        # connect is bounded too (libpq's whole seconds).
        conn = engine.store.connection  # type: ignore[attr-defined]
        pools = (conn._pool, conn._side_pool, conn._own_pool)
        assert {p.timeout for p in pools} == {0.5}
        assert {p.kwargs["connect_timeout"] for p in pools} == {2}
        headers = {}
        if mode == "team":
            engine.accounts.add_user("alice", "Alice")
            headers["Authorization"] = f"Bearer {engine.accounts.create_key('alice').secret}"
        app = create_app(engine, settings, run_jobs=False,
                         upstream_transport=httpx.ASGITransport(app=Starlette(
                             routes=[*FakeUpstream().app.routes, *FakeOllama().app.routes])))
        client = TestClient(app, base_url=BASE, headers=headers)
        spec = client.get("/openapi.json").json()
        pgserver.stop(tmp_path / "pg")
        answered = set()
        for template, ops in spec["paths"].items():
            url = template.format(**ROUTE_PARAMS, workspace="proj")
            for method in map(str.upper, ops):
                body = ROUTE_BODIES.get(template.removeprefix("/w/{workspace}")) \
                    if method in ("POST", "PUT", "PATCH") else None
                resp = client.request(method, url, json=body)
                answered.add((method, template))
                if mode == "local" and (method, template) in _NO_STORE:
                    assert resp.status_code == 200, (method, url, resp.text)
                    continue
                assert resp.status_code == 503, (method, url, resp.text)
                assert resp.headers["content-type"] == "application/json", (method, url)
                assert resp.headers["retry-after"].isdigit(), (method, url)
                if template != "/health":
                    assert resp.json()["error"]["type"] == "store_unavailable", (method, url)
        assert ("GET", "/health") in answered and len(answered) > 40
    finally:
        engine.close()
        pgserver.stop(tmp_path / "pg")


def test_health_answers_from_the_last_known_state_while_its_probe_hangs() -> None:
    """A probe stuck on the store (a pool waiting for a connection) does not hold
    /health: the check answers with what was last known and leaves the probe running."""
    release = threading.Event()
    probes: list[int] = []

    def probe() -> int:
        probes.append(1)
        if len(probes) > 1:
            release.wait(30)
            raise StoreUnavailable("PostgreSQL cannot be reached")
        return 7

    health = StoreHealth(probe, wait=0.05)
    assert health.state() == (True, 7)  # the probe answers: what it read
    assert health.state() == (True, 7)  # it hangs: the last known state
    health.saw(StoreUnavailable("a request found the store out of reach"))
    assert health.state() == (False, None)  # still hanging: what requests found
    assert len(probes) == 2  # one probe at a time, however many checks
    release.set()
    deadline = time.monotonic() + 30
    while health._done is not None and time.monotonic() < deadline:  # noqa: ASYNC110
        time.sleep(0.01)
    assert health.state()[0] is False


def test_the_connect_timeout_is_a_setting_with_an_env_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().pg_connect_timeout == 2.0
    monkeypatch.setenv("MEMD_PG_CONNECT_TIMEOUT", "4.5")
    assert load_settings().pg_connect_timeout == 4.5
    for bad in ("0", "soon", "-1"):
        monkeypatch.setenv("MEMD_PG_CONNECT_TIMEOUT", bad)
        with pytest.raises(InvalidInput, match="MEMD_PG_CONNECT_TIMEOUT"):
            load_settings()
