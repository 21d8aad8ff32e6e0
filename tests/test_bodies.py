"""Each door's body parsed and checked once into a typed object: the fields memd reads,
typed, the body itself kept as sent, and a clear error for a field that is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from memd.errors import InvalidInput
from memd.server.bodies import (
    completions_body,
    messages_body,
    ollama_body,
    plain_body,
    responses_body,
)


def test_a_chat_completions_body_is_read_once_and_kept_as_sent() -> None:
    raw: dict[str, Any] = {
        "model": "gpt\x00x", "stream": True, "max_tokens": 7.0,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "seed": 3}
    sent = completions_body(raw)
    assert sent.raw is raw and raw["model"] == "gpt\x00x"  # forwarded untouched
    assert sent.model == "gpt\ufffdx"  # as memd records it
    assert sent.stream is True and sent.max_tokens == 7
    assert sent.messages is raw["messages"] and sent.tools is raw["tools"]
    assert sent.shape is raw
    assert completions_body({**raw, "max_completion_tokens": 5}).max_tokens == 5


def test_a_body_that_says_nothing_of_streaming_leaves_it_to_the_door() -> None:
    assert plain_body({"prompt": "x"}).stream is None
    assert plain_body({"prompt": "x", "stream": False}).stream is False


@pytest.mark.parametrize("raw,message", [
    ({}, "'messages' is required"),
    ({"messages": []}, "'messages' is required"),
    ({"messages": "hi"}, "'messages' is required"),
    ({"messages": ["hi"]}, "each message must be an object"),
    ({"messages": [{"role": "user"}], "stream": "yes"}, "'stream' must be a boolean"),
    ({"messages": [{"role": "user"}], "model": 3}, "'model' must be a string, not int"),
    ({"messages": [{"role": "user"}], "max_tokens": -1},
     "max_tokens must be a non-negative integer"),
    ({"messages": [{"role": "user"}], "max_completion_tokens": True},
     "max_completion_tokens must be a non-negative integer"),
])
def test_a_bad_chat_completions_body_is_refused_by_name(raw: dict[str, Any],
                                                         message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        completions_body(raw)


def test_a_messages_body_is_seen_in_the_conversation_model() -> None:
    raw: dict[str, Any] = {
        "model": "claude", "max_tokens": 100, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [{"name": "t", "input_schema": {}}]}
    sent = messages_body(raw)
    assert sent.raw is raw and sent.max_tokens == 100 and sent.stream is None
    assert [m["role"] for m in sent.messages] == ["system", "user"]
    assert sent.tools is raw["tools"]
    block = {"role": "user", "content": [{"type": "text", "text": "<memory/>"},
                                         {"type": "text", "text": "hi"}]}
    put = sent.put_back([sent.messages[0], block])
    assert put is not None and put[0]["content"][0]["text"] == "<memory/>"
    assert raw["messages"][0]["content"] == [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize("raw,message", [
    ({"messages": []}, "'messages' is required"),
    ({"messages": [{"role": "tool", "content": "x"}]}, r"messages\[0\] must be an object"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]},
     r"messages\[0\].content must be text or a list of blocks"),
    ({"messages": [{"role": "user", "content": "x"}], "system": 3}, "'system' must be"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"},
     "max_tokens must be a non-negative integer"),
])
def test_a_bad_messages_body_is_refused_by_name(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        messages_body(raw)


def test_a_responses_body_names_the_answer_it_continues() -> None:
    raw: dict[str, Any] = {"input": "hello", "instructions": "be brief",
                           "max_output_tokens": 50, "previous_response_id": "resp_1"}
    sent = responses_body(raw)
    assert sent.previous == "resp_1" and sent.max_tokens == 50
    assert [m["role"] for m in sent.messages] == ["system", "user"]
    assert responses_body({"input": "hello", "previous_response_id": ""}).previous is None


@pytest.mark.parametrize("raw,message", [
    ({"input": ""}, "'input' is required"),
    ({"input": ["x"]}, "'input' items must be objects"),
    ({"input": [{"role": "user", "content": ["x"]}]}, r"input\[0\].content parts"),
    ({"input": [{"role": "system", "content": "x"}]}, "needs an item that is not"),
    ({"input": "x", "previous_response_id": 4}, "'previous_response_id' must be a string"),
    ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens must be"),
])
def test_a_bad_responses_body_is_refused_by_name(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        responses_body(raw)


def test_an_ollama_body_carries_the_window_it_asks_for() -> None:
    raw: dict[str, Any] = {"model": "llama3", "options": {"num_ctx": 8192.0},
                           "messages": [{"role": "user", "content": "hi"}]}
    sent = ollama_body(raw)
    assert sent.num_ctx == 8192 and sent.stream is None and sent.max_tokens is None
    assert sent.messages[0]["content"] == "hi"
    assert ollama_body({"model": "llama3"}).messages == []
    with pytest.raises(InvalidInput, match="options.num_ctx must be a positive integer"):
        ollama_body({**raw, "options": {"num_ctx": 0}})
    with pytest.raises(InvalidInput, match="'model' is required"):
        ollama_body({"messages": []})
