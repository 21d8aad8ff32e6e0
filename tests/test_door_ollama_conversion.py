"""The Ollama door's conversion into memd's conversation model is lossless, what goes
upstream differs from what the client sent only by the memory block, and a tool call's
object arguments identify the session as an OpenAI client's JSON string does.

Hypothesis generates valid ``/api/chat`` requests (system prompts, user messages with
images, assistant messages with thinking and tool calls whose arguments are JSON
objects, tool results with and without ``tool_name``, unknown fields).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.engine.block.inject import newest_user, place
from memd.engine.conversation.chains import chain_hashes
from memd.engine.formats import ollama as o
from memd.engine.validate import sanitized

PROPS = settings(max_examples=150, deadline=None)
BLOCK = '<memory source="memd">\n- the user prefers tabs\n</memory>\n'

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                max_size=30)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=10)
scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | words
json_objects = st.dictionaries(ids, st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ids, inner, max_size=3),
    max_leaves=6), max_size=4)
extra = st.sampled_from([{}, {"x_client": {"pinned": True}}])


@st.composite
def user(draw: st.DrawFn) -> dict[str, Any]:
    m = {"role": "user", "content": draw(words)}
    if draw(st.booleans()):
        m["images"] = draw(st.lists(ids, min_size=1, max_size=2))
    return {**m, **draw(extra)}


@st.composite
def tool_call(draw: st.DrawFn) -> dict[str, Any]:
    call: dict[str, Any] = {"function": {"name": draw(ids), "arguments": draw(json_objects)}}
    if draw(st.booleans()):
        call["function"]["index"] = draw(st.integers(0, 3))
    return call


@st.composite
def turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A user message, or a reply (with thinking, with tool calls and their results)."""
    if draw(st.booleans()):
        return [draw(user())]
    reply: dict[str, Any] = {"role": "assistant", "content": draw(words)}
    if draw(st.booleans()):
        reply["thinking"] = draw(words)
    calls = draw(st.lists(tool_call(), max_size=2))
    if calls:
        reply["tool_calls"] = calls
    out = [reply]
    for c in calls:
        result: dict[str, Any] = {"role": "tool", "content": draw(words)}
        if draw(st.booleans()):
            result["tool_name"] = c["function"]["name"]
        out.append(result)
    return out


@st.composite
def chat_requests(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(words)})
    for part in draw(st.lists(turn(), max_size=4)):
        messages.extend(part)
    if draw(st.booleans()):
        messages.append(draw(user()))
    return {"model": "llama3.2", "messages": messages, "options": {"num_ctx": 8192}}


@PROPS
@given(chat_requests())
def test_view_round_trips(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    assert o.unview(o.view(body)) == sent["messages"]
    assert body == sent  # the view never changes the client's objects


@PROPS
@given(chat_requests())
def test_forward_adds_only_the_block(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    seen = o.view(body)
    placed = place(seen, BLOCK, "user")
    out = o.forward(body, seen, placed)
    assert body == sent
    target = newest_user(seen)
    if target is None:  # no user message: the block has no place in it
        assert out is None
        return
    assert out is not None
    assert [m for i, m in enumerate(out) if i != target] == \
        [m for i, m in enumerate(sent["messages"]) if i != target]
    assert out[target] == {**sent["messages"][target],
                           "content": BLOCK + sent["messages"][target]["content"]}


def _reserialized(value: Any) -> Any:
    """``value`` with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: _reserialized(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reserialized(v) for v in value]
    return value


@PROPS
@given(chat_requests())
def test_chain_hashes_ignore_argument_key_order(body: dict[str, Any]) -> None:
    resent = _reserialized(copy.deepcopy(body))
    assert chain_hashes(o.view(resent), None) == chain_hashes(o.view(body), None)


@PROPS
@given(chat_requests(), st.lists(tool_call(), min_size=1, max_size=2), words,
       st.integers(1, 40))
def test_a_stored_reply_is_the_message_the_client_resends(
        body: dict[str, Any], calls: list[dict[str, Any]], text: str, cut: int) -> None:
    """The reply rebuilt from the stream (cut anywhere) is the assistant message a
    client resends next, for chain hashing, and its calls' object arguments hash as the
    same call sent with JSON-string arguments through the OpenAI door."""
    lines = [{"model": "m", "message": {"role": "assistant", "content": text[:3]},
              "done": False},
             {"model": "m", "message": {"role": "assistant", "content": text[3:],
                                        "tool_calls": calls}, "done": False},
             {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True,
              "done_reason": "stop", "eval_count": 3}]
    raw = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    acc = o.StreamReply()
    for at in range(0, len(raw), cut):
        acc.feed(raw[at:at + cut])
    assert acc.done and acc.usage is not None and acc.usage["completion_tokens"] == 3
    resent = {"role": "assistant", "content": text, "tool_calls": _reserialized(calls)}
    history = [*body["messages"], {"role": "user", "content": "go"}]
    stored = chain_hashes(sanitized([*o.view({"messages": history}), acc.reply()]), None)
    # memd keeps a copy of what every store can hold (a NUL as U+FFFD), on every door
    assert stored == chain_hashes(sanitized(o.view({"messages": [*history, resent]})), None)
    as_openai = {"role": "assistant", "content": sanitized(text), "tool_calls": [
        {"id": c["id"], "type": "function", "function": {
            "name": c["function"]["name"],
            "arguments": json.dumps(json.loads(c["function"]["arguments"]), indent=1)}}
        for c in acc.reply()["tool_calls"]]}
    assert chain_hashes([as_openai], None) == chain_hashes([acc.reply()], None)


def test_forward_puts_back_a_degraded_result_and_leaves_out_an_evicted_exchange() -> None:
    """Virtualization on this door: a tool result's new content in place, an evicted
    exchange (the call and its result) out whole, everything else as the client sent it."""
    call = {"function": {"name": "read", "arguments": {"path": "a.py"}}}
    body = {"model": "m", "messages": [
        {"role": "user", "content": "Read a.py, then b.py."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "x = 1\n" * 500, "tool_name": "read"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "read", "arguments": {"path": "b.py"}}}]},
        {"role": "tool", "content": "y = 2\n" * 500, "tool_name": "read"},
        {"role": "user", "content": "Now fix it."}]}
    seen = o.view(body)
    placed: list[Any] = list(seen)
    placed[1] = placed[2] = None  # the first exchange evicted
    placed[4] = {**seen[4], "content": "[memd: stub of read b.py]"}
    out = o.forward(body, seen, placed)
    assert out is not None
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user"]
    assert out[2] == {**body["messages"][4], "content": "[memd: stub of read b.py]"}
    assert out[0] == body["messages"][0] and out[3] == body["messages"][5]
    placed[0] = None  # a user message is never left out: the request goes as sent
    assert o.forward(body, seen, placed) is None


def test_forward_leaves_out_the_calls_whose_results_were_evicted() -> None:
    """Of parallel calls, those whose results virtualization evicted go with them; the
    rest stay as the client sent them, their results after them in the same order."""
    run = {"function": {"name": "bash", "arguments": {"command": "pytest"}}}
    read = {"function": {"name": "read", "arguments": {"path": "a.py"}}}
    body = {"model": "m", "messages": [
        {"role": "user", "content": "Run the tests and read a.py."},
        {"role": "assistant", "content": "", "tool_calls": [run, read]},
        {"role": "tool", "content": "1 failed", "tool_name": "bash"},
        {"role": "tool", "content": "x = 1\n" * 500, "tool_name": "read"},
        {"role": "user", "content": "Now fix it."}]}
    seen = o.view(body)
    placed: list[Any] = list(seen)
    placed[1] = {**seen[1], "tool_calls": seen[1]["tool_calls"][:1]}
    placed[3] = None  # the read's result evicted
    out = o.forward(body, seen, placed)
    assert out is not None
    assert out[1] == {"role": "assistant", "content": "", "tool_calls": [run]}
    assert out[2:] == [body["messages"][2], body["messages"][4]]
    # an assistant message changed otherwise cannot be put back: the request goes as sent
    placed[1] = {**placed[1], "content": "rewritten"}
    assert o.forward(body, seen, placed) is None
