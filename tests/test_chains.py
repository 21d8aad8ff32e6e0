"""The canonical form chain hashes are taken over (memd.engine.conversation.chains): what a client
rewrites when it resends a message it received does not change the message's hash, and
what it means does."""

from __future__ import annotations

import json
from typing import Any

from memd.engine.conversation import chains


def test_canonical_form_leaves_out_what_a_resend_rewrites() -> None:
    def canon(**message: Any) -> str:
        return chains.canonical({"role": "assistant", **message})

    spaced = canon(tool_calls=[{"id": "c", "function": {
        "name": "edit", "arguments": '{"b": [1, 2], "a": {"y": "é", "x": null}}'}}])
    assert spaced == canon(tool_calls=[{"id": "c", "function": {
        "name": "edit", "arguments": '{"a":{"x":null,"y":"\\u00e9"},"b":[1,2]}'}}])
    assert spaced != canon(tool_calls=[{"id": "c", "function": {
        "name": "edit", "arguments": '{"a":{"x":null,"y":"e"},"b":[1,2]}'}}])
    assert canon(tool_calls=[{"id": "c", "function": {"name": "ls", "arguments": "not {"}}]) \
        != canon(tool_calls=[{"id": "c", "function": {"name": "ls", "arguments": "not  {"}}])
    assert canon(content="line one  \r\nline two\n") == canon(content="line one\nline two")
    assert canon(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) \
        == canon(content="a\nb")
    assert canon(content="a b") != canon(content="a  b")
    # what has nothing to rewrite hashes as it did before these rules
    plain = {"role": "user", "content": "hello", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": '{"a":1}'}}]}
    assert chains.canonical(plain) == json.dumps(
        ["user", "hello", None, [["c", "f", '{"a":1}']], None])
