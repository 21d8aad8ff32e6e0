"""Side requests: calls that are not a turn of the user's conversation.

Clients make calls of their own beside the conversation: a title for the chat, a summary
of it, a compaction of its history, a commit message, a check of who speaks next, a
topic, the client's own memory extraction, a code completion. Such a call often carries
the user's words (a title request quotes the first message), so taken for a turn it would
become a session of its own, its instructions ("Generate a title", "Do not use any other
tools") would be read as the user's, and the user's current sentence would come back as
an "earlier conversation" whose answer is a title. A side request is forwarded exactly as
sent, gets no memory block, creates no session, and nothing is extracted or recalled from
it; its call record says why it was taken for one.

What marks one, strongest first:

- the header ``X-Memd-Memory: off`` (``on`` says the call is a turn, whatever its shape);
- a JSON response format (``response_format`` of type ``json_object`` or
  ``json_schema``): a client parsing the answer as data is not chatting;
- a known prompt of a popular client's side calls (:data:`SIDE_PROMPTS`), in a system
  message or opening the newest user message;
- the shape of a transformation: a single turn without tools (no assistant or tool
  message, no ``tools``) whose user text quotes, inside words of its own, what the same
  client sent in another conversation a short while ago under another system prompt
  (:class:`RecentTurns`);
- a long text to condense into a few words: a single turn without tools whose user text
  holds at least ``CONDENSED_CHARS`` characters and that asks for at most
  ``TINY_ANSWER`` tokens (a title, a label, a topic). A short question with a small
  ``max_tokens`` is a user's one-line chat, and a turn.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine.conversation.chains import SYSTEM_ROLES, content_text
from memd.engine.conversation.identity import system_text
from memd.errors import InvalidInput

HEADER = "x-memd-memory"
TINY_ANSWER = 64  # tokens: a title or a label, not an answer to a user
CONDENSED_CHARS = 1000  # a text this long answered in TINY_ANSWER tokens is condensed
RECENT_SECONDS = 600.0  # how long a turn's words are remembered for the quoting check
MIN_QUOTED_CHARS = 24  # a shorter repeat ("hi", "continue") says nothing

# Openings of the prompts popular clients send for their side calls, compared
# case-insensitively with whitespace collapsed, at the start of a system message or of
# the newest user message.
SIDE_PROMPTS: tuple[str, ...] = (
    # opencode
    "You are a title generator.",
    "Generate a title for this conversation",
    "Summarize what was done in this conversation",
    "Provide a detailed prompt for continuing our conversation above",
    "Provide a detailed but concise summary of our conversation above",
    "You are a helpful AI assistant tasked with summarizing conversations",
    # qwen-code (and the Gemini CLI it comes from)
    "You are the component that summarizes internal chat history into a given structure",
    "Analyze *only* the content and structure of your immediately preceding response",
    # qwen-code's managed memory: the extraction and "dream" subagents' system prompts,
    # and the extraction task appended to the conversation as a user message
    "You are now acting as the managed memory extraction subagent",
    "You are performing a managed memory dream",
    "Managed memory directory:",
    # Aider
    "You are an expert software engineer that generates concise, one-line Git commit",
    "*Briefly* summarize this partial conversation about programming",
    "*Briefly* summarize this conversation about programming",
    # Continue
    "Given the following conversation, generate a short title",
    # Cline and Roo Code
    "Your task is to create a detailed summary of the conversation so far",
)

_SPACE = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


_KNOWN = tuple(_norm(p) for p in SIDE_PROMPTS)


def _text(message: Mapping[str, Any]) -> str:
    return content_text(message.get("content"))


def _known_prompt(text: str) -> str | None:
    head = _norm(text[:600])
    for prompt, original in zip(_KNOWN, SIDE_PROMPTS, strict=True):
        if head.startswith(prompt):
            return original
    return None


def system_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """A digest of a request's system messages (what sets a conversation's prompt)."""
    text = system_text([m for m in messages if m.get("role") in SYSTEM_ROLES])
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Turn:
    at: float
    client: str
    system: str
    text: str


class RecentTurns:
    """The newest user words of each user's recent turns, with the client and system
    prompt they came with: a single-turn call that repeats them under another system
    prompt is the client transforming its own conversation. Bounded per user and in
    users; entries older than ``RECENT_SECONDS`` are not consulted."""

    def __init__(self, per_user: int = 32, max_users: int = 1024) -> None:
        self.per_user = per_user
        self.max_users = max_users
        self._turns: OrderedDict[str, deque[_Turn]] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, user_id: str, client: str, system: str, text: str, now: float) -> None:
        text = _norm(text)
        if len(text) < MIN_QUOTED_CHARS:
            return
        with self._lock:
            turns = self._turns.setdefault(user_id, deque(maxlen=self.per_user))
            self._turns.move_to_end(user_id)
            if not any(t.text == text and t.system == system for t in turns):
                turns.append(_Turn(now, client, system, text))
            while len(self._turns) > self.max_users:
                self._turns.popitem(last=False)

    def quoted(self, user_id: str, client: str, system: str, text: str, now: float) -> bool:
        """Whether ``text`` quotes, inside words of its own, a recent turn's words that
        the same ``client`` sent under another system prompt (the same words alone may be
        the user starting over in a new conversation)."""
        text = _norm(text)
        with self._lock:
            turns = list(self._turns.get(user_id, ()))
        return any(t.client == client and t.system != system and t.text != text
                   and now - t.at <= RECENT_SECONDS and t.text in text for t in turns)


def _single_turn(messages: Sequence[Mapping[str, Any]], body: Mapping[str, Any]) -> bool:
    return not body.get("tools") and not body.get("functions") and all(
        m.get("role") in (*SYSTEM_ROLES, "user") for m in messages)


def _answer_limit(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def memory_flag(header: str | None) -> str:
    """The request's ``X-Memd-Memory`` as "on", "off" or "" (not sent); any other value
    is refused."""
    flag = (header or "").strip().lower()
    if header is not None and flag not in ("on", "off"):
        raise InvalidInput(f"X-Memd-Memory must be 'on' or 'off', not {header!r}")
    return flag


def side_reason(body: Mapping[str, Any], header: str | None, *, user_id: str = "",
                client: str = "", recent: RecentTurns | None = None,
                now: float = 0.0) -> str | None:
    """Why the chat request ``body`` is a side request (see the module docstring), or
    None when it is a turn of the user's conversation. ``header``: the request's
    ``X-Memd-Memory``."""
    flag = memory_flag(header)
    if flag == "on":
        return None
    if flag == "off":
        return "X-Memd-Memory: off"
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema"):
        return f"response_format {fmt['type']}"
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    users = [m for m in messages if m.get("role") == "user"]
    for m in [*(m for m in messages if m.get("role") in SYSTEM_ROLES), *users[-1:]]:
        known = _known_prompt(_text(m))
        if known is not None:
            return f"a client's side prompt ({known[:48]})"
    if not users or not _single_turn(messages, body):
        return None
    text = _text(users[-1])
    limit = _answer_limit(body)
    if limit is not None and limit <= TINY_ANSWER and len(text) >= CONDENSED_CHARS:
        return f"a long text to condense into at most {limit} tokens"
    if recent is not None and recent.quoted(user_id, client, system_hash(messages),
                                            text, now):
        return "a single turn that quotes this client's recent turn under another prompt"
    return None
