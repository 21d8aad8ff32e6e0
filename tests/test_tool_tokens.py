"""Token counts of a request's tool definitions, kept while the tools stay the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memd.models.tokens import count_joined, count_text, tool_tokens


def _tools(description: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": "read_file", "description": description,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def test_a_count_is_the_count_of_the_tools_json_and_follows_a_change() -> None:
    short, long = _tools("Read a file."), _tools("Read a file. " * 50)
    for model in (None, "gpt-4o"):
        direct = count_text(json.dumps(short, sort_keys=True), model)
        assert tool_tokens(short, model) == direct
        assert tool_tokens(short, model) == direct  # kept: the same answer again
        # another description is another prompt: never the count kept for the first
        assert tool_tokens(long, model) == count_text(json.dumps(long, sort_keys=True),
                                                      model) > direct
        # the same tools with keys in another order are the same tools
        reordered = [{"function": dict(reversed(list(short[0]["function"].items()))),
                      "type": "function"}]
        assert tool_tokens(reordered, model) == direct
    assert tool_tokens(None, None) == tool_tokens([], None) == 0


def test_tools_orjson_cannot_write_are_still_counted() -> None:
    tools = _tools("Read a file.")
    tools[0]["function"]["parameters"]["maximum"] = 2 ** 70
    assert tool_tokens(tools, None) == count_text(json.dumps(tools, sort_keys=True), None)


class _Tally:
    """A counter that tallies the texts it was asked to count."""

    name = "tally"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        return self.scale(self.units(text))

    def units(self, text: str) -> int:
        self.calls += 1
        return len(text)

    def scale(self, units: int) -> int:
        return units


def test_a_long_text_is_counted_once_until_the_kept_counts_are_forgotten(
        monkeypatch: Any) -> None:
    import memd.models.tokens as tokens
    tally = _Tally()
    monkeypatch.setattr(tokens, "counter_for", lambda model=None: tally)
    text = "a long tool result " * 20
    assert tokens.count_text(text) == tokens.count_text(text) == len(text)
    assert tally.calls == 1  # the second count was the kept one
    tokens.forget_counts()
    assert tokens.count_text(text) == len(text)
    assert tally.calls == 2  # counted anew, as a text memd never saw


@pytest.mark.parametrize("model", [None, "gpt-4", "llama-3"])
def test_a_joined_text_counts_as_counted_whole(model: str | None) -> None:
    result = "".join(f"line {i}: value = {i * 7} # note\n" for i in range(400))
    cases = [
        ["[read_file for 'a.py'] Result:", result],
        ["", result, "tail:"],
        ["one", "  indented second", "third"],  # counted joined
        ["a" * 40_000, "b" * 30_000],  # past EXACT_CHARS: counted joined
        ["ends with spaces   ", "X", "ends with newline\n", "Y!"],
        [result],
    ]
    for texts in cases:
        count_text(texts[-1], model)  # as the prompt's count of the parts leaves it
        assert count_joined(texts, model) == count_text("\n".join(texts), model)


def test_a_joined_text_reads_its_counted_parts_again(monkeypatch: Any) -> None:
    import memd.models.tokens as tokens
    tally = _Tally()
    monkeypatch.setattr(tokens, "counter_for", lambda model=None: tally)
    result = "a long tool result " * 20
    tokens.count_text(result)
    before = tally.calls
    assert tokens.count_joined(["Result:", result]) == len("Result:\n" + result)
    assert tally.calls == before + 1  # "Result:\n" alone: the result's units were kept
