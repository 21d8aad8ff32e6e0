"""``Memd``: the engine's public face, what ``import memd`` and the CLI use.

It validates every input before anything is written, owns the clock (injectable, so
tests drive time), and wires the store, the embedder and the pure engine functions
together. It is a facade: the parts it owns (``sessions``, ``contexts``, ``erasure``,
``forgetting``, ``jobs``, ``accounts`` and the caches) are each given what they use, and
its public methods delegate to them. It never imports HTTP code.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.backends.base import Store
from memd.config import Settings, load_settings
from memd.engine import validate as v
from memd.engine.accounts import Accounts
from memd.engine.background.jobs import JobRunner
from memd.engine.block.compile import Candidate
from memd.engine.block.context import Contexts, shared_owners, visible_workspaces
from memd.engine.block.inject import StableBlocks
from memd.engine.conversation.history import HistoryCache
from memd.engine.conversation.resend import Known, ResendCache
from memd.engine.conversation.sessions import Sessions
from memd.engine.conversation.side import RecentTurns
from memd.engine.learning.erase import Erasure
from memd.engine.learning.extract import extract, extract_entities
from memd.engine.learning.forget import (
    ForgetPreview,
    Forgetting,
    Forgotten,
    existing_memory,
)
from memd.engine.learning.notes import NoteCache
from memd.engine.learning.privacy import SessionPlaceholders, make_sanitizer
from memd.engine.learning.write import (
    FactResult,
    MemoryDraft,
    WriteResult,
    content_hash,
    fact_tag,
    ingest,
    upsert_fact,
)
from memd.engine.retrieval.retrieve import KINDS, MessageRanking, search
from memd.errors import InvalidInput, NotFound, StorageError
from memd.models.embedder import CachedEmbedder, Embedder
from memd.models.tokens import count_text
from memd.private import private_dir
from memd.registry import embedder_class, store_for
from memd.types import (
    Context,
    Fact,
    Hit,
    Memory,
    MemoryFilter,
    Message,
    Provenance,
    Scope,
    Session,
    Tier,
)

if TYPE_CHECKING:
    import numpy as np

Clock = Callable[[], float]


def _check_text_options(options: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = options.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
            v.check_chars(value, name)


class Memd:
    """A memory engine over one store. Thread-safe as far as its store is."""

    def __init__(
        self, store: Store, embedder: Embedder, settings: Settings | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self._settings = settings or load_settings()
        self.clock = clock
        cache = store if hasattr(store, "get_cached_embeddings") else None
        self.embedder = (
            embedder if isinstance(embedder, CachedEmbedder)
            else CachedEmbedder(embedder, cache)
        )
        self.jobs = JobRunner(store, self.embedder, self.settings, self.now)
        self.history = HistoryCache(self.settings.history_cache_messages)
        self.blocks = StableBlocks()  # each session's last memory block, for stable prompts
        self.notes_cache = NoteCache()  # the notes channel's reads (memd.engine.learning.notes)
        self.resent = ResendCache()  # the last requests' checked messages, for the next ones
        self.recent_turns = RecentTurns()  # what side calls quote (memd.engine.conversation.side)
        self.accounts = Accounts(store, self.now)  # users, keys, workspace members
        # secrets never become memory (memd.engine.learning.privacy); placeholders per session
        self.sanitizer = make_sanitizer(self.settings)
        self.placeholders = SessionPlaceholders()
        self.sessions = Sessions(store, self.settings, self.jobs, self.sanitizer,
                                 self.placeholders, self.now, self.set_fact)
        self.contexts = Contexts(store, self.settings, self.embedder, self.jobs, self.history,
                                 self.notes_cache, self.sanitizer, self.now,
                                 self.sessions.session)
        self.erasure = Erasure(store, self.settings, self.jobs, self.history, self.blocks,
                               self.notes_cache)
        self.forgetting = Forgetting(store, self.history, self.blocks, self.now)

    @classmethod
    def open(
        cls, data_dir: str | Path | None = None, *, settings: Settings | None = None,
        embedder: Embedder | str | None = None, clock: Clock = time.time,
        **overrides: Any,
    ) -> Memd:
        """Open the store in ``data_dir`` (default: settings, ``MEMD_DATA_DIR``, the
        platform's user data dir), creating it on first use."""
        if settings is None:
            settings = load_settings(
                data_dir=Path(data_dir) if data_dir is not None else None, **overrides
            )
        elif data_dir is not None:
            settings = replace(settings, data_dir=Path(data_dir))
        if embedder is None or isinstance(embedder, str):
            name = embedder or settings.embedder
            cls_ = embedder_class(name)
            if name == "minilm-onnx":
                embedder = cls_(settings.embedder_path, query_precision=settings.query_precision,
                                document_precision=settings.document_precision)
            elif name == "minilm":
                embedder = cls_(settings.embedder_path)
            else:
                embedder = cls_()
        assert not isinstance(embedder, str)
        try:  # owner-only: it holds what the user said, secrets included
            private_dir(settings.data_dir)
        except OSError as exc:
            raise StorageError(f"cannot make the data dir {settings.data_dir}: {exc}") from exc
        store = store_for(settings.db).from_settings(settings, embedder.dim)
        return cls(store, embedder, settings, clock)

    def close(self) -> None:
        self.jobs.flush()
        self.store.close()

    def __enter__(self) -> Memd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        return self._settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        """Swap in new settings (a live config reload): the parts that read them on
        every call see them from the next call on."""
        self._settings = value
        self.sessions.settings = self.contexts.settings = self.erasure.settings = value

    # -- helpers ---------------------------------------------------------------------
    def now(self) -> float:
        return float(self.clock())

    def _text(self, text: Any, what: str = "text") -> str:
        return v.normalize_text(text, self.settings.max_text_chars, what)

    def _memory_text(self, text: Any, what: str = "text") -> str:
        """A memory's or a fact's text as stored: checked, normalized, its secrets
        replaced by placeholders (numbered afresh: it belongs to no session)."""
        return self.redact(self._text(text, what))

    def query_vector(self, query: str) -> np.ndarray:
        """The vector of ``query`` as retrieval embeds it (see
        :meth:`Contexts.query_vector`)."""
        return self.contexts.query_vector(query)

    def redact(self, text: str) -> str:
        """``text`` with its secrets replaced by placeholders (numbered afresh)."""
        return self.contexts.redact(text)

    # -- memories --------------------------------------------------------------------
    def add(
        self, text: str, user_id: str, *, workspace: str | None = None,
        tier: Tier | int | str = Tier.SEMANTIC, scope: Scope | str = Scope.GLOBAL,
        tags: Iterable[str] | None = None, provenance: Provenance | str = "user_stated",
        confidence: float = 1.0, importance: float = 0.5, session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None, expires_at: float | None = None,
        entities: Iterable[str] | None = None,
    ) -> WriteResult:
        """Store a memory through the full write path (dedup, merge, conflicts); its
        secrets are replaced by placeholders first."""
        clean = self._memory_text(text)
        tier_ = v.check_tier(tier)
        scope_ = v.check_scope(scope)
        if scope_ == Scope.LOCAL and session_id is None:
            raise InvalidInput("a local memory needs a session_id")
        draft = MemoryDraft(
            user_id=v.check_id(user_id, "user_id"), text=clean,
            workspace=v.check_optional_id(workspace, "workspace"),
            session_id=v.check_optional_id(session_id, "session_id"), tier=tier_,
            scope=scope_, provenance=v.check_provenance(provenance),
            confidence=v.check_unit(confidence, "confidence"),
            importance=v.check_unit(importance, "importance"), tags=v.check_tags(tags),
            entities=tuple(entities) if entities is not None else extract_entities(clean),
            metadata=dict(v.check_metadata(metadata)), expires_at=expires_at,
        )
        if draft.session_id is not None and self.store.get_session(
            draft.user_id, draft.session_id
        ) is None:
            raise NotFound(f"no session {draft.session_id!r} for user {draft.user_id!r}")
        now = self.now()
        self.blocks.forget_user(draft.user_id)
        with self.store.transaction():
            # A statement of a keyed fact ("my name is ...") also sets the fact, and its
            # memory carries the fact's tag so a later value supersedes it.
            accepted: bool | None = None
            tags = list(draft.tags)
            for ex in extract(clean):
                if ex.fact is None:
                    continue
                f = ex.fact
                res = upsert_fact(
                    self.store, draft.user_id, draft.workspace, f.category, f.key, f.value,
                    f.confidence, ex.importance, now, is_correction=ex.is_correction,
                )
                if accepted is None and res.action in ("updated", "rejected"):
                    accepted = res.action == "updated"
                tags.append(fact_tag(f.category, f.key))
            draft = replace(draft, tags=tuple(dict.fromkeys(tags)), fact_accepted=accepted)
            return ingest(self.store, self.embedder, self.settings, draft, now)

    def get(self, memory_id: str, user_id: str) -> Memory:
        return existing_memory(self.store, memory_id, user_id)

    def update(self, memory_id: str, user_id: str, **changes: Any) -> Memory:
        """Edit a memory's text, tier, scope, tags, importance, confidence or metadata."""
        current = self.get(memory_id, user_id)
        allowed = {"text", "tier", "scope", "tags", "importance", "confidence", "metadata",
                   "expires_at"}
        bad = set(changes) - allowed
        if bad:
            raise InvalidInput(f"cannot change {sorted(bad)}; changeable: {sorted(allowed)}")
        fields: dict[str, Any] = {"updated_at": self.now()}
        vector = None
        if "text" in changes:
            text = self._memory_text(changes["text"])
            fields.update(text=text, content_hash=content_hash(text),
                          token_count=count_text(text))
            vector = self.embedder.embed([text])[0]
        if "tier" in changes:
            fields["tier"] = v.check_tier(changes["tier"])
        if "scope" in changes:
            fields["scope"] = v.check_scope(changes["scope"])
        if "tags" in changes:
            fields["tags"] = v.check_tags(changes["tags"])
        for unit in ("importance", "confidence"):
            if unit in changes:
                fields[unit] = v.check_unit(changes[unit], unit)
        if "metadata" in changes:
            fields["metadata"] = v.check_metadata(changes["metadata"])
        if "expires_at" in changes:
            fields["expires_at"] = changes["expires_at"]
        self.blocks.forget_user(current.user_id)
        return self.store.update_memory(current.user_id, current.id, vector, **fields)

    def list(
        self, user_id: str, *, workspace: str | None = None, limit: int = 100,
        offset: int = 0, include_inactive: bool = False, tier: Any = None,
    ) -> list[Memory]:
        flt = MemoryFilter(
            workspaces=None if workspace is None else visible_workspaces(workspace),
            tiers=None if tier is None else (v.check_tier(tier),),
            include_inactive=include_inactive, include_superseded=include_inactive,
            now=self.now(),
        )
        return self.store.list_memories(v.check_id(user_id, "user_id"), flt, limit, offset)

    def search(
        self, query: str, user_id: str, *, k: int = 10, kinds: Sequence[str] | None = None,
        workspace: str | None = None, all_workspaces: bool | None = None,
        tiers: Sequence[Any] | None = None, tags: Iterable[str] | None = None,
        session_id: str | None = None, include_inactive: bool = False,
    ) -> builtins.list[Hit]:
        """Hybrid search over memories, summaries, messages and facts.

        With no ``workspace`` the search spans all of the user's workspaces; with one,
        it sees that workspace plus the user's global memories."""
        q = self._text(query, "query")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1000:
            raise InvalidInput(f"k must be an integer between 1 and 1000, not {k!r}")
        kinds_ = tuple(kinds) if kinds else ("memory", "summary", "fact")
        bad = set(kinds_) - set(KINDS)
        if bad:
            raise InvalidInput(f"unknown kinds {sorted(bad)}; use {', '.join(KINDS)}")
        ws = v.check_optional_id(workspace, "workspace")
        spans_all = all_workspaces if all_workspaces is not None else ws is None
        flt = MemoryFilter(
            workspaces=None if spans_all else visible_workspaces(ws),
            tiers=None if tiers is None else tuple(v.check_tier(t) for t in tiers),
            tags=v.check_tags(tags), include_inactive=include_inactive,
            include_superseded=include_inactive, now=self.now(),
            session_id=v.check_optional_id(session_id, "session_id"),
        )
        uid = v.check_id(user_id, "user_id")
        with self.store.read_batch():
            return search(
                self.store, self.embedder, uid, q, k, kinds_, flt, self.settings.weights,
                self.now(), session_id=flt.session_id,
                shared=() if spans_all else shared_owners(self.store, uid, ws, self.now()),
                ranking=MessageRanking.of(self.settings),
            )

    # -- sessions --------------------------------------------------------------------
    # Whole messages and model names are checked here, before Sessions writes, so
    # that what one backend would store and another refuse is refused on every backend.
    def create_session(self, user_id: str, **options: Any) -> Session:
        """Start a session (see :meth:`Sessions.create_session`)."""
        _check_text_options(options, "model")
        return self.sessions.create_session(user_id, **options)

    def session(self, session_id: str, user_id: str) -> Session:
        """The user's session ``session_id``; NotFound when there is none."""
        return self.sessions.session(session_id, user_id)

    def messages(self, session_id: str, user_id: str, *,
                 active_only: bool = False) -> builtins.list[Message]:
        """A session's messages in order (see :meth:`Sessions.messages`)."""
        return self.sessions.messages(session_id, user_id, active_only=active_only)

    def append(self, session_id: str, user_id: str, messages: Sequence[Any], *,
               session: Session | None = None,
               known: Known | None = None) -> builtins.list[Message]:
        """Append messages to a session, atomically (see :meth:`Sessions.append`)."""
        if isinstance(messages, list | tuple):
            messages = [v.check_message(m, i) for i, m in enumerate(messages)]
        return self.sessions.append(session_id, user_id, messages, session=session, known=known)

    def context(self, user_id: str, **options: Any) -> Context:
        """Compile a context (see :meth:`Contexts.context`)."""
        messages = options.get("messages")
        if isinstance(messages, list | tuple):
            options["messages"] = [v.check_message(m, i) for i, m in enumerate(messages)]
        _check_text_options(options, "query", "model")
        return self.contexts.context(user_id, **options)

    def memory_candidates(
        self, user_id: str, query: str, *, session: Session | None = None,
        workspace: str | None = None, exclude_session: bool = False,
        sent_chains: Iterable[str] | None = None,
    ) -> tuple[builtins.list[Candidate], builtins.list[Candidate]]:
        """The facts and memories a memory block for ``query`` may hold (see
        :meth:`Contexts.memory_candidates`)."""
        return self.contexts.memory_candidates(
            user_id, query, session=session, workspace=workspace,
            exclude_session=exclude_session, sent_chains=sent_chains)

    def record_used(self, user_id: str, used: Sequence[Candidate]) -> None:
        """Record access statistics of what a call injected, off the call's path."""
        self.contexts.record_used(user_id, used)

    def forget(self, memory_id: str, user_id: str | None = None) -> Memory:
        """Delete a memory and all derived from it (see :meth:`Forgetting.forget`)."""
        return self.forgetting.forget(memory_id, user_id)

    def forget_with_sources(self, memory_id: str, user_id: str | None = None) -> Forgotten:
        """:meth:`forget`, with the facts and messages it took (see :class:`Forgetting`)."""
        return self.forgetting.forget_with_sources(memory_id, user_id)

    # -- facts -----------------------------------------------------------------------
    def set_fact(
        self, user_id: str, category: str, key: str, value: str, *,
        workspace: str | None = None, confidence: float = 1.0, importance: float = 0.8,
        is_correction: bool = False, source_message_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> FactResult:
        """Set a structured fact (one active value per category/key; confidence-gated)."""
        category, key = v.fact_key(category, key)
        self.blocks.forget_user(user_id)
        return upsert_fact(
            self.store, v.check_id(user_id, "user_id"),
            v.check_optional_id(workspace, "workspace"), category, key,
            self._memory_text(value, "value"),
            v.check_unit(confidence, "confidence"), v.check_unit(importance, "importance"),
            self.now(), is_correction=is_correction, source_message_id=source_message_id,
            metadata=dict(v.check_metadata(metadata)) if metadata else None,
        )

    def facts(
        self, user_id: str, *, workspace: str | None = None, include_history: bool = False
    ) -> builtins.list[Fact]:
        return self.store.get_facts(
            v.check_id(user_id, "user_id"),
            workspaces=None if workspace is None else visible_workspaces(workspace),
            active_only=not include_history,
        )

    def forget_fact(self, user_id: str, category: str, key: str, *,
                    workspace: str | None = None) -> builtins.list[Fact]:
        """Delete a fact and all derived from it (see :meth:`Forgetting.forget_fact`)."""
        return self.forgetting.forget_fact(user_id, category, key, workspace=workspace)

    def forget_fact_with_sources(self, user_id: str, category: str, key: str, *,
                                 workspace: str | None = None) -> Forgotten:
        """:meth:`forget_fact`, with the memories and messages it took."""
        return self.forgetting.forget_fact_with_sources(user_id, category, key,
                                                        workspace=workspace)

    def forget_preview(self, memory_id: str, user_id: str) -> ForgetPreview:
        """What :meth:`forget_with_sources` would remove; nothing is changed."""
        return self.forgetting.forget_preview(memory_id, user_id)

    def forget_fact_preview(self, user_id: str, category: str, key: str, *,
                            workspace: str | None = None) -> ForgetPreview:
        """What :meth:`forget_fact_with_sources` would remove; nothing is changed."""
        return self.forgetting.forget_fact_preview(user_id, category, key,
                                                   workspace=workspace)

    # -- erasure ---------------------------------------------------------------------
    def erase_user(self, user_id: str) -> dict[str, int]:
        """Delete every row of the user (see :meth:`Erasure.erase_user`)."""
        return self.erasure.erase_user(user_id)

    def erase_session(self, user_id: str, session_id: str) -> dict[str, int]:
        """Delete a session and what derives from it (see :meth:`Erasure.erase_session`)."""
        return self.erasure.erase_session(user_id, session_id)

    def erase_message(self, user_id: str, session_id: str, message_id: str) -> dict[str, int]:
        """Delete a message and what derives from it (see :meth:`Erasure.erase_message`)."""
        return self.erasure.erase_message(user_id, session_id, message_id)

    def deep_scrub(self) -> builtins.list[str]:
        """Rewrite the store's files (see :meth:`Erasure.deep_scrub`)."""
        return self.erasure.deep_scrub()

    def delete_call(self, user_id: str, call_id: str) -> None:
        """Delete one of the user's call reports (NotFound when there is none)."""
        self.erasure.delete_call(user_id, call_id)

    # -- jobs ------------------------------------------------------------------------
    def call(self, user_id: str, call_id: str) -> dict[str, Any]:
        """What memd injected into one proxied call, and why (its report)."""
        found = self.store.get_call(user_id, v.check_id(call_id, "call_id"))
        if found is None:
            raise NotFound(f"no call {call_id!r} of user {user_id!r}")
        return found

    def calls(self, user_id: str, *, session_id: str | None = None,
              workspace: str | None = None, since: float | None = None,
              until: float | None = None, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """The user's proxied calls, newest first (see :meth:`Store.list_calls`)."""
        return self.store.list_calls(
            user_id, session_id=v.check_optional_id(session_id, "session"),
            workspace=v.check_optional_id(workspace, "workspace"), since=since, until=until,
            limit=limit)

    def status(self) -> dict[str, Any]:
        """What the store holds, for ``memd status`` and ``/health``."""
        return {"store": type(self.store).__name__, "schema": self.store.schema_version(),
                "users": len(self.store.memory_users()),
                "pending_jobs": self.store.pending_jobs()}

    def check_servable(self) -> None:
        """Raise unless the store is whole: a database whose ``memd migrate`` did not
        finish lacks rows, or the vector indexes without which search finds nothing."""
        tables = self.store.unfinished_copy()
        if tables:
            raise StorageError(
                f"memd migrate into this database did not finish ({', '.join(tables)} may "
                "lack rows, or the vector indexes without which search finds nothing): "
                "run the same memd migrate again to finish it")

    def pending_jobs(self) -> int:
        return self.store.pending_jobs()

    def run_jobs(self, limit: int = 1000) -> int:
        """Run due background jobs (embedding backfill, extraction ingest, access stats)
        now; the daemon does this continuously. Returns how many ran."""
        return self.jobs.run_due(limit)

    def new_id(self) -> str:
        return uuid.uuid4().hex


