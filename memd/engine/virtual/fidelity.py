"""The texts of a context object at each fidelity memd makes without a model.

L0 is the text as the client sent it. L3, the stub, is one line that names the object,
the tool and what it was of, its size, and how to get it back. L2 is an extractive
excerpt: the first and last lines and the lines that name identifiers (paths, error
codes, names with digits or underscores, ports), verbatim and in order, with a header
that says it is an excerpt and what it left out. A helper model's summaries (L1, and an
L2 with declared losses) are meant to replace the extractive one where a helper runs; the
extractive one is deterministic, so the same object always gets the same bytes and the
prompt's prefix stays the one the model server cached.
"""

from __future__ import annotations

import re
from collections.abc import Callable

FULL, DETAILED, COMPACT, STUB, EVICTED = 0, 1, 2, 3, 4
NAMES = {FULL: "full", DETAILED: "detailed", COMPACT: "compact", STUB: "stub",
         EVICTED: "evicted"}
LOSSES = {
    FULL: "nothing",
    COMPACT: "every line but the first and last ones and those naming identifiers "
             "(extractive excerpt, no model)",
    STUB: "the whole text; only what it was of and its size remain",
    EVICTED: "the tool call and its result, both out of the request (kept in memd)",
}

HEAD_LINES = 6
TAIL_LINES = 4
LINE_CHARS = 200
COMPACT_SHARE = 0.08  # of the full text's tokens, for the excerpt's lines
COMPACT_MIN_TOKENS = 48
COMPACT_MAX_TOKENS = 400

# identifiers a later turn may need verbatim: paths, dotted or snake/camel names, error
# codes and words, ports and line numbers
_IDENTIFIER = re.compile(
    r"[\w.-]+/[\w./-]+|\b\w+\.(?:py|ts|js|go|rs|java|c|h|cpp|json|toml|ya?ml|md|sql|sh)\b"
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\b"
    r"|\b(?:error|Error|ERROR|exception|Exception|FAIL\w*|panic|Traceback)\b"
    r"|:\d{2,5}\b|\bE\d{3,4}\b")


def _key_words(tool: str | None, key: str | None) -> str:
    what = tool or "tool"
    return f"{what} {key}" if key else what


def stub(object_id: str, tool: str | None, key: str | None, lines: int, tokens: int) -> str:
    """L3: one line, made without a model."""
    return (f"[memd: output of {_key_words(tool, key)} held out of context as object "
            f"{object_id} ({lines} lines, {tokens} tokens). Run the tool again to see it "
            "whole.]")


def extractive(object_id: str, tool: str | None, key: str | None, text: str,
               tokens: int, count: Callable[[str], int]) -> str:
    """L2: the excerpt (see the module docstring), within ``COMPACT_SHARE`` of
    ``tokens``, flagged as extractive."""
    lines = text.splitlines()
    budget = max(COMPACT_MIN_TOKENS, min(COMPACT_MAX_TOKENS, int(tokens * COMPACT_SHARE)))
    head = list(range(min(HEAD_LINES, len(lines))))
    tail = list(range(max(len(head), len(lines) - TAIL_LINES), len(lines)))
    named = [i for i in range(len(head), len(lines) - len(tail))
             if _IDENTIFIER.search(lines[i])]
    keep: list[int] = []
    used = 0
    for i in (*head, *tail, *named):
        cost = count(lines[i][:LINE_CHARS]) + 1
        if used + cost > budget and keep:
            if i in head or i in tail:
                continue
            break
        keep.append(i)
        used += cost
    keep.sort()
    out: list[str] = []
    previous = -1
    for i in keep:
        if i > previous + 1:
            out.append(f"[... {i - previous - 1} lines ...]")
        line = lines[i]
        out.append(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [...]")
        previous = i
    if previous < len(lines) - 1:
        out.append(f"[... {len(lines) - 1 - previous} lines ...]")
    header = (f"[memd: extractive excerpt of the output of {_key_words(tool, key)}, "
              f"object {object_id}: {len(keep)} of {len(lines)} lines kept verbatim (the "
              "first and last ones and those naming identifiers); the rest is held out of "
              "context. Run the tool again to see it whole.]")
    return "\n".join([header, *out])
