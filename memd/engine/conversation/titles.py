"""Session titles: a few words naming what a session is about, shown beside the messages
recalled from it, so that the model reading a recalled line knows which conversation it
comes from.

A title is derived data, made from the sanitized text of the session's first user message
that holds user words (:func:`memd.engine.learning.templates.user_words`: a client's tool result or
reminder names nothing the user is doing), never from the original text:

1. **Rules, in line.** :func:`rule_title` takes the first sentence that says something,
   drops the greetings and requests it opens with ("hi", "can you") and the secrets'
   placeholders, keeps at most ``MAX_WORDS`` words and ``MAX_CHARS`` characters, and
   capitalises it. The append sets it in its own transaction, one UPDATE that writes only
   a session without a title: the first message with user words names the session, and
   later ones never rename it.
2. **The helper, in a job.** When the helper model is on, a ``title`` job (the session's
   and the message's ids, no text) asks it for a 3-6 word title under a JSON schema, and
   keeps its answer only if it passes :func:`check_title`: at most ``MAX_CHARS``
   characters, no placeholder, and at least one content word that the message holds (a
   title the message does not ground is the model's invention). A kept title replaces the
   rule-based one while that one is still the session's; any failure leaves the
   rule-based title in place.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from memd.engine.learning.extract.llm import STOP_WORDS

if TYPE_CHECKING:
    from memd.models.helper import ChatMessage, HelperModel

MAX_WORDS = 8
MAX_CHARS = 60
MAX_SOURCE_CHARS = 600  # the part of a message the helper reads
MAX_TOKENS = 40

_PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_\d+\]")  # a secret's, see memd.privacy
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_LEAD = re.compile(
    r"^(?:(?:hi|hey|hello|yo|ok|okay|so|thanks|thank you|please|pls|can you|could you"
    r"|would you|can u|will you|i need you to|i want you to|i'd like you to"
    r"|help me with|help me|quick question)\b[\s,.!:;-]*)+", re.I)
_TRAIL = re.compile(r"(?:[\s,;:]+(?:please|pls|thanks|thank you))?[\s.,;:!?…-]*$", re.I)
# Markdown's marks: a heading's or quote's lead, emphasis and code ticks. An underscore
# inside a word is the word's own (snake_case, rocketdb_prod_v7) and stays.
_MARKUP = re.compile(r"^[\s#>*`_-]+|[*`]+|(?<!\w)_+|_+(?!\w)")
_WORD = re.compile(r"\w+")
# A title's words that say nothing of the conversation: the extraction's stop words and
# the words of a request ("how do I", "can you make")
_STOP = STOP_WORDS | frozenset(
    "how what why when where which who do does did can could should would will get make "
    "new".split())

PROMPT = (
    'Message: "{text}"\n'
    "This message opens a conversation. Give the conversation a title of 3 to 6 words, "
    'using the message\'s own words. Answer in JSON: {{"title": "..."}}'
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string", "minLength": 1, "maxLength": MAX_CHARS}},
    "required": ["title"], "additionalProperties": False,
}


def rule_title(words: str) -> str | None:
    """A short title for a message whose user words are ``words`` (already sanitized),
    from its first sentence that says something; None when none does."""
    for sentence in _SENTENCE.split(_PLACEHOLDER.sub(" ", words[:4 * MAX_SOURCE_CHARS])):
        # a client may send the typed prompt in double quotes (opencode's run does)
        text = _TRAIL.sub("", _LEAD.sub("", _MARKUP.sub("", sentence.strip().strip('"“”'))))
        kept = " ".join(text.split()[:MAX_WORDS])
        while len(kept) > MAX_CHARS and " " in kept:
            kept = kept.rsplit(" ", 1)[0]
        kept = _TRAIL.sub("", kept[:MAX_CHARS])
        if _WORD.search(kept):
            return kept[0].upper() + kept[1:]
    return None


def _content(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if w not in _STOP}


def check_title(answer: str, words: str) -> str | None:
    """The title in a JSON ``answer`` about a message whose user words are ``words``, if it
    passes the checks (see the module docstring); None otherwise."""
    try:
        data = json.loads(answer)
    except ValueError:
        return None
    title = data.get("title") if isinstance(data, dict) else None
    if not isinstance(title, str):
        return None
    title = _TRAIL.sub("", " ".join(title.strip().strip("\"'“”").split()))
    if (not title or len(title) > MAX_CHARS or _PLACEHOLDER.search(title)
            or not _content(title) & _content(words)):
        return None
    return title[0].upper() + title[1:]


def prompt(words: str) -> list[ChatMessage]:
    """The one message the helper is asked."""
    return [{"role": "user",
             "content": PROMPT.format(text=" ".join(words[:MAX_SOURCE_CHARS].split()))}]


def helper_title(helper: HelperModel, words: str) -> str | None:
    """The helper's title for a message whose user words are ``words``, checked; None
    when its answer fails the checks. A model error is raised (the job is retried)."""
    answer = helper.complete(prompt(words), max_tokens=MAX_TOKENS, json_schema=SCHEMA)
    return check_title(answer, words)
