"""Input checks shared by every entry point: ids, text, enums. Each raises InvalidInput
with a message that names the field and what is wrong, before anything is written."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from memd.errors import InvalidInput
from memd.types import ROLES, Provenance, Scope, Tier

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
# The same rules as JSON Schema patterns, for the OpenAPI schema; "(?!\n)$" keeps "$"
# from matching before a final newline, which Python's "$" would.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}(?!\n)$"
OPTIONAL_ID_PATTERN = r"^(?:[A-Za-z0-9][A-Za-z0-9._:@-]{0,127})?(?!\n)$"
NO_NUL_PATTERN = r"^[^\x00]*$"
# Python's whitespace (str.isspace), spelt out: "\s" means less in other regex engines.
SPACE_CLASS = (r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029"
               r"\u202f\u205f\u3000")
TEXT_PATTERN = rf"^[^\x00]*[^\x00{SPACE_CLASS}][^\x00]*$"  # some non-space, no NUL
_SPACE = re.compile(r"\s+")
# The bounded part of a message that is embedded, and that a query is made of (MiniLM
# reads its first 256 word pieces anyway; a longer query only slows the keyword channel).
EMBED_CHARS = 2_000
# The part of a user message that retrieval takes as its query (its keywords).
QUERY_CHARS = 1_000
# The part of a query that is embedded: a sentence or two from its head and its tail. An
# embedding's cost grows with its length, and a long query's words still reach the
# keyword channel whole.
QUERY_EMBED_CHARS = 400


def check_id(value: Any, what: str = "id") -> str:
    """A user, workspace, session or memory id: 1–128 of ``A-Z a-z 0-9 . _ : @ -``,
    starting with a letter or digit."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    if not _ID.fullmatch(value):
        raise InvalidInput(
            f"invalid {what} {value[:40]!r}: use 1-128 characters from A-Z a-z 0-9 . _ : @ -"
            ", starting with a letter or digit"
        )
    return value


def check_optional_id(value: Any, what: str) -> str | None:
    return None if value is None or value == "" else check_id(value, what)


def normalize_text(text: Any, max_chars: int, what: str = "text") -> str:
    """NFC, whitespace collapsed, stripped; rejects empty, oversized and non-text input.
    The size limit is on the text as sent, which is what the API schema can state."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a string, not {type(text).__name__}")
    if len(text) > max_chars:
        raise InvalidInput(f"{what} is too long: {len(text)} characters (limit {max_chars})")
    check_chars(text, what)
    clean = _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()
    if not clean:
        raise InvalidInput(f"{what} is empty")
    return clean


def excerpt(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first and last
    ``limit // 2`` characters around a line holding "...". What memd derives from a huge
    message (a whole file, a log) is this bounded part of it: the head says what the text
    is, and the tail is where a request after pasted files, or the failure at the end of a
    log, usually is."""
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    return text[:half] + "\n...\n" + text[-half:]


def check_tier(value: Any) -> Tier:
    if isinstance(value, str):
        v = value.upper().removeprefix("L")
        if v.isdigit():
            value = int(v)
        elif v in Tier.__members__:
            return Tier[v]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4:
        return Tier(value)
    raise InvalidInput(f"invalid tier {value!r}: use 0-4, L0-L4 or a name (working, ..., "
                       "procedural)")


def check_scope(value: Any) -> Scope:
    if isinstance(value, Scope):
        return value
    if isinstance(value, str) and value.upper() in Scope.__members__:
        return Scope[value.upper()]
    raise InvalidInput(f"invalid scope {value!r}: use 'local' or 'global'")


def check_provenance(value: Any) -> Provenance:
    if isinstance(value, Provenance):
        return value
    if isinstance(value, str) and value.upper() in Provenance.__members__:
        return Provenance[value.upper()]
    raise InvalidInput(
        f"invalid provenance {value!r}: use one of "
        + ", ".join(p.name.lower() for p in Provenance)
    )


def check_unit(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput(f"{what} must be a number between 0 and 1, not {value!r}")
    return float(value)


def check_tags(tags: Any) -> tuple[str, ...]:
    if tags is None:
        return ()
    if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
        raise InvalidInput("tags must be a list of strings")
    for i, t in enumerate(tags):
        check_chars(t, f"tags[{i}]")
    clean = tuple(dict.fromkeys(t.strip() for t in tags if t.strip()))
    if any(len(t) > 64 for t in clean) or len(clean) > 32:
        raise InvalidInput("at most 32 tags of at most 64 characters each")
    return clean


def check_role(role: Any) -> str:
    if role not in ROLES:
        raise InvalidInput(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    return str(role)


def check_metadata(metadata: Any, what: str = "metadata") -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInput(f"{what} must be a JSON object")
    check_json(metadata, what)
    return metadata


# Deeper JSON is refused: no real request nests this far, and recursive code (JSON
# encoders, drivers, pydantic) fails on far less than Python's recursion limit allows.
MAX_DEPTH = 100
# Characters no store can hold the same way: PostgreSQL refuses NUL in text and JSON,
# and a lone surrogate is not valid Unicode, so UTF-8 cannot encode it.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
# The fields of a stored message that are plain strings, and those that are counts.
_MESSAGE_STRINGS = ("name", "tool_call_id", "model", "finish_reason")
_MESSAGE_COUNTS = ("prompt_tokens", "completion_tokens", "latency_ms")
_MAX_COUNT = 2**31  # stored as a 32-bit integer by PostgreSQL


def is_count(value: Any) -> bool:
    """Whether ``value`` is a token or latency count memd can store: a non-negative
    integer (not a bool) that fits the store's 32-bit column."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_COUNT


def _has_bad_chars(value: str) -> bool:
    """Whether ``value`` holds a character of ``_BAD_CHARS``, found without scanning it
    in Python's regex engine (a few hundred microseconds for an agent's 100 KB tool
    result, which each request's new messages go through several times): a string that
    CPython knows to be ASCII can hold only the NUL, which ``in`` finds at memory
    speed, and any other holds a surrogate exactly when strict UTF-8 will not encode it."""
    if "\x00" in value:
        return True
    if value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_chars(value: str, what: str) -> str:
    """``value`` if every store can hold it: no NUL, no lone surrogate."""
    bad = _BAD_CHARS.search(value) if _has_bad_chars(value) else None
    if bad is None:
        return value
    char = bad.group()
    kind = "a NUL character" if char == "\x00" else "a lone surrogate"
    raise InvalidInput(f"{what} contains {kind} (\\u{ord(char):04x}) at position "
                       f"{bad.start()}; memd stores only valid Unicode text without NUL characters")


def check_json(value: Any, what: str, depth: int = 0) -> Any:
    """``value`` if it is JSON every store can hold: objects with string keys, arrays,
    finite numbers, and strings that pass :func:`check_chars`, at most ``MAX_DEPTH``
    levels deep."""
    if depth > MAX_DEPTH:
        raise InvalidInput(f"{what} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return check_chars(value, what)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{what} contains {value!r}, which is not a JSON number")
        return value
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{what} has a key that is not a string: {key!r}")
            check_chars(key, f"a key of {what}")
            check_json(item, f"{what}.{key[:40]}", depth + 1)
        return value
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_json(item, f"{what}[{i}]", depth + 1)
        return value
    raise InvalidInput(f"{what} holds a {type(value).__name__}, which is not JSON")


def check_message(raw: Any, index: int | None = None) -> dict[str, Any]:
    """One message to store, checked whole before anything is written (a count sent
    as a whole float comes back an int):
    ``content`` a string, a list of part objects or null; ``name``, ``tool_call_id``,
    ``model`` and ``finish_reason`` strings or null; ``tool_calls`` a list of objects;
    the token and latency counts non-negative integers; ``metadata`` an object; every
    string free of what :func:`check_chars` refuses."""
    if is_dataclass(raw) and not isinstance(raw, type):
        raw = asdict(raw)
    where = "message" if index is None else f"messages[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be an object with a role")
    check_role(raw.get("role"))
    message = dict(raw)
    content = raw.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, Mapping) for p in content):
            raise InvalidInput(f"{where}.content parts must be objects")
        check_json(content, f"{where}.content")
    elif isinstance(content, str):
        check_chars(content, f"{where}.content")
    elif content is not None:
        raise InvalidInput(f"{where}.content must be a string, a list of parts or null, "
                           f"not {type(content).__name__}")
    for name in _MESSAGE_STRINGS:
        item = raw.get(name)
        if item is not None and not isinstance(item, str):
            raise InvalidInput(f"{where}.{name} must be a string or null, not "
                               f"{type(item).__name__}")
        if item is not None:
            check_chars(item, f"{where}.{name}")
    for name in _MESSAGE_COUNTS:
        item = raw.get(name)
        if isinstance(item, float) and item.is_integer():  # JSON does not tell 3.0 from 3
            item = message[name] = int(item)
        if item is not None and not is_count(item):
            raise InvalidInput(f"{where}.{name} must be a non-negative integer or null, "
                               f"not {item!r}")
    calls = raw.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(isinstance(t, Mapping) for t in calls):
            raise InvalidInput(f"{where}.tool_calls must be a list of objects")
        check_json(calls, f"{where}.tool_calls")
    check_metadata(raw.get("metadata"), f"{where}.metadata")
    return message


def clean_chars(value: str) -> str:
    """``value`` with each NUL and lone surrogate replaced by U+FFFD."""
    return _BAD_CHARS.sub("\ufffd", value) if _has_bad_chars(value) else value


def sanitized(value: Any) -> Any:
    """A copy of a JSON value that every store can hold: each string (keys too) through
    :func:`clean_chars`, NaN and infinities as null. What a proxied client sent is
    forwarded as sent; memd keeps this copy of it."""
    if isinstance(value, str):
        return clean_chars(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {clean_chars(str(k)): sanitized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitized(v) for v in value]
    return value


def fact_key(category: Any, key: Any) -> tuple[str, str]:
    """A fact's category and key as stored: checked, trimmed, lower case."""
    for what, part in (("category", category), ("key", key)):
        if not isinstance(part, str) or not part.strip() or len(part) > 64:
            raise InvalidInput(f"{what} must be a non-empty string of at most 64 chars")
        check_chars(part, what)
    return category.strip().lower(), key.strip().lower()
