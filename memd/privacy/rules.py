"""What a detection rule is, and the small checks rules share.

A rule is a compiled regex plus a ``locate`` function that looks at each match and returns
the span to replace, or None to reject it. Regexes stay cheap by starting with a literal
(``sk-``, ``AKIA``, ``-----BEGIN``): CPython's ``re`` then skips to each occurrence of it
instead of trying the pattern at every position. Boundary checks (is the key glued to a
longer word?) are done in ``locate`` rather than as a leading lookbehind, which would cost
that skip. Case-insensitive rules run on an ASCII-lowercased copy of the text of the same
length (``lowered``), which is several times faster than ``re.IGNORECASE``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int]
Locate = Callable[[re.Match[str], str], Span | None]

# Kinds name what a placeholder stands for: ``[PASSWORD_3]``.
API_KEY = "API_KEY"  # a provider key or token recognised by its format
PRIVATE_KEY = "PRIVATE_KEY"
TOKEN = "TOKEN"  # a bearer token or JWT
PASSWORD = "PASSWORD"
SECRET = "SECRET"  # any other credential found by its context (a name like api_key)
EMAIL = "EMAIL"
PHONE = "PHONE"
CARD = "CARD"
IBAN = "IBAN"

# Lower runs first when two findings overlap: the overlap becomes one replacement of the
# kind of the most specific rule.
PRIVATE_KEY_PRIORITY = 0
CUSTOM_PRIORITY = 5
PROVIDER_PRIORITY = 10
CONTEXT_PRIORITY = 20
PII_PRIORITY = 30


def whole_match(m: re.Match[str], text: str) -> Span | None:
    """The span of the whole match."""
    return m.span() if m.end() > m.start() else None


@dataclass(frozen=True, slots=True)
class Rule:
    """One detector: where ``pattern`` matches, ``locate`` picks the span to replace."""

    name: str
    kind: str
    pattern: re.Pattern[str]
    locate: Locate = whole_match
    priority: int = PROVIDER_PRIORITY
    lowered: bool = False  # run on the ASCII-lowercased text (case-insensitive)


_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_TOKEN_CHARS = _WORD | {"-"}


def glued_left(text: str, start: int) -> bool:
    """Whether a token starting at ``start`` continues a longer one (``task-...`` is not
    ``sk-...``)."""
    return start > 0 and text[start - 1] in _TOKEN_CHARS


def glued(text: str, start: int, end: int) -> bool:
    """Whether the span continues a longer token on either side (``AKIA...`` followed by
    more capitals is not a key id)."""
    return glued_left(text, start) or (end < len(text) and text[end] in _TOKEN_CHARS)


def entropy(value: str) -> float:
    """Shannon entropy of the characters of ``value``, in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


_PLACEHOLDER_WORDS = re.compile(
    r"your|example|sample|dummy|placeholder|redacted|changeme|xxxx|\*\*\*|\.\.\.|…|here",
    re.ASCII | re.IGNORECASE,
)


def looks_random(value: str, min_len: int = 16, min_entropy: float = 3.0,
                 digit: bool = True) -> bool:
    """Whether ``value`` reads like a generated key rather than a word, a name or a fill-in
    (``sk-your-key-here``, ``xxxxxxxx``): long enough, with a digit (unless the format has
    none) and a letter, spread over many characters, and no placeholder words."""
    return (
        len(value) >= min_len
        and (not digit or any(c.isdigit() for c in value))
        and any(c.isalpha() for c in value)
        and entropy(value) >= min_entropy
        and _PLACEHOLDER_WORDS.search(value) is None
    )
