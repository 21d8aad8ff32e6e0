"""Whose conversation a call belongs to: the identity a session keeps across its calls.

A resent history is recognized by its chain hashes (:mod:`memd.engine.conversation.chains`), but the
messages alone do not name a conversation: two clients (say Continue and Cline) that open
with the same words send the same first message, and one of them would continue, or
retry, the other's session. So a session records in its metadata (key ``identity``) who
it talks to, and a history that matches a session continues it only when the identities
agree (:meth:`Identity.agrees`):

- the client family: the User-Agent's product without its version (``opencode``,
  ``OpenAI/Python``): an upgrade of the client keeps its conversations;
- the model family: the model id without provider prefix, tag, date or version suffix
  (``openai/gpt-4o-2024-08-06`` is ``gpt-4o``): a dated snapshot of the same model is the
  same conversation, another model is another;
- the system prompt, compared by resemblance, not equality: agents rewrite parts of it on
  every call (the date, the working directory's listing, git status, environment
  blocks), and those parts must not split a conversation, while another client's prompt
  must not pass for it. The prompt's words are lower-cased with digits, month and weekday
  names masked, cut into shingles of three words, and summarized by a bottom-k sketch
  (the smallest hashes of its shingles); two sketches agree when their estimated Jaccard
  resemblance is at least :data:`RESEMBLANCE`. A few changed lines in a long prompt
  leave most shingles in place; two clients' prompts share few.

A part that is unknown on either side (no User-Agent, no model, a session stored
without an identity) is no evidence either way, and agrees.
"""

from __future__ import annotations

import heapq
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from memd.engine.conversation.chains import content_text

# Sketch size: the estimate's standard error is about sqrt(J(1 - J) / k), 0.06 at J = 0.5,
# small beside the gap between one client's prompts (J near 1) and two clients' (near 0).
SKETCH_SIZE = 64
# Two system prompts with at least this estimated resemblance are one client's.
RESEMBLANCE = 0.5
_SHINGLE = 3

_WORD = re.compile(r"\w+")
_DIGITS = re.compile(r"\d+")
_CALENDAR = frozenset(
    "jan feb mar apr may jun jul aug sep sept oct nov dec january february march april "
    "june july august september october november december mon tue tues wed thu thur thurs "
    "fri sat sun monday tuesday wednesday thursday friday saturday sunday".split())
# A model id's suffixes that name a snapshot of one model, not another model: a date
# (-2024-08-06, -20240806, @20241022), a four- or three-digit release (-0613, -2411, -001),
# optionally followed by a revision (-v2), and release labels.
_SNAPSHOT = re.compile(r"[-_@](\d{4}-\d{2}-\d{2}|\d{8}|\d{4}|\d{3})(-v\d+)?$")
_LABEL = re.compile(r"[-_](latest|preview|exp)$")
_VERSION = re.compile(r"v?\d[\w.+-]*$")
_TRAILING_VERSION = re.compile(r"[-_ /]v?\d+(\.\d+)*$")


def client_family(agent: str | None) -> str | None:
    """The client's family from its User-Agent (or a family name given as is): the
    first product token without its version; None when there is none."""
    token = (agent or "").strip().split(" ", 1)[0]
    name, _, version = token.partition("/")
    if version and not _VERSION.match(version):
        name = token  # "OpenAI/Python 1.52.0": the SDK and its language name the client
    name = _TRAILING_VERSION.sub("", name)
    return name[:64] or None


def model_family(model: str | None) -> str | None:
    """The model's family: its id lower-cased, without a provider prefix, a tag, a date or
    release suffix; None when there is no model."""
    name = (model or "").strip().lower().rsplit("/", 1)[-1].split(":", 1)[0]
    while True:
        shorter = _LABEL.sub("", _SNAPSHOT.sub("", name))
        if shorter == name or not shorter:
            return name[:128] or None
        name = shorter


def system_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of a request's system and developer messages, in order."""
    return "\n".join(content_text(m.get("content")) for m in messages)


@lru_cache(maxsize=64)
def prompt_sketch(text: str) -> tuple[int, ...]:
    """The bottom-k sketch of a system prompt (sorted; empty for an empty prompt).
    Remembered per text: an agent sends the same long prompt on every step."""
    words = ["0" if w in _CALENDAR else w
             for w in _WORD.findall(_DIGITS.sub("0", text.lower()))]
    if not words:
        return ()
    span = min(_SHINGLE, len(words))
    shingles = {zlib.crc32(" ".join(words[i:i + span]).encode("utf-8"))
                for i in range(len(words) - span + 1)}
    return tuple(heapq.nsmallest(SKETCH_SIZE, shingles))


def resemblance(a: Sequence[int], b: Sequence[int]) -> float:
    """The estimated Jaccard resemblance of the prompts two sketches summarize: the share
    of the union's bottom k that both hold. Two empty prompts are alike; an empty and a
    non-empty one are not."""
    if not a or not b:
        return 1.0 if not a and not b else 0.0
    mine, theirs = set(a), set(b)
    union = heapq.nsmallest(SKETCH_SIZE, mine | theirs)
    return sum(1 for x in union if x in mine and x in theirs) / len(union)


@dataclass(frozen=True, slots=True)
class Identity:
    """A conversation's identity; ``prompt`` None: the system prompt is unknown."""

    client: str | None
    model: str | None
    prompt: tuple[int, ...] | None

    @classmethod
    def of_request(cls, client: str | None, model: str | None,
                   system: Sequence[Mapping[str, Any]]) -> Identity:
        return cls(client_family(client), model_family(model),
                   prompt_sketch(system_text(system)))

    @classmethod
    def of_session(cls, metadata: Mapping[str, Any]) -> Identity | None:
        """The identity stored in a session's metadata; None for a session stored without
        one (created through the API, or by an older memd) or with one it cannot read."""
        raw = metadata.get("identity")
        if not isinstance(raw, Mapping):
            return None
        client, model, prompt = raw.get("client"), raw.get("model"), raw.get("prompt")
        if not (isinstance(client, str | None) and isinstance(model, str | None)):
            return None
        if prompt is not None and not (isinstance(prompt, list)
                                       and all(isinstance(x, int) for x in prompt)):
            return None
        return cls(client, model, None if prompt is None else tuple(prompt))

    def to_metadata(self) -> dict[str, Any]:
        return {"client": self.client, "model": self.model,
                "prompt": None if self.prompt is None else list(self.prompt)}

    def over(self, older: Identity | None) -> Identity:
        """This identity, with what it does not know taken from ``older``."""
        if older is None:
            return self
        return Identity(self.client or older.client, self.model or older.model,
                        older.prompt if self.prompt is None else self.prompt)

    def agrees(self, other: Identity | None) -> bool:
        """Whether a call with this identity may belong to a session with ``other``."""
        if other is None:
            return True
        return (_same(self.client, other.client) and _same(self.model, other.model)
                and (self.prompt is None or other.prompt is None
                     or resemblance(self.prompt, other.prompt) >= RESEMBLANCE))


def _same(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a.casefold() == b.casefold()


def client_of(metadata: Mapping[str, Any]) -> str | None:
    """The client family a session's stored identity names, else the client its
    metadata names (an imported conversation: the client whose history it was read
    from, ``claude-code`` or ``chatgpt``); None: none known. The store's listing filters
    by the same rule (``list_sessions``)."""
    identity = Identity.of_session(metadata)
    if identity is not None and identity.client is not None:
        return identity.client
    named = metadata.get("client")
    return named if isinstance(named, str) and named else None
