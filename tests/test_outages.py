"""Outages answer like the rest of the API: a store out of reach is a JSON 503 with
Retry-After (and /health says so), a model server out of reach a JSON 502 on every
proxied route, /v1/models included."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import memd
from memd import pgserver
from memd.config import load_settings
from memd.server.app import create_app

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
