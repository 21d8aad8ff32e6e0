"""Listing proxied calls: ``GET /v1/calls`` in-process (SQLite, fake embedder, a mock
upstream where a real chat is proxied) in local and authenticated mode, and the
``memd calls`` command, from the store directly and through a running daemon."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from servers import serve
from test_api import BASE, ok

import memd
from memd.auth import hash_key, key_id_of, new_key
from memd.cli import main as cli
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.server.discovery import remove_daemon_file, write_daemon_file

# A report as the proxy writes it, with the keys `memd calls` summarises, and one as
# older versions wrote it (no window, no retry flag).
REPORT = {"window": {"tokens": 128000, "source": "config"}, "tokens": {"memory": 312},
          "items": []}
OLD_REPORT = {"task_type": "chat", "budget": {"C": 8192}, "tokens": {"memory": 40},
              "items": []}


def ids(resp: Any) -> list[str]:
    body = ok(resp)
    assert body["object"] == "list"
    return [c["id"] for c in body["data"]]


def record(engine: Memd, call_id: str, created_at: float, user: str = "local",
           session: str = "s1", workspace: str | None = None,
           report: dict[str, Any] | None = None) -> None:
    engine.store.record_call(call_id, user, session, workspace, "gpt-x", created_at,
                             REPORT if report is None else report)


# -- GET /v1/calls --------------------------------------------------------------------
def test_lists_the_acting_users_calls_newest_first(engine: Memd, client: TestClient) -> None:
    record(engine, "c1", 1000.0)
    record(engine, "c2", 2000.0, session="s2")
    record(engine, "b1", 1500.0, user="bob")
    body = ok(client.get("/v1/calls"))
    assert [c["id"] for c in body["data"]] == ["c2", "c1"]  # the default user: no header
    assert body["data"][0] == engine.store.get_call("local", "c2")
    assert body["data"][0]["report"] == REPORT
    assert ids(client.get("/v1/calls", headers={"X-Memd-User": "bob"})) == ["b1"]
    assert ids(client.get("/v1/calls", params={"user_id": "bob"})) == ["b1"]
    assert ids(client.get("/v1/calls", params={"session": "s2"})) == ["c2"]
    assert ids(client.get("/v1/calls", params={"limit": 1})) == ["c2"]
    assert ids(client.get("/v1/calls", headers={"X-Memd-User": "carol"})) == []


def test_since_and_until_take_unix_times_and_iso_datetimes(engine: Memd,
                                                           client: TestClient) -> None:
    t0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    for i in range(4):
        record(engine, f"c{i}", t0 + i * 3600)
    assert ids(client.get("/v1/calls", params={"since": t0 + 3600})) == ["c3", "c2", "c1"]
    assert ids(client.get("/v1/calls", params={"since": "1700003600"})) == ["c3", "c2", "c1"]
    assert ids(client.get("/v1/calls", params={"until": t0 + 3600})) == ["c0"]
    assert ids(client.get("/v1/calls", params={"since": "2023-11-14T23:13:20Z",
                                               "until": "2023-11-15T01:13:20+00:00"})) \
        == ["c2", "c1"]
    # without an offset, UTC; another offset moves the instant
    assert ids(client.get("/v1/calls", params={"since": "2023-11-15T00:13:20"})) == ["c3", "c2"]
    assert ids(client.get("/v1/calls", params={"since": "2023-11-15T01:13:20+01:00"})) \
        == ["c3", "c2"]


@pytest.mark.parametrize("field,value", [("since", "yesterday"), ("until", "2023-13-01"),
                                         ("since", "nan"), ("until", "inf")])
def test_a_bad_time_is_a_400(client: TestClient, field: str, value: str) -> None:
    resp = client.get("/v1/calls", params={field: value})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert field in error["message"] and value in error["message"]


@pytest.mark.parametrize("limit", [0, 501])
def test_limit_is_bounded(client: TestClient, limit: int) -> None:
    resp = client.get("/v1/calls", params={"limit": limit})
    assert resp.status_code == 422 and "limit" in resp.json()["error"]["message"]


def test_under_a_workspace_prefix_only_its_calls(engine: Memd, client: TestClient) -> None:
    record(engine, "root", 1000.0)
    record(engine, "p1", 2000.0, workspace="proj")
    record(engine, "o1", 3000.0, workspace="other")
    assert ids(client.get("/v1/calls")) == ["o1", "p1", "root"]
    assert ids(client.get("/w/proj/v1/calls")) == ["p1"]
    assert ids(client.get("/v1/calls", params={"workspace": "other"})) == ["o1"]
    assert ids(client.get("/w/empty/v1/calls")) == []


def _upstream(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-x",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "noted"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    })


def test_a_proxied_chat_is_listed_with_its_report(engine: Memd) -> None:
    settings = replace(engine.settings, upstream_url="http://upstream/v1")
    app = create_app(engine, settings, run_jobs=False,
                     upstream_transport=httpx.MockTransport(_upstream))
    with TestClient(app, base_url=BASE) as c:
        resp = c.post("/w/proj/v1/chat/completions", json={
            "model": "gpt-x", "messages": [{"role": "user", "content": "I use tabs"}]})
        assert resp.status_code == 200, resp.text
        call_id, session_id = resp.headers["x-memd-call"], resp.headers["x-memd-session"]
        (listed,) = ok(c.get("/w/proj/v1/calls"))["data"]
        assert listed == ok(c.get(f"/v1/calls/{call_id}"))
        assert ids(c.get("/w/other/v1/calls")) == []
    assert listed["id"] == call_id and listed["session_id"] == session_id
    assert (listed["user_id"], listed["workspace"], listed["model"], listed["status"]) == (
        "local", "proj", "gpt-x", 200)
    assert listed["report"]["tokens"]["memory"] >= 0


def test_auth_mode_lists_only_the_keys_user(engine: Memd) -> None:
    keys = {}
    for user in ("alice", "bob"):
        engine.store.create_user(user, user.title(), time.time())
        keys[user] = new_key()
        digest = hash_key(keys[user])
        engine.store.add_api_key(key_id_of(digest), user, digest, "test", time.time())
        record(engine, f"{user}-1", 1000.0, user=user)
        record(engine, f"{user}-2", 2000.0, user=user, workspace="shared")
    engine.store.add_workspace_member("shared", "alice", time.time())
    engine.store.add_workspace_member("shared", "bob", time.time())
    app = create_app(engine, replace(engine.settings, auth=True), run_jobs=False)
    with TestClient(app, base_url=BASE) as c:
        def as_(user: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {keys[user]}"}

        assert ids(c.get("/v1/calls", headers=as_("alice"))) == ["alice-2", "alice-1"]
        assert ids(c.get("/v1/calls", headers=as_("bob"))) == ["bob-2", "bob-1"]
        # a shared workspace shares memories, not the members' calls
        assert ids(c.get("/w/shared/v1/calls", headers=as_("alice"))) == ["alice-2"]
        for named in ({"X-Memd-User": "bob"}, {}):
            resp = c.get("/v1/calls", headers={**as_("alice"), **named},
                         params={} if named else {"user_id": "bob"})
            assert resp.status_code == 403 and "bob" in resp.json()["error"]["message"]
        assert c.get("/v1/calls").status_code == 401


# -- memd calls -----------------------------------------------------------------------
def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def stored() -> dict[str, float]:
    """Calls recorded in the CLI's own data dir (no daemon runs); their times by id."""
    now = time.time()
    times = {"old": now - 7200, "legacy": now - 1800, "new": now - 60}
    with memd.open() as m:
        record(m, "old", times["old"], session="s1", report={})
        record(m, "legacy", times["legacy"], session="s2", report=OLD_REPORT)
        record(m, "new", times["new"], session="s1")
        record(m, "bobs", now - 30, user="bob")
        m.store.finish_call("new", 200, {"latency_ms": 12, "retried": True})
    return times


def _local(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def test_cli_lists_one_line_a_call_newest_first(stored: dict[str, float]) -> None:
    res = run("calls")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [line.split("  ")[1] for line in lines] == ["new", "legacy", "old"]
    assert lines[0] == (f"{_local(stored['new'])}  new  200  gpt-x  s1  "
                        "window=128000 (config)  memory=312  retried")
    # an older report: no window, no retry flag, still its memory tokens; no report: none
    assert lines[1] == f"{_local(stored['legacy'])}  legacy  -  gpt-x  s2  memory=40"
    assert lines[2] == f"{_local(stored['old'])}  old  -  gpt-x  s1"
    assert run("calls", "--session", "s1", "--limit", "1").output.split("  ")[1] == "new"
    assert run("calls", "--user", "bob").output.split("  ")[1] == "bobs"
    assert run("calls", "--user", "carol").output == "no calls\n"


def test_cli_json_prints_full_records_one_a_line(stored: dict[str, float]) -> None:
    res = run("calls", "--json")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.output.splitlines()]
    assert [r["id"] for r in records] == ["new", "legacy", "old"]
    assert records[0]["report"] == REPORT
    assert records[0]["metadata"] == {"latency_ms": 12, "retried": True}
    assert records[1]["created_at"] == stored["legacy"] and records[1]["user_id"] == "local"


def test_cli_show_prints_one_call_in_full(stored: dict[str, float]) -> None:
    res = run("calls", "--show", "legacy", "--json")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("{\n  ")  # indented
    shown = json.loads(res.output)
    assert shown["id"] == "legacy" and shown["report"] == OLD_REPORT
    text, _, rest = run("calls", "--show", "legacy").output.partition("report (JSON):\n")
    assert text.startswith("call legacy: ") and json.loads(rest) == shown
    missing = run("calls", "--show", "bobs")  # another user's: not found
    assert missing.exit_code == 2 and "no call 'bobs'" in missing.output


def test_cli_since_takes_durations_unix_times_and_iso(stored: dict[str, float]) -> None:
    def listed(since: str) -> list[str]:
        res = run("calls", "--since", since, "--json")
        assert res.exit_code == 0, res.output
        return [json.loads(line)["id"] for line in res.output.splitlines()]

    assert listed("1h") == ["new", "legacy"]
    assert listed("5m") == ["new"]
    assert listed("3h") == ["new", "legacy", "old"]
    assert listed(str(stored["legacy"])) == ["new", "legacy"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(stored["legacy"] + 1))
    assert listed(iso) == ["new"]  # an ISO time without an offset is local time


@pytest.mark.parametrize("since", ["soon", "10 parsecs", "nan", ""])
def test_cli_a_bad_since_is_a_usage_error(since: str) -> None:
    res = run("calls", "--since", since)
    assert res.exit_code == 2
    assert "Invalid value for '--since'" in res.output and "is not a time" in res.output


def test_cli_goes_through_a_running_daemon(tmp_path: Path, hermetic_env: Path) -> None:
    """The daemon serves another data dir than the CLI's own, so what the CLI prints
    can only have come from it."""
    served = memd.open(tmp_path / "served")
    now = time.time()
    record(served, "far", now - 7200)
    record(served, "near", now - 60, session="s9")
    record(served, "bobs", now - 30, user="bob")
    try:
        with serve(create_app(served, run_jobs=False)) as base:
            marker = write_daemon_file(hermetic_env, "127.0.0.1", int(base.rsplit(":", 1)[1]))
            try:
                res = run("calls")
                assert res.exit_code == 0, res.output
                assert [line.split("  ")[1] for line in res.output.splitlines()] == [
                    "near", "far"]
                assert run("calls", "--since", "1h", "--json").output.count("\n") == 1
                assert json.loads(run("calls", "--user", "bob", "--json").output)["id"] \
                    == "bobs"
                assert json.loads(run("calls", "--show", "near", "--json").output)[
                    "session_id"] == "s9"
                missing = run("calls", "--show", "bobs")
                assert missing.exit_code == 2 and "bobs" in missing.output
            finally:
                remove_daemon_file(marker)
    finally:
        served.close()


def test_cli_show_reads_the_block_its_lines_and_near_misses_without_json() -> None:
    block = "<memory source=\"memd\">\n- deploys go out on Thursdays\n</memory>"
    report = {"mode": "inject", "injected": block,
              "tokens": {"request": 120, "memory": 14},
              "room": {"reserve": 1024}, "window": {"tokens": 8192, "source": "config"},
              "items": [{"kind": "memory", "score": 0.61, "tokens": 9, "section": "memory",
                         "id": "m-1", "text": "deploys go out on Thursdays"}],
              "near_misses": [{"kind": "recall", "score": 0.33, "tokens": 700,
                               "id": "msg-9", "text": "a long earlier exchange " * 20}]}
    with memd.open() as m:
        record(m, "c1", time.time(), report=report)
        m.store.finish_call("c1", 200, {"usage": {"prompt_tokens": 134,
                                                  "prompt_tokens_details": {
                                                      "cached_tokens": 96}}})
        res = run("calls", "--show", "c1")
    assert res.exit_code == 0, res.output
    text = res.output.partition("report (JSON):")[0]
    assert "window 8192 (config): request 120, memory 14, response reserve 1024" in text
    assert "    - deploys go out on Thursdays" in text  # the block, as sent
    assert "memory    0.610    9 tok  memory m-1  deploys go out on Thursdays" in text
    assert "near misses:" in text and "recall    0.330  700 tok  msg-9" in text
    assert "prompt cache: read 96, written 0 tokens" in text
    assert max(len(line) for line in text.splitlines()) < 160  # a long text is cut


def test_cli_shows_the_prompt_cache_figures_the_upstream_gave() -> None:
    now = time.time()
    with memd.open() as m:
        record(m, "claude", now - 20, session="s1")
        m.store.finish_call("claude", 200, {"usage": {
            "input_tokens": 12, "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 300}})
        record(m, "gpt", now - 10, session="s2")
        m.store.finish_call("gpt", 200, {"usage": {
            "prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 768}}})
        record(m, "plain", now - 5, session="s3")
        m.store.finish_call("plain", 200, {"usage": {"prompt_tokens": 900}})
    lines = run("calls").output.splitlines()
    assert "cache" not in lines[0]
    assert lines[1].endswith("  cache read=768")
    assert lines[2].endswith("  cache read=9000 cache written=300")


def test_cli_show_reads_a_virtualized_call_out(hermetic_env: Path) -> None:
    """The report's ``virtual`` section, as a real virtualized call makes it, printed
    readably above the JSON: zone, tokens saved, each object's fidelity and declared
    loss, the faults served."""
    from memd.config import VirtualZones
    from memd.engine.virtual import Budget, virtualize

    big = "\n".join(f"line {k}: value_{k} = {k * 7}" for k in range(400))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Read app.py"}]
    for k in range(3):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{k}", "type": "function", "function": {
                "name": "read", "arguments": json.dumps({"path": f"src/app{k}.py"})}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": big}]
    with memd.open() as m:
        s = m.create_session("local")
        done = virtualize(m.store, "local", s.id, messages, Budget(12_000, 500, 14_000),
                          VirtualZones(), mode="auto", model=None, call_id="v1", now=1.0)
        report = {"virtual": {**done.report, "faults": [{
            "fault_id": "f1", "kind": "query", "question": "What is value_7?",
            "objects": ["ctx-1"], "tokens_avoided": 2900, "latency_ms": 4}]}}
        record(m, "v1", time.time(), session=s.id, report=report)
    held = done.report["held"]
    assert held  # something was held below full
    res = run("calls", "--show", "v1")
    assert res.exit_code == 0, res.output
    text, _, rest = res.output.partition("\n{\n")
    assert json.loads("{\n" + rest)["report"] == report  # the JSON follows, whole
    tokens = done.report["tokens"]
    assert f"zone {done.report['zone']} -> {done.report['zone_after']}" in text
    assert f"{tokens['request']} asked, {tokens['forwarded']} forwarded, " \
           f"{tokens['saved']} saved" in text
    for h in held:
        assert f"{h['object_id']} {h['fidelity']} ({h['tokens']} of {h['tokens_full']}" \
               in text
        assert f"lost: {'; '.join(h['loss']['dropped'])}" in text
    assert "faults served: 1" in text
    assert "query f1: What is value_7? (2900 tokens avoided, 4 ms)" in text
    # --json keeps the JSON alone, for scripts
    assert json.loads(run("calls", "--show", "v1", "--json").output)["id"] == "v1"
