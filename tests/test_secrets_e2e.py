"""Secrets never become memory: a conversation through the proxy that holds an OpenAI key,
an AWS key pair, a GitHub token, a private key and an email address leaves none of them
in anything memd derives (memories, facts, full-text indexes, embedding inputs, job
payloads, helper-model prompts, exports, later memory blocks, logs); only the stored
message itself keeps what the client sent, for its owner. Both backends."""

from __future__ import annotations

import gc
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from servers import FakeUpstream, memd_in_front

import memd
from memd.backends.sqlite.fulltext import fts_query
from memd.cli import main
from memd.engine.memory import Memd
from memd.models.embedder import FakeEmbedder
from memd.privacy.urls import redact_url
from tests.sanitizer_corpus import AKIA, AWS_SECRET, GHP, OPENAI_PROJ, PEM, PEM_BODY

EMAIL = "jane.doe@example.com"
SECRETS = {"openai": OPENAI_PROJ, "aws id": AKIA, "aws secret": AWS_SECRET, "github": GHP,
           "private key": PEM_BODY.splitlines()[1], "email": EMAIL}
FIRST = (f"Remember this for the deploy: my OpenAI key is {OPENAI_PROJ} and my GitHub token "
         f"is {GHP}. I use the AWS credentials\naws_access_key_id = {AKIA}\n"
         f"aws_secret_access_key = {AWS_SECRET}\nMy email is {EMAIL}. The deploy key is\n{PEM}")
SECOND = f"Again, for the deploy my OpenAI key is {OPENAI_PROJ}"
LATER = "What is my OpenAI key for the deploy, my GitHub token and my AWS credentials?"
PLACEHOLDER = re.compile(r"\[[A-Z_]+_\d+\]")


def leaked(text: str) -> list[str]:
    """The secrets (by name) that ``text`` holds a part of (any 16 characters of one, in
    any case: a secret cut in two leaks too)."""
    low = text.lower()
    return [name for name, value in SECRETS.items()
            if any(value[i:i + 16].lower() in low for i in range(len(value) - 15))]


def distinctive(value: str) -> str:
    """A word of ``value`` as a full-text index would cut it: its longest run of letters
    and digits."""
    return max(re.findall(r"[^\W_]+", value), key=len)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the embedder is asked to embed and what jobs are enqueued with, on every
    store."""
    seen: dict[str, list[Any]] = {"embedded": [], "payloads": []}
    embed = FakeEmbedder.embed

    def recording_embed(self: FakeEmbedder, texts: Any) -> Any:
        seen["embedded"].extend(texts)
        return embed(self, texts)

    monkeypatch.setattr(FakeEmbedder, "embed", recording_embed)
    from memd.backends.common.jobs import Jobs

    enqueue = Jobs.enqueue_job

    def recording_enqueue(self: Any, kind: str, payload: dict[str, Any], *args: Any) -> Any:
        seen["payloads"].append(json.dumps(payload))
        return enqueue(self, kind, payload, *args)

    monkeypatch.setattr(Jobs, "enqueue_job", recording_enqueue)
    return seen


class RecordingHelper:
    """A helper model that keeps every prompt it is given and finds nothing."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages: list[dict[str, Any]], **_: Any) -> str:
        self.prompts.append(json.dumps(messages))
        return '{"facts": []}'


def chat(base: str, messages: list[dict[str, Any]], **headers: str) -> httpx.Response:
    resp = httpx.post(f"{base}/v1/chat/completions", timeout=60, headers=headers,
                      json={"model": "gpt-4o", "messages": messages})
    assert resp.status_code == 200, resp.text
    return resp


def settle(engine: Memd) -> None:
    engine.jobs.flush()
    deadline = time.monotonic() + 60
    while engine.store.pending_jobs():
        assert time.monotonic() < deadline, "background jobs did not finish"
        if not engine.jobs.run_due():
            time.sleep(0.01)


@pytest.fixture
def conversation(tmp_path: Path, backend: str, recorded: dict[str, list[Any]],
                 caplog: pytest.LogCaptureFixture) -> Iterator[dict[str, Any]]:
    """A proxied conversation with secrets, then a later chat in a new session."""
    caplog.set_level(logging.INFO)
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d", backend,
                       sanitize="secrets+pii") as (base, engine):
        helper = RecordingHelper()
        engine.jobs.helper = helper  # type: ignore[assignment]
        first = [{"role": "user", "content": FIRST}]
        resp = chat(base, first)
        session = resp.headers["x-memd-session"]
        reply = resp.json()["choices"][0]["message"]
        chat(base, [*first, reply, {"role": "user", "content": SECOND}])
        settle(engine)
        chat(base, [{"role": "user", "content": LATER}])
        settle(engine)
        listed = httpx.get(f"{base}/v1/sessions/{session}/messages", timeout=30).json()
        yield {"engine": engine, "session": session, "upstream": upstream, "listed": listed,
               "db": engine.settings.db, "data_dir": engine.settings.data_dir,
               "log": caplog, "helper": helper.prompts}


def test_nothing_derived_holds_a_secret(conversation: dict[str, Any],
                                        recorded: dict[str, list[Any]]) -> None:
    engine: Memd = conversation["engine"]
    user = engine.settings.default_user
    memories = engine.list(user, include_inactive=True, limit=1000)
    facts = engine.facts(user, include_history=True)
    assert memories and facts  # extraction ran on the conversation
    for text in [m.text for m in memories] + [f.value for f in facts]:
        assert leaked(text) == [], text
    assert recorded["embedded"] and recorded["payloads"]
    assert [t for t in recorded["embedded"] if leaked(t)] == []
    assert [p for p in recorded["payloads"] if leaked(p)] == []
    for value in SECRETS.values():
        assert engine.store.keyword_messages(user, distinctive(value), 10) == []
    # The later chat's memory block recalls the conversation, in placeholders only.
    later = conversation["upstream"].requests[-1]
    assert leaked(json.dumps(later)) == []
    block = later["messages"][-1]["content"]
    assert "<memory" in block and "[API_KEY_" in block
    assert leaked(conversation["log"].text) == []
    assert conversation["helper"]  # the helper read the user's words, sanitized
    assert [p for p in conversation["helper"] if leaked(p)] == []


def test_an_export_holds_no_secret(conversation: dict[str, Any]) -> None:
    """`memd export` writes each message's sanitized text in place of its original."""
    import io

    from memd.transfer.run import export_store

    out = io.StringIO()
    export_store(conversation["engine"].settings, out)
    lines = out.getvalue().splitlines()
    assert len(lines) > 10 and any('"messages"' in line for line in lines)
    assert [line for line in lines if leaked(line)] == []


def test_the_owner_reads_back_what_was_sent_with_stable_placeholders(
    conversation: dict[str, Any],
) -> None:
    engine: Memd = conversation["engine"]
    listed = [m["content"] for m in conversation["listed"]["messages"]]
    assert listed[0] == FIRST and listed[2] == SECOND
    stored = engine.messages(conversation["session"], engine.settings.default_user)
    first, second = stored[0].sanitized, stored[2].sanitized
    assert first is not None and second is not None
    assert leaked(first) == [] and leaked(second) == []
    key = PLACEHOLDER.findall(first)[0]  # the OpenAI key, said first
    assert key.startswith("[API_KEY_") and PLACEHOLDER.findall(second) == [key]
    assert len(set(PLACEHOLDER.findall(first))) == len(SECRETS)
    assert stored[1].role == "assistant" and leaked(stored[1].safe_text or "") == []


@pytest.mark.parametrize("backend", ["sqlite"])
def test_sqlite_file_holds_secrets_only_in_message_content(
    conversation: dict[str, Any],
) -> None:
    engine: Memd = conversation["engine"]
    engine.close()
    path = conversation["data_dir"] / "memd.db"
    db = apsw.Connection(str(path))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tables = [n for (n,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
        "'CREATE VIRTUAL TABLE%'")]
    found = []
    for table in tables:
        columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        for row in db.execute(f'SELECT * FROM "{table}"'):
            for column, value in zip(columns, row, strict=True):
                if (table, column) == ("messages", "content"):
                    continue
                if isinstance(value, bytes):
                    value = value.decode("latin-1")
                if isinstance(value, str) and leaked(value):
                    found.append((table, column, leaked(value)))
    assert found == []
    user = engine.settings.default_user
    for value in SECRETS.values():
        match = fts_query(user, distinctive(value))
        assert db.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                          (match,)).fetchall() == [(0,)]
    # The index's terms are lowercased, so a lowercased part of a mixed-case secret in
    # the file's bytes (free pages too) could only come from an index.
    data = path.read_bytes()
    for value in (OPENAI_PROJ, GHP, AKIA, AWS_SECRET):
        assert value[8:24].encode() in data  # the message content
        assert value[8:24].lower().encode() not in data
    db.close()


@pytest.mark.parametrize("backend", ["postgres"])
def test_postgres_keyword_index_holds_no_secret(conversation: dict[str, Any]) -> None:
    import psycopg

    with psycopg.connect(conversation["db"]) as conn:
        rows = conn.execute("SELECT content, sanitized, content_tsv::text FROM messages "
                            "WHERE session_id = %s", (conversation["session"],)).fetchall()
        assert any(leaked(content) for content, _, _ in rows)  # the original is kept
        for _, sanitized, tsv in rows:
            assert leaked(tsv) == [] and leaked(sanitized or "") == []
            for value in SECRETS.values():
                assert distinctive(value).lower() not in tsv
        for table, column in (("memories", "content_text"), ("facts", "value"),
                              ("jobs", "payload::text"), ("calls", "report::text")):
            for (text,) in conn.execute(f"SELECT {column} FROM {table}").fetchall():
                assert leaked(text or "") == [], (table, text)


def test_memd_add_stores_the_placeholder(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--data-dir", str(tmp_path / "d"), "add",
                                       f"the CI token is {GHP}", "--user", "alice",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["text"] == "the CI token is [API_KEY_1]"
    with memd.open(tmp_path / "d") as m:
        (mem,) = m.list("alice")
    assert mem.text == "the CI token is [API_KEY_1]"


def test_post_memories_and_facts_store_placeholders(client: TestClient) -> None:
    resp = client.post("/v1/memories", json={"user_id": "alice",
                                              "text": f"deploy with {OPENAI_PROJ}"})
    assert resp.status_code == 201 and resp.json()["memory"]["text"] == "deploy with [API_KEY_1]"
    resp = client.put("/v1/facts", json={"user_id": "alice", "category": "ci",
                                         "key": "token", "value": GHP})
    assert resp.status_code < 300, resp.text
    assert leaked(client.get("/v1/facts", params={"user_id": "alice"}).text) == []


def test_placeholders_are_per_session(engine: Memd) -> None:
    a = engine.create_session("alice")
    b = engine.create_session("alice")
    engine.append(a.id, "alice", [{"role": "user", "content": f"first {AKIA}"}])
    engine.append(b.id, "alice", [{"role": "user", "content": f"other {GHP} then {AKIA}"}])
    (again,) = engine.append(a.id, "alice", [{"role": "user", "content": f"again {AKIA}"}])
    assert again.sanitized == "again [API_KEY_1]"
    assert engine.messages(b.id, "alice")[0].sanitized == "other [API_KEY_1] then [API_KEY_2]"


def test_memd_built_history_is_sanitized_and_the_proxy_forwards_as_sent(
    tmp_path: Path,
) -> None:
    upstream = FakeUpstream()
    with memd_in_front(upstream.app, tmp_path / "d") as (base, engine):
        pinned = {"X-Memd-Session": "pinned-1"}
        chat(base, [{"role": "user", "content": f"my token is {GHP}"}], **pinned)
        chat(base, [{"role": "user", "content": "and what else?"}], **pinned)
        # memd owns this session's history: it forwards the client's own words
        assert GHP in json.dumps(upstream.requests[-1]["messages"])
        ctx = engine.context(engine.settings.default_user, session_id="pinned-1")
        assert GHP not in json.dumps(ctx.messages)
        assert "my token is [API_KEY_1]" in json.dumps(ctx.messages)


def test_serve_logs_the_upstream_without_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    import signal

    from memd.server import listen

    monkeypatch.setattr(listen, "run", lambda *a, **kw: None)
    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    caplog.set_level(logging.INFO)
    url = "https://bob:hunter2pass@models.example.net:8443/v1?api_key=zz9secret&region=eu"
    result = CliRunner().invoke(main, ["serve", "--data-dir", str(tmp_path / "d"),
                                       "--upstream-url", url, "--port", "1"])
    assert result.exit_code == 0, result.output
    assert "upstream: https://models.example.net:8443/v1?api_key=***&region=eu" in caplog.text
    for secret in ("hunter2pass", "bob", "zz9secret"):
        assert secret not in caplog.text


@pytest.mark.parametrize(("url", "shown"), [
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("http://u:p4ss@[::1]:99/v1?token=abc&x=1", "http://[::1]:99/v1?token=***&x=1"),
    ("https://h/v1?X-Amz-Signature=abc#frag", "https://h/v1?X-Amz-Signature=***"),
    ("postgresql://me:pw@db.internal:5433/memd", "database memd on db.internal:5433"),
    ("user:pw@host", "(not a URL)"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_sanitize_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memd.config import load_settings
    from memd.errors import InvalidInput

    monkeypatch.setenv("MEMD_SANITIZE", "secrets+pii")
    assert load_settings().sanitize == "secrets+pii"
    monkeypatch.setenv("MEMD_SANITIZE", "everything")
    with pytest.raises(InvalidInput):
        load_settings()
    monkeypatch.delenv("MEMD_SANITIZE")
    config = tmp_path / "c.toml"
    config.write_text('sanitize = "off"\n[sanitize_patterns]\nticket = "TICKET-[0-9]{6}"\n')
    settings = load_settings(config)
    assert settings.sanitize == "off" and settings.sanitize_patterns[0].name == "ticket"
    config.write_text('[sanitize_patterns]\nticket = "(unclosed"\n')
    with pytest.raises(InvalidInput):
        load_settings(config)
    config.write_text('sanitizer = "nope"\n')
    with pytest.raises(InvalidInput):
        memd.open(tmp_path / "d", settings=load_settings(config))
    with memd.open(tmp_path / "e", sanitize="off") as m:
        s = m.create_session("alice")
        (msg,) = m.append(s.id, "alice", [{"role": "user", "content": f"key {GHP}"}])
        assert msg.sanitized is None


def test_custom_patterns_apply(tmp_path: Path) -> None:
    from memd.privacy import CustomPattern

    with memd.open(tmp_path / "d", sanitize_patterns=(
            CustomPattern("ticket", "TICKET-[0-9]{6}"),)) as m:
        s = m.create_session("alice")
        (msg,) = m.append(s.id, "alice", [{"role": "user", "content": "see TICKET-123456"}])
        assert msg.sanitized == "see [TICKET_1]"
