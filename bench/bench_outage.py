"""How fast each route answers while PostgreSQL is stopped, in local and team mode.

    .venv/bin/python -m bench.bench_outage

Starts a local PostgreSQL (``memd.pgserver``, in a temporary directory), opens memd on
it with the default ``pg_connect_timeout`` (team mode: one user and an API key), then
stops the server and times one request to each route of the app's OpenAPI document (at
the root; the ``/w/{workspace}`` copies are the same handlers), in-process. Target:
every route a JSON 503 with Retry-After within 3 s (in local mode ``GET /v1/models``
asks only the model server, a fake one here, and ``POST /v1/messages/count_tokens``
counts locally: both answer 200). The figures are in
bench/README.md. Not a test: it prints figures.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import memd
from memd import pgserver
from memd.config import load_settings
from memd.server.app import create_app

# A body each write route accepts, so that the request gets as far as the store.
ROUTE_BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "m", "prompt": "def deploy():"},
    "/v1/messages": {"model": "m", "max_tokens": 16,
                     "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages/count_tokens": {"model": "m",
                                  "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/memories": {"text": "I deploy on Fridays"},
    "/v1/memories/{memory_id}": {"text": "I deploy on Mondays"},
    "/v1/search": {"query": "deploy"},
    "/v1/context": {"messages": [{"role": "user", "content": "when do I deploy?"}]},
    "/v1/sessions": {},
    "/v1/pause": {},
    "/v1/resume": {},
    "/v1/sessions/{session_id}/messages": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/facts": {"category": "project", "key": "codename", "value": "falcon"},
    "/v1/embeddings": {"input": "hello"},
    "/api/chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/api/generate": {"model": "m", "prompt": "def deploy():"},
    "/api/show": {"model": "llama3.2:latest"},
    "/api/embed": {"model": "m", "input": "hello"},
    "/v1/import": {"source": "aider", "name": ".aider.chat.history.md",
                   "content": "# aider chat started at 2026-01-05 10:00:00\n\n#### hi\n"},
}
# A value for each path parameter.
ROUTE_PARAMS = {"call_id": "c1", "memory_id": "m1", "session_id": "s1", "message_id": "x1",
           "category": "project", "key": "codename", "user_id": "alice", "job_id": "j1"}


async def _models(_: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})


def run(mode: str, tmp: Path) -> list[tuple[str, str, int, float]]:
    started = pgserver.start(tmp / "pg")
    assert started.dsn is not None
    settings = replace(load_settings(data_dir=tmp / "d"), db=started.dsn, embedder="fake",
                       pg_partitions=(2, 2, 2), auth=mode == "team",
                       upstream_url="http://upstream.test/v1")
    engine = memd.open(settings=settings)
    headers = {}
    if mode == "team":
        engine.accounts.add_user("alice", "Alice")
        headers["Authorization"] = f"Bearer {engine.accounts.create_key('alice').secret}"
    upstream = Starlette(routes=[Route("/v1/models", _models)])
    app = create_app(engine, settings, run_jobs=False,
                     upstream_transport=httpx.ASGITransport(app=upstream))
    client = TestClient(app, base_url="http://127.0.0.1:8765", headers=headers)
    paths = client.get("/openapi.json").json()["paths"]
    pgserver.stop(tmp / "pg")
    out = []
    try:
        for template, ops in paths.items():
            if template.startswith("/w/"):
                continue
            for method in map(str.upper, ops):
                body = ROUTE_BODIES.get(template) if method in ("POST", "PUT", "PATCH") else None
                t = time.perf_counter()
                resp = client.request(method, template.format(**ROUTE_PARAMS), json=body)
                out.append((method, template, resp.status_code, time.perf_counter() - t))
    finally:
        engine.close()
    return out


def main() -> None:
    for mode in ("local", "team"):
        with tempfile.TemporaryDirectory(prefix="memd-outage-") as tmp:
            rows = run(mode, Path(tmp))
        for method, path, status, seconds in rows:
            print(f"{mode:5} {method:6} {path:48} {status}  {seconds:5.2f} s")
        worst = max(s for *_, s in rows)
        codes = sorted({st for _, _, st, _ in rows})
        print(f"{mode}: {len(rows)} routes, statuses {codes}, slowest {worst:.2f} s",
              file=sys.stderr)


if __name__ == "__main__":
    main()
