"""Messages as callers hand them in: checked into :class:`memd.types.NewMessage`, back
into OpenAI form, and the user's own words in them, which make the retrieval query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from memd.engine import validate as v
from memd.engine.learning.privacy import REDACT_MARGIN
from memd.engine.learning.templates import user_words
from memd.errors import InvalidInput, TooLarge
from memd.types import (
    Message,
    NewMessage,
    openai_message,
)


def checked_message(raw: Any, max_chars: int) -> NewMessage:
    """One message (an OpenAI-style mapping or a NewMessage) checked and normalized; bad
    input raises InvalidInput, an over-long content TooLarge."""
    if isinstance(raw, NewMessage):
        raw = asdict(raw)
    if not isinstance(raw, Mapping):
        raise InvalidInput("each message must be an object with a role")
    role = v.check_role(raw.get("role"))
    content = raw.get("content")
    metadata = dict(v.check_metadata(raw.get("metadata")))
    if isinstance(content, list):  # multimodal parts: keep them, index their text
        if not all(isinstance(p, Mapping) for p in content):
            raise InvalidInput("content parts must be objects")
        metadata["content_parts"] = content
        content = "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    if content is not None and not isinstance(content, str):
        raise InvalidInput(f"content must be a string, a list of parts or null, not "
                           f"{type(content).__name__}")
    if content is not None and len(content) > max_chars:
        raise TooLarge(f"message content is too long: {len(content)} characters (limit "
                       f"{max_chars}, the max_message_chars setting)")
    tool_calls = raw.get("tool_calls")
    if tool_calls is not None and (
        not isinstance(tool_calls, list) or not all(isinstance(t, Mapping) for t in tool_calls)
    ):
        raise InvalidInput("tool_calls must be a list of objects")
    if role == "tool" and not isinstance(raw.get("tool_call_id"), str):
        raise InvalidInput("a tool message needs a tool_call_id")
    if content is None and not tool_calls and role != "assistant":
        raise InvalidInput(f"a {role} message needs content")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidInput("name must be a string")
    return NewMessage(
        role=role, content=content, name=name, tool_calls=tool_calls,
        tool_call_id=raw.get("tool_call_id"), metadata=metadata, model=raw.get("model"),
        finish_reason=raw.get("finish_reason"), prompt_tokens=raw.get("prompt_tokens"),
        completion_tokens=raw.get("completion_tokens"), latency_ms=raw.get("latency_ms"),
    )


def as_openai(m: NewMessage) -> dict[str, Any]:
    return openai_message(m.role, m.content, m.name, m.tool_calls, m.tool_call_id)


def newest_user_words(newest_first: Iterable[NewMessage | Message],
                      redact: Callable[[str], str] | None = None) -> str | None:
    """The user's own words in the newest user message that has any (see
    :mod:`memd.engine.learning.templates`): a tool result or a file the client added is not what
    the user asked, so an agent's tool loop keeps the query of the user's last request."""
    for m in newest_first:
        words = words_of(m, redact)
        if words:
            return words
    return None


def words_of(m: NewMessage | Message, redact: Callable[[str], str] | None) -> str:
    """The user's own words in one message, "" when it has none. A huge message is read
    in part (its head and tail), as extraction reads it. A stored message is read in its
    sanitized text; another one through ``redact``, before it is cut (a secret cut in two
    is no longer recognized)."""
    limit = 4 * v.QUERY_CHARS
    text = m.safe_text if isinstance(m, Message) else m.content
    if m.role != "user" or not text:
        return ""
    if redact is not None and not isinstance(m, Message):
        # Only the part read is redacted (a tool result can be megabytes), cut wider by a
        # margin that holds any secret the final cut could split.
        text = redact(v.excerpt(text, limit + 2 * REDACT_MARGIN))
    return user_words(v.excerpt(text, limit)).strip()


def message_words(raw: Any, max_chars: int,
                  redact: Callable[[str], str] | None = None) -> str:
    """The user's words in one OpenAI-style message, as :func:`last_user_text` reads
    them ("" for none: not a user message, or only the client's text)."""
    return words_of(checked_message(raw, max_chars), redact)


def last_user_text(messages: Sequence[Any], max_chars: int,
                   redact: Callable[[str], str] | None = None) -> str | None:
    """The user's words in the last user message among OpenAI-style ``messages`` that
    has any (multimodal parts joined as they are stored), or None: what ``context`` would
    take as the query once they are stored (its secrets replaced by ``redact``)."""
    for raw in reversed(messages):
        words = message_words(raw, max_chars, redact)
        if words:
            return query_of(words)
    return None


def query_of(words: str) -> str:
    """The retrieval query a user message's words make: their head and tail."""
    return v.excerpt(words, v.QUERY_CHARS)

