"""Input checks shared by every entry point: ids, text, enums. Each raises InvalidInput
with a message that names the field and what is wrong, before anything is written."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from memd.errors import InvalidInput
from memd.types import ROLES, Provenance, Scope, Tier

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_SPACE = re.compile(r"\s+")
# The bounded part of a message that is embedded, and that a query is made of (MiniLM
# reads its first 256 word pieces anyway; a longer query only slows the keyword channel).
EMBED_CHARS = 2_000
# The part of a user message that retrieval takes as its query (its keywords).
QUERY_CHARS = 1_000
# The part of a query that is embedded: a sentence or two from its head and its tail. An
# embedding's cost grows with its length (MiniLM: ~10 ms for 50 tokens, ~34 ms for 256 on
# two cores), and a long query's words still reach the keyword channel whole.
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
    """NFC, whitespace collapsed, stripped; rejects empty, oversized and non-text input."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what} must be a string, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid Unicode (lone surrogate)") from exc
    clean = _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()
    if not clean:
        raise InvalidInput(f"{what} is empty")
    if len(clean) > max_chars:
        raise InvalidInput(f"{what} is too long: {len(clean)} characters (limit {max_chars})")
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
    clean = tuple(dict.fromkeys(t.strip() for t in tags if t.strip()))
    if any(len(t) > 64 for t in clean) or len(clean) > 32:
        raise InvalidInput("at most 32 tags of at most 64 characters each")
    return clean


def check_role(role: Any) -> str:
    if role not in ROLES:
        raise InvalidInput(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    return str(role)


def check_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidInput("metadata must be a JSON object")
    return metadata
