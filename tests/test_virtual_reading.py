"""A new context object's text is read once (memd.engine.virtual.fidelity.Reading): its
excerpts and key entities are those of a line-by-line scan with the identifier
patterns, and the patterns run once per distinct token of the text, not again for each
excerpt's lines."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.engine.virtual import fidelity as f
from memd.models.tokens import count_text
from tests.agent_traffic import generate


def _entities_by_scan(text: str, key: str | None) -> tuple[str, ...]:
    """Key entities as a whole-text scan finds them, token by token."""
    counts: dict[str, int] = {}
    for token, seen in Counter(re.findall(r"[\w./:-]+", text)).items():
        for found in f._IDENTIFIER.findall(token):
            word = found.strip(".-")
            if len(word) < 3 or word == key or word.lower().rstrip("s") in f._GENERIC \
                    or word.upper().startswith("FAIL") and word.isupper():
                continue
            counts[word] = counts.get(word, 0) + seen
    return tuple(sorted(counts, key=lambda w: -counts[w])[:f.ENTITIES])


def _kept_by_scan(text: str, tokens: int, fidelity: int) -> list[int]:
    """The lines an excerpt keeps when each line is searched with the patterns."""
    lines = text.splitlines()
    share, low, high = ((f.DETAILED_SHARE, f.DETAILED_MIN_TOKENS, f.DETAILED_MAX_TOKENS)
                        if fidelity == f.DETAILED
                        else (f.COMPACT_SHARE, f.COMPACT_MIN_TOKENS, f.COMPACT_MAX_TOKENS))
    budget = max(low, min(high, int(tokens * share)))
    head = list(range(min(f.HEAD_LINES, len(lines))))
    tail = list(range(max(len(head), len(lines) - f.TAIL_LINES), len(lines)))
    named = (i for i in range(len(head), len(lines) - len(tail))
             if f._IDENTIFIER.search(lines[i]))
    keep: list[int] = []
    used = 0
    for i in itertools.chain(head, tail, named):
        cost = count_text(lines[i][:f.LINE_CHARS]) + 1
        if used + cost > budget and keep:
            if i in head or i in tail:
                continue
            break
        keep.append(i)
        used += cost
    return sorted(keep)


def _kept(excerpt: str, text: str) -> list[int]:
    """The lines of ``text`` an excerpt holds, read back from its gap markers."""
    out, at = [], 0
    for line in excerpt.split("\n")[1:]:
        gap = re.fullmatch(r"\[\.\.\. (\d+) lines \.\.\.\]", line)
        if gap:
            at += int(gap.group(1))
        else:
            out.append(at)
            at += 1
    assert at == len(text.splitlines())
    return out


def _check(text: str, key: str | None) -> None:
    tokens = count_text(text)
    reading = f.Reading(text)
    assert f.key_entities(reading, key) == f.key_entities(text, key) \
        == _entities_by_scan(text, key)
    for fidelity in (f.COMPACT, f.DETAILED):
        excerpt = f.extractive("o1", "read", key, reading, tokens, count_text, fidelity)
        assert excerpt == f.extractive("o1", "read", key, text, tokens, count_text, fidelity)
        assert _kept(excerpt, text) == _kept_by_scan(text, tokens, fidelity)
    for i in range(len(reading.lines)):
        assert reading.names_identifier(i) == bool(f._IDENTIFIER.search(reading.lines[i]))


def _tool_results() -> list[str]:
    session = generate("opencode-like", seed=7, target_tokens=30_000)
    last = session.steps[-1].request["messages"]
    return [m["content"] for m in last if m.get("role") == "tool"
            and isinstance(m.get("content"), str)]


def test_excerpts_and_entities_of_agent_tool_results_equal_a_line_scan() -> None:
    results = _tool_results()
    assert len(results) >= 5
    for text in results:
        _check(text, None)


_PIECES = st.sampled_from([
    "src/app/main.py", "ERROR_CODE_9", "snake_case_name", "camelCase", "E404", ":8080",
    "Traceback", "FAILED", "x", "  ", "\n", "\r\n", ".", "-", "/", "a.b", "(", ")",
    "error", "Exception:", "foo-bar/baz.", "__init__", "ré_sumé", "port:65535", "\t",
    "the quick brown fox", "12345", "a_b", "X_Y", "file.rs", "e.g.", "x\u2028y",
])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, max_size=120), st.sampled_from([None, "src/app/main.py", "E404"]))
def test_excerpts_and_entities_of_any_text_equal_a_line_scan(
    pieces: list[str], key: str | None,
) -> None:
    _check("".join(pieces), key)


def test_the_patterns_run_once_per_distinct_token_for_a_new_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making an object's excerpts (compact and detailed) and its entities runs the
    identifier patterns on each distinct token once, and on no line."""
    from memd.engine.virtual import engage
    from memd.engine.virtual.segment import Segment

    text = max(_tool_results(), key=len)
    ran: list[str] = []

    class Counting:
        def findall(self, s: str) -> list[Any]:
            ran.append(s)
            return pattern.findall(s)

        def search(self, s: str) -> Any:
            ran.append(s)
            return pattern.search(s)

    pattern = f._IDENTIFIER
    monkeypatch.setattr(f, "_IDENTIFIER", Counting())
    segment = Segment(index=5, object_id="o1", content_hash="h", object_type="file",
                      source_tool="read", source_key="src/app.py", tool_call_id="c1",
                      turn=3, text=text)
    made = engage._new_object("u", "s", segment, None, 0.0)
    assert made.compact and made.detailed and made.entities
    assert sorted(ran) == sorted(set(re.findall(r"[\w./:-]+", text)))
