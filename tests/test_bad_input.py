"""Bad input gets a 4xx that says what is wrong, nothing half-written, on every backend.

Lone surrogates, NUL characters, NaN, wrongly typed fields and deeply nested bodies are
refused at the engine's edge, so that SQLite (which would store most of them) and
PostgreSQL (which refuses them) answer alike. The proxy is the exception: a coding
agent's tool output may hold a NUL or a lone surrogate, and its call still goes upstream
as sent while memd stores a cleaned copy.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from ollama_upstream import FakeOllama
from servers import FakeUpstream, postgres_url
from starlette.applications import Starlette

import memd
from memd.config import load_settings
from memd.engine import validate
from memd.engine.memory import Memd
from memd.errors import Conflict, InvalidInput
from memd.server.app import create_app, public_message
from memd.server.security import brackets_deeper, nests_deeper

SURROGATE = "\ud800"  # a lone surrogate: json.dumps writes it as the escape \ud800
NUL = "a\x00b"
DEEP = 1000


@dataclass
class Api:
    client: TestClient
    engine: Memd
    upstream: FakeUpstream
    backend: str

    def raw(self, method: str, path: str, body: Any,
            headers: dict[str, str] | None = None) -> httpx.Response:
        """Send ``body`` as JSON that httpx would not send: lone surrogates as escapes,
        NaN and Infinity as bare words (a string is sent as written)."""
        text = body if isinstance(body, str) else json.dumps(body)
        return self.client.request(method, path, content=text.encode(), headers={
            "content-type": "application/json", **(headers or {})})

    def messages(self, session_id: str, user: str = "local") -> list[dict[str, Any]]:
        resp = self.client.get(f"/v1/sessions/{session_id}/messages",
                               params={"user_id": user})
        assert resp.status_code == 200, resp.text
        found: list[dict[str, Any]] = resp.json()["messages"]
        return found

    def calls(self, user: str = "local") -> list[dict[str, Any]]:
        resp = self.client.get("/v1/calls", params={"user_id": user})
        assert resp.status_code == 200, resp.text
        found: list[dict[str, Any]] = resp.json()["data"]
        return found

    def nothing_stored(self, user: str = "local") -> None:
        assert self.client.get("/v1/memories", params={"user_id": user}).json() == {
            "memories": []}
        assert self.client.get("/v1/facts", params={"user_id": user}).json() == {"facts": []}
        assert self.engine.store.list_sessions(user) == []
        assert self.calls(user) == []


@pytest.fixture
def api(backend: str, tmp_path: Path) -> Iterator[Api]:
    upstream = FakeUpstream()
    settings = replace(load_settings(data_dir=tmp_path / "d"),
                       upstream_url="http://upstream/v1", embedder="fake")
    if backend == "postgres":
        settings = replace(settings, db=postgres_url(), pg_partitions=(4, 4, 4))
    engine = memd.open(settings=settings)
    # one in-process server for every upstream: the OpenAI-format one and Ollama's
    both = Starlette(routes=[*upstream.app.routes, *FakeOllama().app.routes])
    app = create_app(engine, settings, run_jobs=False,
                     upstream_transport=httpx.ASGITransport(app=both))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield Api(client, engine, upstream, backend)
    engine.close()


def refused(resp: httpx.Response, status: int, *words: str) -> str:
    """The error message of a refusal with ``status`` that names ``words``."""
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    for word in words:
        assert word in error["message"], error["message"]
    message: str = error["message"]
    return message


# -- the native API: a clear 400 ------------------------------------------------------
@pytest.mark.parametrize(("message", "words"), [
    ({"content": SURROGATE}, ("messages[1].content", "surrogate")),
    ({"content": NUL}, ("messages[1].content", "NUL")),
    ({"name": SURROGATE}, ("messages[1].name", "surrogate")),
    ({"metadata": {"k": SURROGATE}}, ("metadata.k", "surrogate")),
    ({"metadata": {SURROGATE: 1}}, ("key of messages[1].metadata", "surrogate")),
    ({"metadata": {"k": NUL}}, ("metadata.k", "NUL")),
    ({"metadata": {"k": math.nan}}, ("metadata.k", "nan")),
    ({"tool_calls": [{"id": SURROGATE, "type": "function"}]},
     ("tool_calls[0].id", "surrogate")),
    ({"content": [{"type": "text", "text": NUL}]}, ("content[0].text", "NUL")),
])
def test_appended_message_with_bad_text_is_a_400(api: Api, message: dict[str, Any],
                                                 words: tuple[str, ...]) -> None:
    sid = api.client.post("/v1/sessions", json={}).json()["id"]
    body = {"messages": [{"role": "user", "content": "fine"},
                         {"role": "user", "content": "x", **message}]}
    refused(api.raw("POST", f"/v1/sessions/{sid}/messages", body), 400, *words)
    assert api.messages(sid) == []


@pytest.mark.parametrize(("field", "value", "words"), [
    ("finish_reason", 5, ("finish_reason", "valid string")),
    ("model", [1], ("model", "valid string")),
    ("prompt_tokens", "12", ("prompt_tokens", "valid integer")),
    ("content", 5, ("content",)),
])
def test_appended_message_with_a_wrong_type_is_refused(api: Api, field: str, value: Any,
                                                       words: tuple[str, ...]) -> None:
    sid = api.client.post("/v1/sessions", json={}).json()["id"]
    body = {"messages": [{"role": "assistant", "content": "x", field: value}]}
    refused(api.raw("POST", f"/v1/sessions/{sid}/messages", body), 422, *words)
    assert api.messages(sid) == []


def test_a_whole_float_is_an_integer(api: Api) -> None:
    """JSON does not tell 12.0 from 12, so neither does memd; 12.5 is refused."""
    sid = api.client.post("/v1/sessions", json={}).json()["id"]
    message = {"role": "assistant", "content": "x", "prompt_tokens": 12.0}
    resp = api.raw("POST", f"/v1/sessions/{sid}/messages", {"messages": [message]})
    assert resp.status_code == 201, resp.text
    resp = chat(api, {"role": "user", "content": "hi", "latency_ms": 7.0})
    assert resp.status_code == 200, resp.text
    refused(chat(api, {"role": "user", "content": "hi", "latency_ms": 7.5}), 400,
            "latency_ms must be a non-negative integer")


@pytest.mark.parametrize(("field", "value"), [
    ("finish_reason", 5), ("model", ["gpt"]), ("latency_ms", -1), ("name", 3),
])
def test_engine_refuses_wrongly_typed_message_fields(api: Api, field: str,
                                                     value: Any) -> None:
    session = api.engine.create_session("local")
    with pytest.raises(InvalidInput, match=f"messages\\[0\\].{field}"):
        api.engine.append(session.id, "local",
                          [{"role": "assistant", "content": "x", field: value}])
    assert api.engine.messages(session.id, "local") == []


@pytest.mark.parametrize(("path", "method", "body", "words"), [
    ("/v1/memories", "POST", {"text": SURROGATE}, ("text", "surrogate")),
    ("/v1/memories", "POST", {"text": NUL}, ("text", "NUL")),
    ("/v1/memories", "POST", {"text": "ok", "tags": [SURROGATE]}, ("tags[0]", "surrogate")),
    ("/v1/memories", "POST", {"text": "ok", "tags": [NUL]}, ("tags[0]", "NUL")),
    ("/v1/memories", "POST", {"text": "ok", "metadata": {SURROGATE: 1}},
     ("key of metadata", "surrogate")),
    ("/v1/memories", "POST", {"text": "ok", "metadata": {"n": math.nan}}, ("metadata.n", "nan")),
    ("/v1/memories", "POST", {"text": "ok", "metadata": {"n": math.inf}}, ("metadata.n", "inf")),
    ("/v1/facts", "PUT", {"category": "c", "key": SURROGATE, "value": "v"},
     ("key", "surrogate")),
    ("/v1/facts", "PUT", {"category": NUL, "key": "k", "value": "v"}, ("category", "NUL")),
    ("/v1/facts", "PUT", {"category": "c", "key": "k", "value": NUL}, ("value", "NUL")),
    ("/v1/sessions", "POST", {"model": NUL}, ("model", "NUL")),
    ("/v1/sessions", "POST", {"metadata": {"a": [SURROGATE]}}, ("metadata.a[0]", "surrogate")),
])
def test_native_writes_with_bad_text_are_a_400(api: Api, path: str, method: str,
                                               body: dict[str, Any],
                                               words: tuple[str, ...]) -> None:
    refused(api.raw(method, path, body), 400, *words)
    api.nothing_stored()


def test_a_string_where_an_integer_is_declared_is_refused(api: Api) -> None:
    refused(api.client.post("/v1/search", json={"query": "x", "k": "5"}), 422, "k",
            "valid integer")
    refused(api.client.post("/v1/memories", json={"text": "x", "importance": "0.5"}), 422,
            "importance")
    assert api.client.post("/v1/search", json={"query": "x", "k": 5.0}).status_code == 200
    api.nothing_stored()


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/sessions", "/v1/chat/completions"])
def test_deeply_nested_bodies_are_refused_before_any_work(api: Api, path: str) -> None:
    deep = "[" * DEEP + "]" * DEEP
    body = ('{"text": "x", "messages": [{"role": "user", "content": "x"}], '
            '"metadata": {"a": ' + deep + "}}")
    refused(api.raw("POST", path, body), 400, "deeper than 100 levels")
    assert api.upstream.requests == []
    api.nothing_stored()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ a\n\u00e9'),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\ a', max_size=4), inner, max_size=3),
    max_leaves=40)


@given(value=_JSON, limit=st.integers(0, 12), ascii_only=st.booleans())
@settings(max_examples=300, deadline=None)
def test_nesting_is_measured_the_same_parsed_or_scanned(value: Any, limit: int,
                                                        ascii_only: bool) -> None:
    """A body orjson parses has its levels counted over the parsed arrays and objects;
    one it refuses is scanned for brackets outside strings: the two agree."""
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert nests_deeper(body, limit) == brackets_deeper(body, limit)


@given(text=st.text(alphabet=st.sampled_from(
    ["a", "\u00e9", "\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\ud7ff", "\ue000",
     "\U0001f600", "\u2028"]), max_size=12), pad=st.integers(0, 3))
@settings(max_examples=500, deadline=None)
def test_characters_no_store_holds_are_found_in_any_string(text: str, pad: int) -> None:
    """A NUL or a surrogate is found (and replaced) wherever it is, in an ASCII string
    or not, short or long: the same as the pattern that names them finds."""
    text = "x" * (1000 * pad) + text + "y" * pad
    bad = re.search("[\x00\ud800-\udfff]", text)
    assert validate.clean_chars(text) == re.sub("[\x00\ud800-\udfff]", "\ufffd", text)
    if bad is None:
        assert validate.check_chars(text, "t") is text
    else:
        with pytest.raises(InvalidInput, match=f"at position {bad.start()}"):
            validate.check_chars(text, "t")


def test_a_body_orjson_refuses_is_still_measured() -> None:
    deep = b"[" * 1500 + b"]" * 1500  # past orjson's own limit
    assert nests_deeper(deep, 100) and not nests_deeper(b"[[1, 2]", 100)
    big = b"[" * 101 + b"123456789012345678901234567890" + b"]" * 101  # past 64 bits
    assert nests_deeper(big, 100) and not nests_deeper(big, 101)


def test_a_body_a_hundred_levels_deep_is_fine(api: Api) -> None:
    nested: Any = []
    for _ in range(97):  # inside the body's object, metadata's and the outer list
        nested = [nested]
    resp = api.raw("POST", "/v1/memories", {"text": "deep", "metadata": {"a": nested}})
    assert resp.status_code == 201, resp.text


# -- the proxy: forward what the client sent, store a clean copy --------------------
def chat(api: Api, *messages: dict[str, Any], **headers: str) -> httpx.Response:
    return api.raw("POST", "/v1/chat/completions", {"model": "m", "messages": list(messages)},
                   headers)


def test_chat_with_content_of_the_wrong_type_is_a_400(api: Api) -> None:
    refused(chat(api, {"role": "user", "content": 5}), 400,
            "messages[0].content must be a string")
    refused(chat(api, {"role": "user", "content": "x", "finish_reason": 5}), 400,
            "finish_reason")
    assert api.upstream.requests == []
    api.nothing_stored()


def test_chat_with_a_non_string_model_is_a_400(api: Api) -> None:
    refused(api.raw("POST", "/v1/chat/completions",
                    {"model": 5, "messages": [{"role": "user", "content": "x"}]}), 400,
            "'model' must be a string")
    assert api.upstream.requests == []
    api.nothing_stored()


TOOL_CALL = [{"role": "user", "content": "read it"},
             {"role": "assistant", "content": None, "tool_calls": [{
                 "id": "c1", "type": "function",
                 "function": {"name": "read", "arguments": "{}"}}]}]


@pytest.mark.parametrize(("text", "clean"), [(NUL, "a\ufffdb"), (SURROGATE, "\ufffd")])
def test_a_tool_result_with_a_bad_character_is_forwarded_and_stored_clean(
        api: Api, text: str, clean: str) -> None:
    # the answer follows a user message, so the fake upstream never echoes the tool result
    messages = [*TOOL_CALL, {"role": "tool", "tool_call_id": "c1", "content": text},
                {"role": "user", "content": "and now?"}]
    resp = chat(api, *messages)
    assert resp.status_code == 200, resp.text
    sent = api.upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == [text]
    stored = api.messages(resp.headers["x-memd-session"])
    assert [m["content"] for m in stored if m["role"] == "tool"] == [clean]
    # the same history sent again continues the session: the clean copy is what is hashed
    again = chat(api, *messages, {"role": "assistant", "content": "ok: and now?"},
                 {"role": "user", "content": "more"})
    assert again.headers["x-memd-session"] == resp.headers["x-memd-session"]


def test_a_model_name_with_a_nul_is_forwarded_and_stored_clean(api: Api) -> None:
    resp = api.raw("POST", "/v1/chat/completions",
                   {"model": NUL, "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 200, resp.text
    assert api.upstream.requests[-1]["model"] == NUL
    assert [c["model"] for c in api.calls()] == ["a\ufffdb"]


def test_a_reply_with_a_nul_is_relayed_and_stored_clean(api: Api) -> None:
    resp = chat(api, {"role": "user", "content": NUL})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "ok: a\x00b"
    stored = api.messages(resp.headers["x-memd-session"])
    assert [m["content"] for m in stored] == ["a\ufffdb", "ok: a\ufffdb"]


# -- another user's session id --------------------------------------------------------
def test_another_users_pinned_session_id_is_their_own_session(api: Api) -> None:
    """Session ids are per user on both backends: the same pinned id is two sessions."""
    body = {"role": "user", "content": "hello"}
    assert chat(api, body, **{"x-memd-session": "shared-1", "x-memd-user": "alice"}
                ).status_code == 200
    resp = chat(api, {"role": "user", "content": "hi"},
                **{"x-memd-session": "shared-1", "x-memd-user": "bob"})
    assert resp.status_code == 200, resp.text
    assert [m["content"] for m in api.messages("shared-1", "alice")] == ["hello", "ok: hello"]
    assert [m["content"] for m in api.messages("shared-1", "bob")] == ["hi", "ok: hi"]


def test_driver_words_stay_in_the_log() -> None:
    class DriverError(Exception):
        __module__ = "psycopg.errors"

    cause = DriverError("UNIQUE constraint failed: sessions.session_id")
    try:
        raise Conflict(f"conflicting write: {cause}") from cause
    except Conflict as exc:
        message = public_message(exc)
    assert "UNIQUE" not in message and "sessions" not in message
    assert message == "this write conflicts with stored data: an id in it is already in use"
    assert public_message(Conflict("user 'a' already exists")) == "user 'a' already exists"
    try:
        raise InvalidInput("request body is not valid JSON: bad") from ValueError("bad")
    except InvalidInput as exc:
        assert public_message(exc) == "request body is not valid JSON: bad"


# -- the protocol ---------------------------------------------------------------------
def test_an_undeclared_method_is_a_405_with_allow(api: Api) -> None:
    resp = api.client.request("TRACE", "/v1/memories/abc")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "DELETE, GET, PATCH"
    resp = api.client.put("/w/ws/v1/sessions")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET, POST"  # the listing and a new session
    assert json.loads(resp.text)["error"]["type"] == "invalid_request_error"


# -- every route that takes a body: what the JSON parser refuses is a 400 ---------------
BIG_INT = "1" * 5000  # past Python's int-str conversion limit of 4300 digits
CHAT = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "text": "x", '


def write_routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) of the app's schema that may carry a body, its path
    parameters filled in: a route added later is covered without editing this test."""
    found = []
    for path, methods in app.openapi()["paths"].items():
        concrete = path.replace("{workspace}", "ws")
        while "{" in concrete:
            start = concrete.index("{")
            concrete = concrete[:start] + "x1" + concrete[concrete.index("}", start) + 1:]
        found += [(method.upper(), concrete) for method in methods
                  if method in ("post", "put", "patch", "delete")]
    return found


UNREADABLE = [
    (CHAT + '"max_tokens": ' + BIG_INT + "}", ("integer of more than 4300 digits",)),
    ('{"a": [' + BIG_INT + "]}", ("4300 digits",)),
    (CHAT + '"temperature": NaN}', ("temperature", "nan", "finite")),
    ('{"a": {"b": [Infinity]}}', ("a.b[0]", "inf")),
    ('{"a": -Infinity}', ("field a", "-inf")),
    ('{"a": 1e400}', ("field a", "inf")),
    ("NaN", ("(the body)", "nan")),
    ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", ("deeper than 100 levels",)),
    ('{"a": ' + "[" * 200_000 + "}", ("deeper than 100 levels",)),
    ('{"a": "x"', ("not valid JSON",)),
    ('{"a": "\\ud800", "b": }', ("not valid JSON",)),
    (b'{"a": "\xed\xa0\x80"}', ("not valid UTF-8", "0xed")),  # a surrogate encoded raw
    (b'{"a": "\xff"}', ("not valid UTF-8", "byte 7")),
]


@pytest.mark.parametrize(("body", "words"), UNREADABLE,
                         ids=[f"body{i}" for i in range(len(UNREADABLE))])
def test_every_route_refuses_an_unreadable_body_with_a_400(
        api: Api, body: str | bytes, words: tuple[str, ...]) -> None:
    routes = write_routes(api.client.app)
    assert len(routes) > 20 and ("POST", "/w/ws/v1/chat/completions") in routes
    for method, path in routes:
        content = body.encode() if isinstance(body, str) else body
        resp = api.client.request(method, path, content=content,
                                  headers={"content-type": "application/json"})
        assert resp.status_code == 400, (method, path, resp.text)
        refused(resp, 400, *words)
    assert api.upstream.requests == []
    api.nothing_stored()


READABLE = [  # JSON Python reads: each route answers by its own rules, never a 5xx
    CHAT + '"query": "\\ud800", "value": "\\udfff", "key": "k", "category": "c"}',
    CHAT + '"k": ' + "9" * 40 + ', "max_tokens": ' + "9" * 4300 + "}",
    CHAT + '"k": 1, "k": -5, "text": "", "text": "\\u0000"}',
    # the last user message is plain: the fake upstream echoes it, and JSON it cannot write
    '{"messages": [{"role": "user", "content": "\\ud83d"}, {"role": "user", "content": '
    '"x"}], "metadata": {"\\udc00": 1}, "model": "m"}',
    "[]", '"x"', "null", "12345678901234567890123",
]


@pytest.mark.parametrize("body", READABLE, ids=[f"body{i}" for i in range(len(READABLE))])
def test_every_route_answers_readable_odd_json_without_a_5xx(api: Api, body: str) -> None:
    for method, path in write_routes(api.client.app):
        resp = api.client.request(method, path, content=body.encode(),
                                  headers={"content-type": "application/json"})
        assert resp.status_code < 500, (method, path, resp.text)
        if resp.status_code >= 400:
            error = resp.json()["error"]
            # Ollama's routes answer as Ollama does: the error is the message itself
            assert error if "/api/" in path else error["message"], (method, path)
