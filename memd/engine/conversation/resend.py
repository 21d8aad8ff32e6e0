"""What an agent sends again: the work done on its last request's messages, reused.

An agent resends its whole history on every step: step ``i + 1``'s messages are step
``i``'s, then the model's reply and the new tool results. Each message of a request is
checked and cleaned (:mod:`memd.engine.validate`), chain-hashed
(:mod:`memd.engine.conversation.chains`), counted in tokens and, back to the newest one with the
user's own words, read for the retrieval query (a Cline-like agent's tool results are
user messages, each of them redacted and read before the user's request is reached):
work that grows with the history (a long session's request is ~100k tokens) while only
its last few messages are new. So the results for each of a user's last requests are
kept, and a message equal to the one at the same place in such a request, all the
messages before it equal too, takes them from there: only the new messages are checked,
hashed, counted and read.

An incoming message is compared with the cleaned copy kept of the earlier one. They are
equal only when the incoming message has nothing to clean (a NUL or a lone surrogate
becomes U+FFFD, a NaN null), so what is taken is what checking it again would give; a
message that had something cleaned is simply checked again. The copies are memd's own,
never the caller's objects, so a caller that changes its messages after a call changes
nothing here; callers read them and never change them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine import validate as v
from memd.engine.conversation import chains
from memd.engine.conversation.turns import message_words, query_of
from memd.models.tokens import count_joined, message_tokens
from memd.types import openai_message


@dataclass(frozen=True, slots=True)
class Known:
    """What was worked out already of messages about to be appended, so that the append
    does not work it out again: each one's token count for ``model`` and its chain hash
    (the chain going on from ``previous``), and its OpenAI form ``forms`` as the store
    keeps it (content parts joined into their text, as the hash reads them). The append
    takes them only where they hold: for messages whose stored form is that form, the
    counts for a session of that model, the hashes when the session's newest stored hash
    is ``previous``. A message of content parts is counted as its stored text from the
    counts its parts were given (:func:`memd.models.tokens.count_joined`)."""

    forms: list[dict[str, Any]]
    counts: list[int | None]
    chains: list[str | None]
    model: str | None
    previous: str | None


class Resent:
    """One request's messages as memd reads them: ``clean`` (each one checked, with what
    no store can hold replaced: what is hashed, stored and counted) and their chain
    ``hashes`` (None for system messages); their token counts and user words are worked
    out when first asked for, and kept for the requests that resend them. The first
    ``reused`` messages were those of an earlier request of the user's."""

    __slots__ = ("clean", "hashes", "reused", "previous_query", "_asked", "_known", "_lock")

    def __init__(self, clean: list[dict[str, Any]], hashes: list[str | None],
                 reused: int = 0, known: dict[Hashable, list[Any]] | None = None,
                 previous_query: str | None = None) -> None:
        self.clean = clean
        self.hashes = hashes
        self.reused = reused  # how many of the first messages an earlier request had
        self.previous_query = previous_query  # that request's query, if it was asked for
        self._asked: str | None = None
        self._known = known or {}  # per kind of work: one result (or None) per message
        self._lock = threading.Lock()

    def tokens(self, model: str | None) -> int:
        """The messages' tokens in a prompt for ``model`` (see
        :func:`memd.models.tokens.message_tokens`)."""
        return sum(self.counts(model))

    def counts(self, model: str | None) -> list[int]:
        """Each message's tokens in a prompt for ``model``."""
        key = ("tokens", model)
        known = self._get(key)
        if None in known:
            known = [message_tokens(m, model) if n is None else n
                     for m, n in zip(self.clean, known, strict=True)]
            self._put(key, known)
        return known

    def query(self, max_chars: int, redact: Callable[[str], str] | None) -> str | None:
        """:func:`memd.engine.conversation.turns.last_user_text` of the non-system messages: the
        user's words in the newest user message that has any, as the retrieval query."""
        key = ("words", max_chars, redact)
        known = self._get(key)
        found = None
        for i in range(len(self.clean) - 1, -1, -1):
            if self.clean[i].get("role") in chains.SYSTEM_ROLES:
                continue
            if known[i] is None:
                known[i] = message_words(self.clean[i], max_chars, redact)
            if known[i]:
                found = known[i]
                break
        self._put(key, known)
        self._asked = None if found is None else query_of(found)
        return self._asked

    def known(self, new: Sequence[Mapping[str, Any]], model: str | None) -> Known | None:
        """What is known of ``new``, the last non-system messages of the request (the
        same objects as in :attr:`clean`), for an append to a session of ``model``;
        None when they are not those."""
        at = [i for i, m in enumerate(self.clean) if m.get("role") not in chains.SYSTEM_ROLES]
        at = at[len(at) - len(new):] if new else []
        if not new or len(at) != len(new) \
                or any(self.clean[i] is not m for i, m in zip(at, new, strict=True)):
            return None
        counts = self.counts(model)
        previous = next((h for h in reversed(self.hashes[:at[0]]) if h is not None), None)
        forms = [openai_message(str(m.get("role")), _stored_content(m.get("content")),
                                m.get("name"), m.get("tool_calls"), m.get("tool_call_id"))
                 for m in new]
        return Known(forms,
                     [_stored_tokens(f, m["content"], model) if isinstance(m.get("content"), list)
                      else counts[i] for i, m, f in zip(at, new, forms, strict=True)],
                     [self.hashes[i] for i in at], model, previous)

    def prefix(self, n: int, size: int) -> dict[Hashable, list[Any]]:
        """What is known of the first ``n`` messages, for a request of ``size`` messages
        that starts with them."""
        with self._lock:
            return {key: [*done[:n], *[None] * (size - n)] for key, done in self._known.items()}

    def _get(self, key: Hashable) -> list[Any]:
        with self._lock:
            return list(self._known.get(key) or [None] * len(self.clean))

    def _put(self, key: Hashable, values: list[Any]) -> None:
        with self._lock:
            self._known[key] = values


class ResendCache:
    """The last requests' :class:`Resent`, per user, to build the next ones from.
    Bounded: the newest ``max_requests`` requests of all users; a request that continues
    one of them takes its place."""

    def __init__(self, max_requests: int = 16) -> None:
        self.max_requests = max_requests
        self._lock = threading.Lock()
        self._last: OrderedDict[int, tuple[str, Resent]] = OrderedDict()
        self._serial = 0

    def read(self, user_id: str, messages: Sequence[Mapping[str, Any]]) -> Resent:
        """``messages`` checked, cleaned and hashed, reusing the longest equal prefix of
        one of the user's last requests. Raises InvalidInput, naming the message by its
        index, for a message that cannot be stored."""
        with self._lock:
            mine = [(key, r) for key, (u, r) in reversed(self._last.items()) if u == user_id]
        best, base, key = 0, None, None
        for k, old in mine:  # newest first: usually the one this request continues
            size = len(old.clean)
            if size <= best or len(messages) <= best or old.clean[best] != messages[best]:
                continue  # cannot share more than ``best`` messages
            n = _common_prefix(old.clean, messages)
            if n > best:
                best, base, key = n, old, k
        clean = base.clean[:best] if base is not None else []
        clean += [v.check_message(v.sanitized(m), i)
                  for i, m in enumerate(messages[best:], start=best)]
        reused = base.hashes[:best] if base is not None else []
        previous = next((h for h in reversed(reused) if h is not None), None)
        hashes = reused + chains.chain_hashes(clean[best:], previous)
        out = Resent(clean, hashes, best,
                     base.prefix(best, len(clean)) if base is not None else None,
                     base._asked if base is not None else None)
        with self._lock:
            if key is not None:
                self._last.pop(key, None)
            self._serial += 1
            self._last[self._serial] = (user_id, out)
            while len(self._last) > self.max_requests:
                self._last.popitem(last=False)
        return out


def _stored_tokens(form: Mapping[str, Any], parts: list[Any], model: str | None) -> int:
    """The tokens of ``form``, a message sent in content ``parts`` as it is stored (its
    text parts joined), from the counts its parts were given for the prompt."""
    return (message_tokens({**form, "content": None}, model)
            + count_joined(chains.content_texts(parts), model))


def _stored_content(content: Any) -> Any:
    """A message's content as it is stored: content parts as their text."""
    return chains.content_text(content) if isinstance(content, list) else content


def _common_prefix(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
