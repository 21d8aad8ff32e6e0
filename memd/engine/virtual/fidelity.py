"""The texts of a context object at each fidelity, and what each one lost.

L0 is the text as the client sent it. L3, the stub, is one line that names the object,
the tool and what it was of, its size, and how to get it back. L1 (detailed, about 30 %
of the full text) and L2 (compact, about 5 %) come from the helper model, in a background
job (:mod:`memd.engine.virtual.summaries`), each with its declared losses: what it
dropped and what it can still answer. Until the helper's are there, and wherever no
helper runs, extractive excerpts stand in, flagged as such: the first and last lines and
the lines that name identifiers (paths, error codes, names with digits or underscores,
ports), verbatim and in order, under a header that says it is an excerpt and what it left
out. The excerpts are deterministic, so the same object always gets the same bytes; and
a helper's text replaces them only while the object is still held whole, so a text once
sent stays the text sent and the prompt's prefix stays the one the model server cached.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

FULL, DETAILED, COMPACT, STUB, EVICTED = 0, 1, 2, 3, 4
NAMES = {FULL: "full", DETAILED: "detailed", COMPACT: "compact", STUB: "stub",
         EVICTED: "evicted"}
LOSSES = {
    FULL: "nothing",
    DETAILED: "every line but the first and last ones and those naming identifiers, "
              "past about 30 % of the text (extractive excerpt, no model)",
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
DETAILED_SHARE = 0.30
DETAILED_MIN_TOKENS = 96
DETAILED_MAX_TOKENS = 2400

# identifiers a later turn may need verbatim: paths, dotted or snake/camel names, error
# codes and words, ports and line numbers
_IDENTIFIER = re.compile(
    r"[\w.-]+/[\w./-]+|\b\w+\.(?:py|ts|js|go|rs|java|c|h|cpp|json|toml|ya?ml|md|sql|sh)\b"
    r"|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b[a-z]+_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\b"
    r"|\b(?:error|Error|ERROR|exception|Exception|FAIL\w*|panic|Traceback)\b"
    r"|:\d{2,5}\b|\bE\d{3,4}\b")


ENTITIES = 8  # the identifiers an object's record and stub name
_TOKEN = re.compile(r"[\w./:-]+")
_GENERIC = frozenset({"error", "exception", "traceback", "panic"})


class Reading:
    """One pass over a tool result's text, shared by its key entities and its excerpts:
    its lines, its tokens, and the identifiers each distinct token names. The
    identifier patterns, slow to scan with, run once per distinct token (a tool result
    repeats its tokens), never over the whole text or again line by line: an identifier
    never spans two tokens, so a line names one exactly when one of its tokens does."""

    __slots__ = ("lines", "tokens", "found")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.tokens = Counter(_TOKEN.findall(text))  # in order of first appearance
        self.found = {token: _IDENTIFIER.findall(token) for token in self.tokens}

    def names_identifier(self, line: int) -> bool:
        """Whether line ``line`` names an identifier (what ``_IDENTIFIER.search`` of
        the line would say)."""
        return any(self.found[token] for token in _TOKEN.findall(self.lines[line]))


def key_entities(text: str | Reading, key: str | None = None,
                 limit: int = ENTITIES) -> tuple[str, ...]:
    """The identifiers ``text`` names most (paths, dotted or snake/camel names, error
    codes, ports), most frequent first, then in order of appearance; not the object's
    own ``key`` nor generic words like "error". They are what a later turn may ask about
    once the text is held out of context, so the stub names them."""
    reading = text if isinstance(text, Reading) else Reading(text)
    counts: dict[str, int] = {}
    for token, seen in reading.tokens.items():
        for name in reading.found[token]:
            word = name.strip(".-")
            if len(word) < 3 or word == key or word.lower().rstrip("s") in _GENERIC \
                    or word.upper().startswith("FAIL") and word.isupper():
                continue
            counts[word] = counts.get(word, 0) + seen
    ranked = sorted(counts, key=lambda w: -counts[w])  # stable: ties keep their order
    return tuple(ranked[:limit])


def _key_words(tool: str | None, key: str | None) -> str:
    what = tool or "tool"
    return f"{what} {key}" if key else what


def stub(object_id: str, tool: str | None, key: str | None, lines: int, tokens: int,
         entities: tuple[str, ...] = ()) -> str:
    """L3: one line, made without a model, naming the object's key entities (so the
    model knows what to ask memory_query about)."""
    names = f" It names {', '.join(entities)}." if entities else ""
    return (f"[memd: output of {_key_words(tool, key)} held out of context as object "
            f"{object_id} ({lines} lines, {tokens} tokens).{names} To see it whole: "
            "memory_restore with its id where offered, else run the tool again.]")


def extractive(object_id: str, tool: str | None, key: str | None, text: str | Reading,
               tokens: int, count: Callable[[str], int], fidelity: int = COMPACT) -> str:
    """L2 (or L1, by ``fidelity``): the excerpt (see the module docstring), within
    ``COMPACT_SHARE`` (``DETAILED_SHARE``) of ``tokens``, flagged as extractive. A
    new object's excerpts and key entities read one :class:`Reading` of its text."""
    reading = text if isinstance(text, Reading) else Reading(text)
    lines = reading.lines
    share, low, high = ((DETAILED_SHARE, DETAILED_MIN_TOKENS, DETAILED_MAX_TOKENS)
                        if fidelity == DETAILED
                        else (COMPACT_SHARE, COMPACT_MIN_TOKENS, COMPACT_MAX_TOKENS))
    budget = max(low, min(high, int(tokens * share)))
    head = list(range(min(HEAD_LINES, len(lines))))
    tail = list(range(max(len(head), len(lines) - TAIL_LINES), len(lines)))
    # scanned lazily: the excerpt is full long before a long output's last lines are
    # read, and a new tool result is excerpted on the call that brings it
    named = (i for i in range(len(head), len(lines) - len(tail))
             if reading.names_identifier(i))
    keep: list[int] = []
    used = 0
    for i in itertools.chain(head, tail, named):
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
              "context. To see it whole: memory_restore with its id where offered, else "
              "run the tool again.]")
    return "\n".join([header, *out])


def extractive_losses() -> dict[str, Any]:
    """The declared losses of the extractive L1 and L2: what they dropped, and what
    they can still answer."""
    answers = ["which file or command it was", "the identifiers it names (paths, error "
               "codes, names, ports) and the lines they are on", "how it begins and ends"]
    return {NAMES[f]: {"dropped": [LOSSES[f]], "answers": answers}
            for f in (DETAILED, COMPACT)}


def loss_of(losses: Mapping[str, Any], fidelity: int) -> dict[str, Any]:
    """What an object held at ``fidelity`` lost: its declared losses at a summary's
    fidelity, else the fixed ones (full, stub, evicted)."""
    declared = losses.get(NAMES[fidelity])
    if isinstance(declared, Mapping):
        return dict(declared)
    answers = {FULL: ["everything"], STUB: ["which file or command it was, and its size"]}
    return {"dropped": [] if fidelity == FULL else [LOSSES[fidelity]],
            "answers": answers.get(fidelity, [])}
