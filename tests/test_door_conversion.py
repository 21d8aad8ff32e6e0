"""The doors' conversion into memd's conversation model is lossless, and what goes
upstream differs from what the client sent only by the memory block.

Hypothesis generates valid Anthropic Messages and OpenAI Responses requests (every block
and item kind the doors keep: text, images, documents, tool calls and results, signed
and redacted thinking, reasoning with encrypted content, unknown item kinds, system
prompts with cache_control breakpoints). For each:

- the way back gives the request's own fields: ``unview(view(body))``;
- the block the engine places (:func:`memd.engine.block.inject.place`, as a call does) goes
  into the newest message the user typed, and nothing else changes: no other message,
  no cache_control block, nothing before the tool results of that message;
- the chain hashes of the view, which identify the session, do not change when a
  client re-serializes its tool-call JSON (whitespace, key order).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.engine.block.inject import newest_user, place
from memd.engine.conversation.chains import chain_hashes
from memd.engine.formats import anthropic as a
from memd.engine.formats import responses as r

PROPS = settings(max_examples=150, deadline=None)
BLOCK = '<memory source="memd">\n- the user prefers tabs\n</memory>\n'

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                min_size=1, max_size=30)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=10)
scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | words
json_objects = st.dictionaries(ids, st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ids, inner, max_size=3),
    max_leaves=6), max_size=4)
cache_control = st.sampled_from([{}, {"cache_control": {"type": "ephemeral"}}])


# -- Anthropic Messages ----------------------------------------------------------------

@st.composite
def a_text(draw: st.DrawFn) -> dict[str, Any]:
    return {"type": "text", "text": draw(words), **draw(cache_control)}


a_image = st.builds(lambda d: {"type": "image", "source": {
    "type": "base64", "media_type": "image/png", "data": d}}, ids)
a_document = st.builds(lambda d, t: {"type": "document", "title": t, "source": {
    "type": "text", "media_type": "text/plain", "data": d}}, words, words)
a_tool_use = st.builds(lambda i, n, x: {"type": "tool_use", "id": "toolu_" + i, "name": n,
                                        "input": x}, ids, ids, json_objects)
a_thinking = st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
                       words, ids)
a_redacted = st.builds(lambda d: {"type": "redacted_thinking", "data": d}, ids)


@st.composite
def a_tool_result(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "toolu_" + draw(ids)}
    content = draw(st.none() | words | st.lists(a_text() | a_image, min_size=1, max_size=2))
    if content is not None:
        block["content"] = content
    if draw(st.booleans()):
        block["is_error"] = draw(st.booleans())
    return {**block, **draw(cache_control)}


@st.composite
def a_user(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"role": "user", "content": draw(words)}
    results = draw(st.lists(a_tool_result(), max_size=3))
    rest = draw(st.lists(a_text() | a_image | a_document, min_size=0 if results else 1,
                         max_size=3))
    return {"role": "user", "content": [*results, *rest]}


@st.composite
def a_assistant(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"role": "assistant", "content": draw(words)}
    thinking = draw(st.lists(a_thinking | a_redacted, max_size=2))
    said = draw(st.lists(a_text() | a_tool_use, min_size=1, max_size=3))
    return {"role": "assistant", "content": [*thinking, *said]}


@st.composite
def messages_requests(draw: st.DrawFn) -> dict[str, Any]:
    turns = draw(st.lists(st.tuples(a_user(), a_assistant()), max_size=3))
    messages: list[Any] = [m for pair in turns for m in pair]
    if draw(st.booleans()) and messages:  # Claude Code's system messages between turns
        messages.insert(draw(st.integers(0, len(messages))),
                        {"role": "system", "content": draw(words)})
    messages.append(draw(a_user()))
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1024,
                            "messages": messages, "tools": [{
                                "name": "read", "input_schema": {"type": "object"}}]}
    system = draw(st.none() | words | st.lists(a_text(), min_size=1, max_size=3))
    if system is not None:
        body["system"] = system
    return body


def _breakpoints(value: Any) -> list[str]:
    """Every block holding a cache_control breakpoint, in order, as JSON."""
    found: list[str] = []
    if isinstance(value, Mapping):
        if "cache_control" in value:
            found.append(json.dumps(value, sort_keys=True))
        for item in value.values():
            found.extend(_breakpoints(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_breakpoints(item))
    return found


@PROPS
@given(messages_requests())
def test_anthropic_view_round_trips(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    back = a.unview(a.view(body))
    assert back == {k: sent[k] for k in ("system", "messages") if k in sent}
    assert body == sent  # the view shares, never changes, the client's objects


@PROPS
@given(messages_requests())
def test_anthropic_forward_adds_only_the_block(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    seen = a.view(body)
    placed = place(seen.messages, BLOCK, "user")
    out = a.forward(body, seen, placed)
    assert body == sent
    target = newest_user(seen.messages)
    if target is None:  # only tool results: no message of the user's to put it in
        assert out is None
        return
    assert out is not None
    at = seen.origin[target]
    assert at == max(i for i, m in enumerate(sent["messages"]) if m["role"] == "user"
                     and (isinstance(m["content"], str) or any(
                         b["type"] != "tool_result" for b in m["content"])))
    assert [m for i, m in enumerate(out) if i != at] == \
        [m for i, m in enumerate(sent["messages"]) if i != at]
    before, after = sent["messages"][at]["content"], out[at]["content"]
    if isinstance(before, str):  # a string is one text block: the block goes beside it
        assert after == [{"type": "text", "text": BLOCK},
                         *([{"type": "text", "text": before}] if before else [])]
    else:
        first = sum(1 for b in before if b["type"] == "tool_result")
        assert after == [*before[:first], {"type": "text", "text": BLOCK}, *before[first:]]
    assert _breakpoints(out) == _breakpoints(sent["messages"])
    assert {**sent, "messages": out}["system" if "system" in sent else "tools"] == \
        sent["system" if "system" in sent else "tools"]


@PROPS
@given(messages_requests(), st.randoms(use_true_random=False))
def test_anthropic_chain_hashes_ignore_tool_input_key_order(
        body: dict[str, Any], rnd: Any) -> None:
    def shuffled(value: Any) -> Any:
        if isinstance(value, dict):
            keys = list(value)
            rnd.shuffle(keys)
            return {k: shuffled(value[k]) for k in keys}
        if isinstance(value, list):
            return [shuffled(v) for v in value]
        return value

    resent = copy.deepcopy(body)
    for m in resent["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else ():
            if b["type"] == "tool_use":
                b["input"] = shuffled(b["input"])
    assert chain_hashes(a.view(resent).messages, None) == \
        chain_hashes(a.view(body).messages, None)


# -- OpenAI Responses ------------------------------------------------------------------

input_text = st.builds(lambda t: {"type": "input_text", "text": t}, words)
input_image = st.builds(lambda u: {"type": "input_image", "detail": "auto",
                                   "image_url": "data:image/png;base64," + u}, ids)
r_user = st.builds(lambda kind, c: {**kind, "role": "user", "content": c},
                   st.sampled_from([{}, {"type": "message"}]),
                   words | st.lists(input_text | input_image, min_size=1, max_size=3))
r_developer = st.builds(lambda role, c: {"type": "message", "role": role, "content": c},
                        st.sampled_from(["developer", "system"]),
                        words | st.lists(input_text, min_size=1, max_size=2))
output_text = st.builds(lambda t: {"type": "output_text", "text": t, "annotations": []},
                        words)
r_assistant = st.builds(
    lambda i, c: {"type": "message", "role": "assistant", "id": "msg_" + i,
                  "status": "completed", "content": c},
    ids, st.lists(output_text | st.builds(lambda t: {"type": "refusal", "refusal": t}, words),
                  min_size=1, max_size=3)) | st.builds(
    lambda c: {"role": "assistant", "content": c}, words)
r_call = st.builds(lambda i, n, x: {"type": "function_call", "id": "fc_" + i,
                                    "call_id": "call_" + i, "name": n,
                                    "arguments": json.dumps(x)}, ids, ids, json_objects)
r_output = st.builds(lambda i, o: {"type": "function_call_output", "call_id": "call_" + i,
                                   "output": o},
                     ids, words | st.lists(input_text, min_size=1, max_size=2))
r_reasoning = st.builds(lambda i, s, e: {"type": "reasoning", "id": "rs_" + i,
                                         "summary": [{"type": "summary_text", "text": s}],
                                         "encrypted_content": e}, ids, words, ids)
r_unknown = st.builds(lambda k, x: {"type": k, **x},
                      st.sampled_from(["web_search_call", "local_shell_call",
                                       "item_reference", "x_future_item"]), json_objects)


@st.composite
def responses_requests(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-5-codex", "store": False,
                            "include": ["reasoning.encrypted_content"]}
    instructions = draw(st.none() | words)
    if instructions is not None:
        body["instructions"] = instructions
    if draw(st.integers(0, 4)) == 0:
        body["input"] = draw(words)
        return body
    turns = draw(st.lists(st.tuples(
        r_user, st.lists(r_reasoning | r_assistant | r_call | r_unknown, min_size=1,
                         max_size=4), st.lists(r_output, max_size=2)), max_size=3))
    items: list[Any] = draw(st.lists(r_developer, max_size=2))
    for user, said, outputs in turns:
        items.extend([user, *said, *outputs])
    items.append(draw(r_user))
    items.extend(draw(st.lists(r_reasoning | r_call, max_size=2)))
    items.extend(draw(st.lists(r_output, max_size=2)))
    body["input"] = items
    return body


@PROPS
@given(responses_requests())
def test_responses_view_round_trips(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    back = r.unview(r.view(body))
    assert back == {k: sent[k] for k in ("instructions", "input") if k in sent}
    assert body == sent


@PROPS
@given(responses_requests())
def test_responses_forward_adds_only_the_block(body: dict[str, Any]) -> None:
    sent = copy.deepcopy(body)
    seen = r.view(body)
    placed = place(seen.messages, BLOCK, "user")
    out = r.forward(body, seen, placed)
    assert body == sent and out is not None
    if isinstance(sent["input"], str):
        assert out == BLOCK + sent["input"]
        return
    at = max(i for i, item in enumerate(sent["input"]) if item.get("role") == "user")
    assert seen.origin[newest_user(seen.messages) or 0] == at
    assert [m for i, m in enumerate(out) if i != at] == \
        [m for i, m in enumerate(sent["input"]) if i != at]
    before, after = sent["input"][at]["content"], out[at]["content"]
    if isinstance(before, str):
        assert after == BLOCK + before
    else:
        assert after == [{"type": "input_text", "text": BLOCK}, *before]


@PROPS
@given(responses_requests(), st.sampled_from([2, 4, None]))
def test_responses_chain_hashes_ignore_argument_whitespace(
        body: dict[str, Any], indent: int | None) -> None:
    resent = copy.deepcopy(body)
    for item in resent["input"] if isinstance(resent["input"], list) else ():
        if item.get("type") == "function_call":
            item["arguments"] = json.dumps(json.loads(item["arguments"]), indent=indent,
                                           separators=(" , ", " : "))
    assert chain_hashes(r.view(resent).messages, None) == \
        chain_hashes(r.view(body).messages, None)


def test_a_stored_reply_converts_back_to_the_items_it_was_made_of() -> None:
    """The reply memd stores of a Responses answer is the view of the items the client
    sends back on its next call, so it is matched whole."""
    items = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "Reading it.", "annotations": []}]},
             {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell",
              "arguments": '{"cmd": "ls"}'}]
    stored = r.reply(items)
    assert stored["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "shell", "arguments": '{"cmd": "ls"}'}}]
    assert [p for p in stored["content"] if p.get("type") == "text"][0]["text"] == \
        "Reading it."
    assert r.unview(r.View([stored], [0])) == {"input": items}
