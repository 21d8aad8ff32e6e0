"""Client text recognized by recurrence: a long paragraph seen again in another session.

Known client prompts are recognized by their words (:mod:`memd.engine.learning.templates`), but
clients change their prompts and new clients appear. What all their text has in common
is that it comes back: a client sends the same environment message, memory prompt or
reminder in every conversation, while a user does not retype a paragraph of a few hundred
characters. So every paragraph of a user message's words at least ``MIN_CHARS`` long is
hashed after normalization (:func:`paragraph_key`: case, digits, paths and punctuation
aside, so a date or a working directory that changes does not make it new), and the store
counts the sessions each hash was seen in (``Store.see_paragraphs``; hashes only, no
text). A paragraph seen in a second session is client text from then on: extraction
leaves it out, and what was extracted from it in the first session, before anyone could
tell, is retired (:func:`retire`): its memories made inactive and tagged
``RETIRED_TAG``, its facts deleted. Short paragraphs ("run the tests") are never counted:
users do repeat those.

On the chat path this costs nothing for a message without a long paragraph, and one read
and one write per new long paragraph otherwise.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from memd.engine.learning.extract import extract
from memd.engine.learning.extract.llm import grounded, memory_text
from memd.engine.learning.templates import user_words
from memd.engine.learning.write import content_hash

if TYPE_CHECKING:
    from memd.backends.base import ParagraphStore, Store

MIN_CHARS = 200  # normalized characters: a paragraph no user retypes
RETIRED_TAG = "client-text"

_PATH = re.compile(r"\S*[/\\]\S*")
_DIGITS = re.compile(r"\d+")
_NOT_WORD = re.compile(r"[\W_]+")


def paragraphs(text: str) -> list[str]:
    """The paragraphs of ``text`` (blocks between blank lines, a fenced code block whole
    within its paragraph), stripped, empty ones out."""
    found: list[str] = []
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if line.strip() or fenced:
            lines.append(line)
        elif lines:
            found.append("\n".join(lines).strip())
            lines = []
    if lines:
        found.append("\n".join(lines).strip())
    return [p for p in found if p]


def paragraph_key(paragraph: str) -> str | None:
    """The hash a paragraph recurs by, or None for one too short to count: lower case,
    every path one "/", every number one "0", punctuation and spacing collapsed."""
    norm = _PATH.sub(" / ", paragraph.lower())
    norm = _NOT_WORD.sub(" ", _DIGITS.sub("0", norm)).strip()
    if len(norm) < MIN_CHARS:
        return None
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:32]


def keys_of(text: str) -> dict[str, str]:
    """The keys of the long paragraphs of ``text``, each with its paragraph."""
    found: dict[str, str] = {}
    for p in paragraphs(text):
        key = paragraph_key(p)
        if key is not None:
            found.setdefault(key, p)
    return found


def without(text: str, keys: Collection[str]) -> str:
    """``text`` without the paragraphs whose key is in ``keys``."""
    if not keys:
        return text
    return "\n\n".join(p for p in paragraphs(text) if paragraph_key(p) not in keys)


def user_text(store: ParagraphStore, user_id: str, text: str) -> str:
    """The user's words in a stored message's ``text``: without client templates and
    without the paragraphs known to recur (read only: nothing is recorded)."""
    words = user_words(text)
    keys = keys_of(words)
    return without(words, store.recurring_paragraphs(user_id, list(keys)) if keys else ())


def see(store: Store, user_id: str, session_id: str, message_id: str, words: str,
        workspace: str | None, now: float) -> str:
    """Record the long paragraphs of a new user message's ``words`` and return the words
    without those that recur; a paragraph that recurs from now on has what was extracted
    from it in its first message retired."""
    keys = keys_of(words)
    if not keys:
        return words
    seen = store.see_paragraphs(user_id, session_id, message_id, list(keys), now)
    recurring = {s.key for s in seen if s.sessions > 1}
    for s in seen:
        if s.sessions == 2 and s.new_session:
            retire(store, user_id, workspace, s.first_message_id, [keys[s.key]], now)
    return without(words, recurring)


def retire(store: Store, user_id: str, workspace: str | None, message_id: str,
           recurring: Iterable[str], now: float) -> int:
    """Retire what message ``message_id`` gave only through the ``recurring`` paragraphs:
    each memory extracted from them (and not also from the rest of the message) is made
    inactive and tagged ``RETIRED_TAG``, each fact deleted. How many were retired."""
    msg = store.get_message(user_id, message_id)
    if msg is None:
        return 0
    gone = list(recurring)
    keys = {key for p in gone if (key := paragraph_key(p)) is not None}
    rest = without(user_words(msg.safe_text or ""), keys)
    kept = {ex.text for ex in extract(rest)}
    retired = 0
    for ex in (ex for p in gone for ex in extract(p)):
        if ex.text in kept:
            continue
        memory = store.find_by_hash(user_id, workspace, content_hash(ex.text))
        if memory is not None and memory.provenance_message_id == message_id:
            store.update_memory(user_id, memory.id, is_active=False, updated_at=now,
                                tags=(*memory.tags, RETIRED_TAG))
            retired += 1
        if ex.fact is not None:
            f = ex.fact
            facts = [x.id for x in store.get_facts(user_id, workspaces=(workspace or "",),
                                                   category=f.category, key=f.key)
                     if x.source_message_id == message_id and x.value == f.value]
            retired += store.delete_facts(user_id, facts)
    return retired + _retire_helper_facts(store, user_id, workspace, message_id, rest, now)


def _retire_helper_facts(store: Store, user_id: str, workspace: str | None, message_id: str,
                         rest: str, now: float) -> int:
    """Retire the facts the helper model read in message ``message_id`` (the rules'
    are handled by re-reading them) whose value its ``rest`` (the user's words left once
    the recurring paragraphs are out) no longer holds, each with the memory that states
    it. The helper's reading cannot be repeated here, so its facts are judged by their
    grounding, as they were when accepted."""
    retired = 0
    for fact in store.get_facts(user_id, workspaces=(workspace or "",)):
        if fact.source_message_id != message_id or grounded(fact.value, rest):
            continue
        memory = store.find_by_hash(user_id, workspace, content_hash(memory_text(fact)))
        if memory is not None and memory.provenance_message_id == message_id:
            store.update_memory(user_id, memory.id, is_active=False, updated_at=now,
                                tags=(*memory.tags, RETIRED_TAG))
            retired += 1
        retired += store.delete_facts(user_id, [fact.id])
    return retired
