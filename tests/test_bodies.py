"""Each door's body parsed and checked once into a typed object: the fields memd reads,
typed, the body itself kept as sent, and a clear error for a field that is wrong."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from memd.errors import InvalidInput
from memd.server import schemas
from memd.server.bodies import (
    completions_body,
    messages_body,
    ollama_body,
    plain_body,
    responses_body,
)
from memd.server.ollama_schema import CHAT_REQUEST as OLLAMA_CHAT_REQUEST


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


BAD_CHATS: list[tuple[dict[str, Any], str]] = [
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
]


@pytest.mark.parametrize("raw,message", BAD_CHATS)
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


BAD_MESSAGES: list[tuple[dict[str, Any], str]] = [
    ({"messages": []}, "'messages' is required"),
    ({"messages": [{"role": "tool", "content": "x"}]}, r"messages\[0\] must be an object"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]},
     r"messages\[0\].content must be text or a list of blocks"),
    ({"messages": [{"role": "user", "content": "x"}], "system": 3}, "'system' must be"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "9"},
     "max_tokens must be a non-negative integer"),
]


@pytest.mark.parametrize("raw,message", BAD_MESSAGES)
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


BAD_RESPONSES: list[tuple[dict[str, Any], str]] = [
    ({"input": ""}, "'input' is required"),
    ({"input": ["x"]}, "'input' items must be objects"),
    ({"input": [{"role": "user", "content": ["x"]}]}, r"input\[0\].content parts"),
    ({"input": [{"role": "system", "content": "x"}]}, "needs an item that is not"),
    ({"input": [{"role": "user", "content": None}]}, r"input\[0\] is a user message"),
    # refused also when memd would forward it untouched (an answer it never saw)
    ({"input": [{"role": "user", "content": "x"}, {"type": "function_call_output"}],
      "previous_response_id": "resp_1"}, r"input\[1\] is a function_call_output: its 'call_id'"),
    ({"input": "x", "previous_response_id": 4}, "'previous_response_id' must be a string"),
    ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens must be"),
]


@pytest.mark.parametrize("raw,message", BAD_RESPONSES)
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


DOORS: list[tuple[Any, dict[str, Any], dict[str, Any], list[tuple[dict[str, Any], str]]]] = [
    (completions_body, schemas.CHAT_REQUEST,
     {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
     BAD_CHATS),
    (messages_body, schemas.MESSAGES_REQUEST,
     {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
     BAD_MESSAGES),
    (responses_body, schemas.RESPONSES_REQUEST, {"model": "m", "input": "hi"}, BAD_RESPONSES),
    (ollama_body, OLLAMA_CHAT_REQUEST,
     {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
     [({"messages": []}, ""), ({"model": "m", "options": {"num_ctx": 0}}, "")]),
]


@pytest.mark.parametrize("parse,schema,good,bad", DOORS,
                         ids=["chat", "messages", "responses", "ollama"])
def test_a_doors_schema_and_its_parser_agree(parse: Any, schema: dict[str, Any],
                                             good: dict[str, Any],
                                             bad: list[tuple[dict[str, Any], str]]) -> None:
    """What the OpenAPI schema tells a client is what the door refuses: a body the parser
    refuses breaks the schema too, and the schema's valid example parses."""
    validator = Draft202012Validator(schema)
    assert validator.is_valid(good)
    parse(good)
    for raw, _ in bad:
        with pytest.raises(InvalidInput):
            parse(raw)
        assert not validator.is_valid(raw), raw
