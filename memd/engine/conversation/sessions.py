"""Sessions and the append-only message log: the part of ``Memd`` that writes them
(the context of a call: :mod:`memd.engine.block.context`).

The synchronous part of appending a turn is cheap and model-free, so a chat call never
waits for a model (docs/design.md, "Appending a turn"): validate, count tokens, store the
messages, run the rules-based extractor on each user message and store its facts, all in
one transaction. Embedding the messages and
ingesting the extracted memories (which needs an embedding for dedup) are durable jobs.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from memd.engine import validate as v
from memd.engine.background import compact
from memd.engine.conversation.chains import chain_hashes
from memd.engine.conversation.titles import rule_title
from memd.engine.conversation.turns import as_openai, checked_message
from memd.engine.learning import recurring
from memd.engine.learning.extract import Extraction, extract
from memd.engine.learning.extract.llm import worth_asking
from memd.engine.learning.privacy import redacted
from memd.engine.learning.templates import user_words
from memd.engine.learning.write import (
    fact_item,
    fact_tag,
    forgotten_items,
    memory_item,
)
from memd.errors import InvalidInput, NotFound
from memd.models.tokens import message_tokens
from memd.types import (
    Message,
    Session,
)

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.config import Settings
    from memd.engine.background.jobs import JobRunner
    from memd.engine.conversation.resend import Known
    from memd.engine.learning.privacy import SessionPlaceholders
    from memd.engine.learning.write import FactResult
    from memd.privacy import Sanitizer


MAX_MESSAGES_PER_CALL = 1000
MAX_WINDOW = 100_000_000  # tokens; far above any model, far below SQLite's int64


class SetFact(Protocol):
    """How an append sets the facts a user message states: the engine's checked,
    confidence-gated write (:meth:`memd.engine.memory.Memd.set_fact`)."""

    def __call__(self, user_id: str, category: str, key: str, value: str, *,
                 workspace: str | None = None, confidence: float = 1.0,
                 importance: float = 0.8, is_correction: bool = False,
                 source_message_id: str | None = None,
                 metadata: Mapping[str, Any] | None = None) -> FactResult: ...


class Sessions:
    """Creates sessions and appends their messages for :class:`memd.engine.memory.Memd`
    (which delegates ``create_session``, ``session``, ``append`` and ``messages`` here,
    after checking whole messages): what it writes through, and what it enqueues
    jobs on, are passed in."""

    def __init__(self, store: Store, settings: Settings, jobs: JobRunner,
                 sanitizer: Sanitizer, placeholders: SessionPlaceholders,
                 now: Callable[[], float], set_fact: SetFact) -> None:
        self.store = store
        self.settings = settings
        self.jobs = jobs
        self.sanitizer = sanitizer
        self.placeholders = placeholders
        self.now = now
        self.set_fact = set_fact

    def create_session(
        self, user_id: str, *, workspace: str | None = None, model: str | None = None,
        context_window: int | None = None, max_response_tokens: int | None = None,
        system_prompt: str | None = None, metadata: Mapping[str, Any] | None = None,
        parent_session_id: str | None = None, session_id: str | None = None,
    ) -> Session:
        """Start a session; its system prompt is registered once under its hash."""
        now = self.now()
        uid = v.check_id(user_id, "user_id")
        for what, n in (("context_window", context_window),
                        ("max_response_tokens", max_response_tokens)):
            if n is not None and (not isinstance(n, int) or isinstance(n, bool)
                                  or not 0 <= n <= MAX_WINDOW):
                raise InvalidInput(f"{what} must be an integer between 0 and {MAX_WINDOW}")
        prompt_hash, prompt_tokens = None, 0
        with self.store.transaction():
            if system_prompt is not None:
                text = v.normalize_text(system_prompt, 10 * self.settings.max_text_chars,
                                        "system_prompt")
                prompt_hash = hashlib.sha256(text.encode()).hexdigest()
                prompt_tokens = message_tokens({"role": "system", "content": text}, model)
                self.store.register_system_prompt(prompt_hash, text, prompt_tokens)
            session = Session(
                id=v.check_id(session_id, "session_id") if session_id else uuid.uuid4().hex,
                user_id=uid, workspace=v.check_optional_id(workspace, "workspace"),
                created_at=now, updated_at=now,
                expires_at=now + self.settings.session_ttl_hours * 3600, model=model,
                context_window=context_window or self.settings.default_context_window,
                system_prompt_hash=prompt_hash, system_prompt_tokens=prompt_tokens,
                max_response_tokens=max_response_tokens
                if max_response_tokens is not None
                else self.settings.default_max_response_tokens,
                parent_session_id=v.check_optional_id(parent_session_id, "parent_session_id"),
                metadata=dict(v.check_metadata(metadata)),
            )
            return self.store.create_session(session)

    def session(self, session_id: str, user_id: str) -> Session:
        found = self.store.get_session(v.check_id(user_id, "user_id"),
                                       v.check_id(session_id, "session_id"))
        if found is None:
            raise NotFound(f"no session {session_id!r} for user {user_id!r}")
        return found

    def append(
        self, session_id: str, user_id: str, messages: Sequence[Any], *,
        session: Session | None = None, known: Known | None = None,
    ) -> list[Message]:
        """Append messages to a session (OpenAI dicts or NewMessage), atomically. A caller
        that has just read the session in its own transaction passes it as ``session``,
        and one that has counted and hashed the messages (memd.engine.conversation.resend) what it
        knows of them: neither is worked out again."""
        if isinstance(messages, Mapping | str) or not 1 <= len(messages) <= MAX_MESSAGES_PER_CALL:
            raise InvalidInput(f"messages must be a list of 1-{MAX_MESSAGES_PER_CALL} messages")
        news = [checked_message(m, self.settings.max_message_chars) for m in messages]
        # The stored copy everything derived reads (memd.engine.learning.privacy); placeholders
        # are numbered per session, so the same key is the same placeholder throughout.
        placeholders = self.placeholders.get(v.check_id(user_id, "user_id"),
                                             v.check_id(session_id, "session_id"))
        news = [replace(m, sanitized=redacted(self.sanitizer, m.content, placeholders))
                for m in news]
        hashes = [
            hashlib.sha256(m.content.encode("utf-8")).hexdigest() if m.content else None
            for m in news
        ]
        now = self.now()
        # The session is read in the transaction (or was, in the caller's): one
        # connection and one round of BEGIN/COMMIT for the whole append on PostgreSQL,
        # not a checkout of its own.
        with self.store.transaction():
            if session is None or (session.id, session.user_id) != (session_id, user_id):
                session = self.session(session_id, user_id)
            forms = [as_openai(m) for m in news]
            last = self.store.last_chain_hash(session.user_id, session.id)
            counts, chains = _counted(forms, session.model, last, known)
            # activity keeps the session alive: it expires session_ttl_hours after its
            # last append, not after its start
            stored = self.store.append_messages(
                session.user_id, session.id, news, counts, hashes, now, chains,
                expires_at=now + self.settings.session_ttl_hours * 3600,
            )
            titled = session.title is not None
            pruned: set[str] = set()  # copies of messages a forget pruned, and replies
            previous = None
            for msg in stored:
                if msg.role == "user" and msg.content:
                    words, copy = self._extract_inline(session, msg, now)
                    if copy:  # pruned like the message it copies (memd.engine.learning.forget)
                        pruned.add(msg.id)
                    elif not titled:
                        titled = self._title_inline(session, msg, words, now)
                elif msg.role != "user" and previous in pruned:
                    pruned.add(msg.id)  # a reply to a pruned copy
                previous = msg.id
            if pruned:
                self.store.prune_messages(session.user_id, list(pruned))
            embed_ids = [m.id for m in stored  # ids only: no text in jobs
                         if m.content and m.id not in pruned]
            if embed_ids:
                self.store.enqueue_job(
                    "embed_messages", {"ids": embed_ids}, session.user_id, now
                )
            # A new turn may take the history past compaction's threshold: the job
            # checks (memd.engine.background.compact), the append reads nothing for it.
            grown = replace(session, turn_count=session.turn_count + len(stored))
            if (compact.check_due(session.turn_count, grown.turn_count)
                    and compact.may_need(self.settings, grown)):
                compact.enqueue(self.store, session.user_id, session.id, now)
        return stored

    def _title_inline(self, session: Session, msg: Message, words: str, now: float) -> bool:
        """Title an untitled session from ``msg`` (its user ``words``) by the rules, and
        have the helper's title replace it when the helper is on (memd.engine.conversation.titles);
        whether the session has a title now."""
        title = rule_title(words)
        if title is None:
            return False
        if self.store.set_session_title(session.user_id, session.id, title) \
                and self.jobs.llm_enabled:
            self.store.enqueue_job("title", {"session_id": session.id, "message_id": msg.id},
                                   session.user_id, now)
        return True

    def _extract_inline(self, session: Session, msg: Message,
                        now: float) -> tuple[str, bool]:
        """Extract what a user message says (rules here, the helper in a job); returns
        the user words of its sanitized text, and whether the message is a copy of one
        the user made memd forget something of (its text, stored again)."""
        # A huge message (pasted files) is read only in part: its head and its tail;
        # secrets replaced, so that none becomes a memory or a fact
        text = v.excerpt(msg.safe_text or "", self.settings.max_text_chars)
        words = user_words(text)  # a client's own text is not the user's
        # nor is a long paragraph that recurs across sessions (memd.engine.learning.recurring)
        words = recurring.see(self.store, session.user_id, session.id, msg.id, words,
                              session.workspace, now)
        found = extract(words)
        if self.jobs.llm_enabled and worth_asking(words):
            # The helper model reads it too, off the chat path; the job names the
            # message, whose sanitized text the job reads from the store.
            self.store.enqueue_job("llm_extract", {"message_id": msg.id},
                                   session.user_id, now)
        if not found:
            return words, False
        forgotten = self._forgotten_items(session.user_id, msg.content_hash, found)
        for ex in found:
            if memory_item(ex.text) in forgotten:
                continue
            accepted = None
            tags: tuple[str, ...] = ("extracted", *ex.tags)
            if ex.fact is not None and fact_item(
                    ex.fact.category, ex.fact.key, ex.fact.value) not in forgotten:
                f = ex.fact
                result = self.set_fact(
                    session.user_id, f.category, f.key, f.value, workspace=session.workspace,
                    confidence=f.confidence, importance=ex.importance,
                    is_correction=ex.is_correction, source_message_id=msg.id,
                    metadata={"session_id": session.id},
                )
                if result.action in ("updated", "rejected"):
                    accepted = result.action == "updated"
                tags += (fact_tag(f.category, f.key),)
            self.store.enqueue_job("ingest", {
                "user_id": session.user_id, "text": ex.text, "workspace": session.workspace,
                "session_id": session.id, "tier": int(ex.tier), "scope": int(ex.scope),
                "provenance": int(ex.provenance), "message_id": msg.id,
                "confidence": ex.confidence, "importance": ex.importance, "tags": list(tags),
                "entities": list(ex.entities), "fact_accepted": accepted,
            }, session.user_id, now)
        return words, bool(forgotten)

    def _forgotten_items(self, user_id: str, source_hash: str | None,
                         found: Sequence[Extraction]) -> set[str]:
        """The items (``memory_item`` / ``fact_item``) of ``found`` that the user made
        memd forget when they came from this same message text (see
        :func:`memd.engine.learning.write.forgotten_digest`)."""
        items = {memory_item(ex.text) for ex in found}
        items |= {fact_item(ex.fact.category, ex.fact.key, ex.fact.value)
                  for ex in found if ex.fact is not None}
        return forgotten_items(self.store, user_id, source_hash, items)

    def messages(
        self, session_id: str, user_id: str, *, active_only: bool = False
    ) -> list[Message]:
        session = self.session(session_id, user_id)
        return self.store.get_messages(session.user_id, session.id, active_only=active_only)


def _counted(forms: list[dict[str, Any]], model: str | None, last: str | None,
             known: Known | None) -> tuple[list[int], list[str | None]]:
    """The messages' token counts for ``model`` and chain hashes after ``last``, taken
    from ``known`` where it holds (see :class:`memd.engine.conversation.resend.Known`)."""
    same = known is not None and len(known.forms) == len(forms) \
        and all(k == f for k, f in zip(known.forms, forms, strict=True))
    if known is None or not same:
        return ([message_tokens(f, model) for f in forms], chain_hashes(forms, last))
    counts = [n if n is not None and known.model == model else message_tokens(f, model)
              for n, f in zip(known.counts, forms, strict=True)]
    return counts, known.chains if known.previous == last else chain_hashes(forms, last)
