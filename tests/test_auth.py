"""Authenticated (team) mode, on a real uvicorn port, on SQLite and on PostgreSQL: keys,
isolation of two users across every endpoint and workspace sharing. (PostgreSQL's
Row-Level Security checked with raw SQL under the application role is in
test_postgres_backend.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner
from ollama_upstream import FakeOllama
from servers import Answered, FakeUpstream, postgres_url, serve

import memd
from memd.auth import hash_key, key_id_of, new_key
from memd.cli import main as cli
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.server.app import create_app

USERS = ("alice", "bob", "carol")


@dataclass
class Team:
    base: str
    engine: Memd
    upstream: FakeUpstream
    ollama: FakeOllama
    keys: dict[str, str]
    dsn: str | None

    def http(self, user: str | None, **headers: str) -> httpx.Client:
        if user is not None:
            headers["Authorization"] = f"Bearer {self.keys[user]}"
        return httpx.Client(base_url=self.base, headers=headers, timeout=30)


@pytest.fixture
def team(tmp_path: Path, backend: str) -> Iterator[Team]:
    upstream, ollama = FakeUpstream(), FakeOllama()
    with serve(upstream.app) as up, serve(ollama.app) as ollama_up:
        settings = replace(load_settings(data_dir=tmp_path / "d"), upstream_url=f"{up}/v1",
                           upstream_ollama_url=ollama_up, job_interval=0.05, auth=True)
        dsn = None
        if backend == "postgres":
            dsn = postgres_url()
            settings = replace(settings, db=dsn, pg_partitions=(4, 4, 4))
        engine = memd.open(settings=settings)
        keys = {}
        for user in USERS:
            engine.store.create_user(user, user.title(), time.time())
            keys[user] = new_key()
            digest = hash_key(keys[user])
            engine.store.add_api_key(key_id_of(digest), user, digest, "test", time.time())
        app = create_app(engine, settings)
        with serve(app) as base:
            # read once what the answers given leave to store is stored (the usage and
            # the call report of a chat are written after its answer is sent)
            yield Team(base, cast(Memd, Answered(engine, app.state.later)), upstream,
                       ollama, keys, dsn)
        engine.close()


def ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


def seed(team: Team, user: str, secret: str) -> dict[str, str]:
    """Give ``user`` one of everything through the API; returns the ids."""
    with team.http(user) as c:
        mem = ok(c.post("/v1/memories", json={"text": f"{secret} is my deploy target"}),
                 201)["memory"]["id"]
        sess = ok(c.post("/v1/sessions", json={}), 201)["id"]
        ok(c.post(f"/v1/sessions/{sess}/messages", json={"messages": [
            {"role": "user", "content": f"remember {secret} please"},
            {"role": "assistant", "content": "noted"}]}), 201)
        fact = ok(c.put("/v1/facts", json={"category": "project", "key": "codename",
                                           "value": secret}))
        chat = c.post("/v1/chat/completions", json={"model": "fake-model", "messages": [
            {"role": "user", "content": f"what do you know about {secret}?"}]})
        ok(chat)
        return {"memory": mem, "session": sess, "fact": fact["fact"]["id"],
                "call": chat.headers["x-memd-call"], "chat_session": chat.headers["x-memd-session"]}


def routes(team: Team) -> set[tuple[str, str]]:
    """Every (method, path) the daemon serves at the root (the /w/{workspace} copies are
    the same handlers), from its OpenAPI document."""
    with team.http("alice") as c:
        spec = ok(c.get("/openapi.json"))
    return {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops
            if not p.startswith("/w/")}


def test_every_request_needs_a_live_key(team: Team) -> None:
    with team.http(None) as anon:
        assert ok(anon.get("/health"))["status"] == "ok"  # liveness only, no data
        assert "pending_jobs" not in anon.get("/health").json()
        for method, path in sorted(routes(team)):
            if path == "/health":
                continue
            url = path.replace("{memory_id}", "m").replace("{session_id}", "s").replace(
                "{call_id}", "c").replace("{user_id}", "u").replace("{message_id}", "x")
            resp = anon.request(method, url, json={})
            assert resp.status_code == 401, (method, path, resp.text)
            assert resp.json()["error"]["type"] == "authentication_error"
            assert resp.headers["www-authenticate"].startswith("Bearer")
        bad = anon.get("/v1/memories", headers={"Authorization": "Bearer memd_" + "x" * 43})
        assert bad.status_code == 401 and "invalid" in bad.json()["error"]["message"]
        assert anon.get("/v1/memories", headers={"X-Api-Key": team.keys["bob"]}).status_code == 200
    # a revoked key stops working at once
    key_id = key_id_of(hash_key(team.keys["carol"]))
    assert team.engine.store.revoke_api_key(key_id, time.time())
    with team.http("carol") as c:
        assert c.get("/v1/memories").status_code == 401


def test_a_user_cannot_touch_another_users_data_through_any_endpoint(team: Team) -> None:
    bob = seed(team, "bob", "Zanzibar")
    before = {
        "memory": team.engine.get(bob["memory"], "bob"),
        "messages": len(team.engine.messages(bob["session"], "bob")),
        "facts": team.engine.facts("bob"),
    }
    tested: set[tuple[str, str]] = set()

    def call(c: httpx.Client, method: str, route: str, url: str, status: int,
             **kw: Any) -> Any:
        tested.add((method, route))
        resp = c.request(method, url, **kw)
        assert resp.status_code == status, (method, url, resp.text)
        return resp.json()

    def no_trace(body: Any) -> None:  # bob's memory, message and fact (alice's own
        text = str(body)                # queries name Zanzibar too)
        assert "my deploy target" not in text and "remember Zanzibar" not in text
        assert "codename" not in text

    with team.http("alice") as c, team.http("alice", **{"X-Memd-User": "bob"}) as posing:
        m, s = bob["memory"], bob["session"]
        # memories: read, list, change, delete, create as bob
        call(c, "GET", "/v1/memories/{memory_id}", f"/v1/memories/{m}", 404)
        call(c, "GET", "/v1/memories/{memory_id}", f"/v1/memories/{m}?user_id=bob", 403)
        call(c, "PATCH", "/v1/memories/{memory_id}", f"/v1/memories/{m}", 404,
             json={"text": "hijacked"})
        call(c, "PATCH", "/v1/memories/{memory_id}", f"/v1/memories/{m}", 403,
             json={"text": "hijacked", "user_id": "bob"})
        call(c, "DELETE", "/v1/memories/{memory_id}", f"/v1/memories/{m}", 404)
        call(c, "GET", "/v1/memories/{memory_id}/forget-preview",
             f"/v1/memories/{m}/forget-preview", 404)
        call(posing, "GET", "/v1/memories/{memory_id}/forget-preview",
             f"/v1/memories/{m}/forget-preview", 403)
        call(c, "DELETE", "/v1/memories/{memory_id}", f"/v1/memories/{m}?user_id=bob", 403)
        no_trace(call(c, "GET", "/v1/memories", "/v1/memories", 200))
        call(c, "GET", "/v1/memories", "/v1/memories?user_id=bob", 403)
        call(posing, "GET", "/v1/memories", "/v1/memories", 403)
        call(c, "POST", "/v1/memories", "/v1/memories", 403,
             json={"text": "planted", "user_id": "bob"})
        # search and context
        for kinds in (["memory", "summary", "fact"], ["message"]):
            no_trace(call(c, "POST", "/v1/search", "/v1/search", 200,
                          json={"query": "Zanzibar deploy target", "kinds": kinds}))
        call(c, "POST", "/v1/search", "/v1/search", 403,
             json={"query": "Zanzibar", "user_id": "bob"})
        call(posing, "POST", "/v1/search", "/v1/search", 403, json={"query": "Zanzibar"})
        no_trace(call(c, "POST", "/v1/context", "/v1/context", 200,
                      json={"query": "What is the Zanzibar deploy target?"}))
        call(c, "POST", "/v1/context", "/v1/context", 404, json={"session_id": s})
        call(c, "POST", "/v1/context", "/v1/context", 403,
             json={"query": "Zanzibar", "user_id": "bob"})
        # sessions and messages
        call(c, "POST", "/v1/sessions", "/v1/sessions", 403, json={"user_id": "bob"})
        call(c, "GET", "/v1/sessions/{session_id}", f"/v1/sessions/{s}", 404)
        call(c, "GET", "/v1/sessions/{session_id}/messages", f"/v1/sessions/{s}/messages", 404)
        call(c, "POST", "/v1/sessions/{session_id}/messages", f"/v1/sessions/{s}/messages",
             404, json={"messages": [{"role": "user", "content": "planted"}]})
        call(c, "DELETE", "/v1/sessions/{session_id}", f"/v1/sessions/{s}", 404)
        call(c, "DELETE", "/v1/sessions/{session_id}", f"/v1/sessions/{s}?user_id=bob", 403)
        call(posing, "DELETE", "/v1/sessions/{session_id}", f"/v1/sessions/{s}", 403)
        one = "/v1/sessions/{session_id}/messages/{message_id}"
        mid = team.engine.messages(s, "bob")[0].id
        call(c, "DELETE", one, f"/v1/sessions/{s}/messages/{mid}", 404)
        call(c, "DELETE", one, f"/v1/sessions/{s}/messages/{mid}?user_id=bob", 403)
        listed = call(c, "GET", "/v1/sessions", "/v1/sessions", 200)["data"]
        assert s not in str(listed) and bob["chat_session"] not in str(listed)
        call(c, "GET", "/v1/sessions", "/v1/sessions?user_id=bob", 403)
        call(posing, "GET", "/v1/sessions", "/v1/sessions", 403)
        # usage and the learning pause: her own only, bob's pause untouched
        call(c, "GET", "/v1/usage", "/v1/usage?user_id=bob", 403)
        call(posing, "GET", "/v1/usage", "/v1/usage", 403)
        call(c, "POST", "/v1/pause", "/v1/pause", 403, json={"user_id": "bob"})
        call(posing, "POST", "/v1/pause", "/v1/pause", 403, json={})
        assert call(c, "POST", "/v1/pause", "/v1/pause", 200, json={})["user_id"] == "alice"
        assert team.engine.store.pauses("bob") == {}
        call(c, "GET", "/v1/pause", "/v1/pause?user_id=bob", 403)
        assert call(c, "GET", "/v1/pause", "/v1/pause", 200)["paused"] is True
        call(c, "POST", "/v1/resume", "/v1/resume", 403, json={"user_id": "bob"})
        assert call(c, "POST", "/v1/resume", "/v1/resume", 200, json={})["paused"] is False
        # erasure: alice cannot erase bob
        call(c, "DELETE", "/v1/users/{user_id}", "/v1/users/bob", 403)
        call(posing, "DELETE", "/v1/users/{user_id}", "/v1/users/alice", 403)
        # facts
        no_trace(call(c, "GET", "/v1/facts", "/v1/facts", 200))
        call(c, "GET", "/v1/facts", "/v1/facts?user_id=bob", 403)
        call(c, "PUT", "/v1/facts", "/v1/facts", 403, json={
            "category": "project", "key": "codename", "value": "planted", "user_id": "bob"})
        call(c, "DELETE", "/v1/facts/{category}/{key}", "/v1/facts/project/codename", 404)
        call(c, "GET", "/v1/facts/{category}/{key}/forget-preview",
             "/v1/facts/project/codename/forget-preview", 404)
        call(posing, "GET", "/v1/facts/{category}/{key}/forget-preview",
             "/v1/facts/project/codename/forget-preview", 403)
        call(c, "DELETE", "/v1/facts/{category}/{key}",
             "/v1/facts/project/codename?user_id=bob", 403)
        call(posing, "DELETE", "/v1/facts/{category}/{key}", "/v1/facts/project/codename",
             403)
        # the proxy: a chat naming bob's session neither joins it nor sees bob's memory
        chat = {"model": "fake-model", "messages": [
            {"role": "user", "content": "What is the Zanzibar deploy target?"}]}
        sent = len(team.upstream.requests)
        named = c.post("/v1/chat/completions", json=chat,
                       headers={"X-Memd-Session": bob["chat_session"]})
        # SQLite's session ids are global: the id is taken (409); PostgreSQL keys sessions
        # by (user, id): alice gets a session of her own under that id
        assert named.status_code in (200, 409), named.text
        if named.status_code == 200:
            no_trace(team.upstream.requests[-1]["messages"][:-1])
        else:
            assert len(team.upstream.requests) == sent
        call(c, "POST", "/v1/chat/completions", "/v1/chat/completions", 200, json=chat)
        no_trace(team.upstream.requests[-1]["messages"][:-1])
        call(posing, "POST", "/v1/chat/completions", "/v1/chat/completions", 403, json=chat)
        text = {"model": "fake-model", "prompt": "def deploy_target():"}
        done = call(c, "POST", "/v1/completions", "/v1/completions", 200, json=text)
        assert done["choices"][0]["text"] == " ok"
        call(posing, "POST", "/v1/completions", "/v1/completions", 403, json=text)
        # the Anthropic Messages and OpenAI Responses doors: the same, in their formats
        question = chat["messages"]
        claude = {"model": "claude-x", "max_tokens": 50, "messages": question}
        call(c, "POST", "/v1/messages", "/v1/messages", 200, json=claude)
        no_trace(team.upstream.requests[-1]["messages"])
        call(posing, "POST", "/v1/messages", "/v1/messages", 403, json=claude)
        call(c, "POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens", 200,
             json=claude)
        codex = {"model": "gpt-x", "input": question}
        call(c, "POST", "/v1/responses", "/v1/responses", 200, json=codex)
        no_trace(team.upstream.requests[-1]["input"])
        call(posing, "POST", "/v1/responses", "/v1/responses", 403, json=codex)
        # Ollama's API: its chat as the other doors; the relays hold no user data
        llama = {"model": "llama3.2:latest", "messages": question, "stream": False}
        call(c, "POST", "/api/chat", "/api/chat", 200, json=llama)
        no_trace(team.ollama.requests[-1]["messages"])
        call(posing, "POST", "/api/chat", "/api/chat", 403, json=llama)
        call(c, "POST", "/api/generate", "/api/generate", 200,
             json={"model": "llama3.2:latest", "prompt": "def deploy():", "stream": False})
        call(posing, "POST", "/api/generate", "/api/generate", 403,
             json={"model": "llama3.2:latest", "prompt": "x", "stream": False})
        for method, route, body in (("GET", "/api/tags", None), ("GET", "/api/ps", None),
                                    ("GET", "/api/version", None),
                                    ("POST", "/api/show", {"model": "llama3.2:latest"}),
                                    ("POST", "/api/embed",
                                     {"model": "llama3.2:latest", "input": "hi"})):
            call(c, method, route, route, 200, json=body)
        call(c, "GET", "/v1/calls/{call_id}", f"/v1/calls/{bob['call']}", 404)
        call(c, "DELETE", "/v1/calls/{call_id}", f"/v1/calls/{bob['call']}", 404)
        call(c, "DELETE", "/v1/calls/{call_id}", f"/v1/calls/{bob['call']}?user_id=bob", 403)
        listed = call(c, "GET", "/v1/calls", "/v1/calls", 200)["data"]
        assert listed and {x["user_id"] for x in listed} == {"alice"}
        assert bob["call"] not in str(listed)
        call(c, "GET", "/v1/calls", "/v1/calls?user_id=bob", 403)
        call(posing, "GET", "/v1/calls", "/v1/calls", 403)
        spent = call(c, "GET", "/v1/usage", "/v1/usage?group_by=model", 200)
        assert spent["total"]["calls"] >= 1  # her own chats above
        # background jobs: alice lists her own only, and cannot retry bob's
        bob_job = team.engine.store.enqueue_job("access", {"hits": []}, "bob", time.time())
        jobs = call(c, "GET", "/v1/jobs", "/v1/jobs", 200)["data"]
        assert bob_job not in str(jobs) and {j["user_id"] for j in jobs} <= {"alice"}
        call(c, "GET", "/v1/jobs", "/v1/jobs?user_id=bob", 403)
        runs = team.engine.jobs.schedule.runs  # a sweep over every user's rows
        runs.finished(runs.start("prune", time.time(), 2, per_user=True), 0.1,
                      {"pruned": 3}, RuntimeError("bob's row 7 is locked"))
        sweeps = call(c, "GET", "/v1/sweeps", "/v1/sweeps", 200)["data"]
        assert sweeps[0]["task"] == "prune" and sweeps[0]["failed"] == 1
        # their counts and errors span every user
        assert all(r["counts"] == {} and r["errors"] == [] for r in sweeps)
        call(c, "POST", "/v1/jobs/{job_id}/retry", f"/v1/jobs/{bob_job}/retry", 404)
        # importing history: as herself only
        export = json.dumps([{"uuid": "c-1", "name": "x", "chat_messages": [
            {"sender": "human", "text": "Zanzibar is planted", "created_at": 1.7e9}]}])
        upload = {"source": "claude-ai", "content": export}
        call(c, "POST", "/v1/import", "/v1/import", 403, json={**upload, "user_id": "bob"})
        call(posing, "POST", "/v1/import", "/v1/import", 403, json=upload)
        assert call(c, "POST", "/v1/import", "/v1/import", 200, json=upload)["messages"] == 1
        assert all(x.metadata.get("imported_from") is None
                   for x in team.engine.store.list_sessions("bob"))
        # no user data behind these three; they must still work for alice
        status = call(c, "GET", "/v1/status", "/v1/status", 200)
        assert "users" not in status and status["auth"] is True
        call(c, "GET", "/v1/models", "/v1/models", 200)
        call(c, "POST", "/v1/embeddings", "/v1/embeddings", 200,
             json={"input": "hello", "model": "minilm"})
    # the upstream never sees memd's own key
    assert all(team.keys["alice"] not in str(h) for h in team.upstream.headers)
    # every endpoint was tried (a new route must be added here)
    assert routes(team) - {("GET", "/health")} <= tested, routes(team) - tested
    after, was = team.engine.get(bob["memory"], "bob"), before["memory"]
    assert (after.text, after.is_active, after.superseded_by, after.updated_at) == (
        was.text, was.is_active, was.superseded_by, was.updated_at)
    assert len(team.engine.messages(bob["session"], "bob")) == before["messages"]
    assert team.engine.facts("bob") == before["facts"]
    assert team.engine.call("bob", bob["call"])["id"] == bob["call"]
    # a key's user erases itself: its data and its account (so its key) are gone
    with team.http("alice") as c:
        assert ok(c.delete("/v1/users/alice"))["rows"]["users"] == 1
        assert c.get("/v1/memories").status_code == 401
    assert team.engine.list("alice") == [] and team.engine.store.get_user("alice") is None
    assert team.engine.get(bob["memory"], "bob").text == was.text


def test_workspace_memories_are_shared_among_members_only(team: Team) -> None:
    for user in ("alice", "bob"):
        team.engine.store.add_workspace_member("rocket", user, time.time())
    with team.http("bob") as bob:
        shared = ok(bob.post("/w/rocket/v1/memories",
                             json={"text": "The rocket launch pad uses Terraform"}),
                    201)["memory"]["id"]
        by_entity = ok(bob.post("/w/rocket/v1/memories",
                                json={"text": "Ansible provisions the Saturn boosters"}),
                       201)["memory"]["id"]
        private = ok(bob.post("/v1/memories",
                              json={"text": "My rocket hobby budget is 300 euros"}),
                     201)["memory"]["id"]
    query = {"query": "rocket launch pad Terraform budget", "k": 20}
    with team.http("alice") as alice:
        found = [h["id"] for h in ok(alice.post("/w/rocket/v1/search", json=query))["hits"]]
        assert shared in found and private not in found
        ask = {"query": "Who provisions Saturn?", "kinds": ["memory"]}
        hits = ok(alice.post("/w/rocket/v1/search", json=ask))["hits"]
        entity = {h["id"]: h["breakdown"]["entity"] for h in hits}
        assert entity.get(by_entity, 0) > 0, hits  # shared memories keep their entities
        ctx = ok(alice.post("/w/rocket/v1/context",
                            json={"query": "What does the rocket launch pad use?"}))
        assert "Terraform" in str(ctx["messages"])
        # shared for reading, owned by bob: alice cannot change or delete it
        assert alice.delete(f"/w/rocket/v1/memories/{shared}").status_code == 404
        assert alice.patch(f"/v1/memories/{shared}", json={"text": "x"}).status_code == 404
        # outside the workspace, bob's memory is not alice's
        found = [h["id"] for h in ok(alice.post("/v1/search", json=query))["hits"]]
        assert shared not in found
    with team.http("carol") as carol:  # not a member
        found = [h["id"] for h in ok(carol.post("/w/rocket/v1/search", json=query))["hits"]]
        assert shared not in found and private not in found
    assert team.engine.get(shared, "bob").text == "The rocket launch pad uses Terraform"


def test_keys_users_and_workspaces_from_the_cli(tmp_path: Path) -> None:
    run = CliRunner().invoke
    base = ["--data-dir", str(tmp_path / "d")]
    assert run(cli, [*base, "user", "add", "dana", "--name", "Dana"]).exit_code == 0
    dup = run(cli, [*base, "user", "add", "dana"])
    assert dup.exit_code != 0 and "already exists" in dup.output
    made = run(cli, [*base, "key", "create", "--user", "dana", "--label", "laptop"])
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("memd_") and len(secret) > 40
    listed = run(cli, [*base, "key", "list"]).output
    assert "dana" in listed and "live" in listed and secret not in listed
    nobody = run(cli, [*base, "key", "create", "--user", "nobody"])
    assert nobody.exit_code == 2 and "no user 'nobody'" in nobody.output
    with memd.open(tmp_path / "d") as m:
        assert m.store.api_key_user(hash_key(secret), time.time()) == "dana"
        # only the hash is stored
        assert secret not in str(m.store.list_api_keys())
    key_id = key_id_of(hash_key(secret))
    assert run(cli, [*base, "key", "revoke", key_id]).exit_code == 0
    assert run(cli, [*base, "key", "revoke", key_id]).exit_code == 2
    with memd.open(tmp_path / "d") as m:
        assert m.store.api_key_user(hash_key(secret), time.time()) is None
    assert run(cli, [*base, "workspace", "add", "rocket", "dana"]).output.strip() == \
        "rocket: dana"
    assert run(cli, [*base, "workspace", "members", "rocket"]).output.strip() == "dana"
    refused = run(cli, [*base, "serve", "--host", "0.0.0.0"])
    assert refused.exit_code == 2 and "without --auth" in refused.output


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_cli_talks_to_an_auth_daemon_with_its_key(team: Team, tmp_path: Path) -> None:
    from memd.server.discovery import remove_daemon_file, write_daemon_file

    host, port = team.base.removeprefix("http://").split(":")
    marker = write_daemon_file(team.engine.settings.data_dir, host, int(port))
    try:
        base = ["--data-dir", str(team.engine.settings.data_dir)]
        run = CliRunner().invoke
        added = run(cli, [*base, "add", "Dana deploys with Nomad", "--user", "alice"],
                    env={"MEMD_API_KEY": team.keys["alice"]})
        assert added.exit_code == 0, added.output
        assert [m.text for m in team.engine.list("alice")] == ["Dana deploys with Nomad"]
        keyless = run(cli, [*base, "search", "Nomad", "--user", "alice"],
                      env={"MEMD_API_KEY": ""})
        assert keyless.exit_code == 2 and "MEMD_API_KEY" in keyless.output
        posing = run(cli, [*base, "search", "Nomad", "--user", "bob"],
                     env={"MEMD_API_KEY": team.keys["alice"]})
        assert posing.exit_code == 2 and "cannot act as 'bob'" in posing.output
    finally:
        remove_daemon_file(marker)
