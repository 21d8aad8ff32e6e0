"""``Memd``: the engine's public face, what ``import memd`` and the CLI use.

It validates every input before anything is written, owns the clock (injectable, so
tests drive time), and wires the store, the embedder and the pure engine functions
together. It never imports HTTP code.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from memd.backends.base import Store
from memd.config import Settings, load_settings
from memd.engine import validate as v
from memd.engine.accounts import Accounts
from memd.engine.background.jobs import JobRunner
from memd.engine.block.context import ContextMixin
from memd.engine.block.inject import StableBlocks
from memd.engine.conversation.history import HistoryCache
from memd.engine.conversation.resend import Known, ResendCache
from memd.engine.conversation.sessions import SessionsMixin
from memd.engine.conversation.side import RecentTurns
from memd.engine.learning.erase import ErasureMixin
from memd.engine.learning.extract import extract, extract_entities
from memd.engine.learning.forget import ForgetMixin
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
from memd.engine.retrieval.retrieve import KINDS, search
from memd.engine.retrieval.rounds import rule_of
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

Clock = Callable[[], float]


def _check_text_options(options: Mapping[str, Any], *names: str) -> None:
    for name in names:
        value = options.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
            v.check_chars(value, name)


class Memd(SessionsMixin, ContextMixin, ErasureMixin, ForgetMixin):
    """A memory engine over one store. Thread-safe as far as its store is."""

    def __init__(
        self, store: Store, embedder: Embedder, settings: Settings | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store = store
        self.settings = settings or load_settings()
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
                embedder = cls_(settings.embedder_path,
                                query_precision=settings.query_precision)
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

    # -- helpers ---------------------------------------------------------------------
    def now(self) -> float:
        return float(self.clock())

    def _text(self, text: Any, what: str = "text") -> str:
        return v.normalize_text(text, self.settings.max_text_chars, what)

    def _memory_text(self, text: Any, what: str = "text") -> str:
        """A memory's or a fact's text as stored: checked, normalized, its secrets
        replaced by placeholders (numbered afresh: it belongs to no session)."""
        return self.redact(self._text(text, what))

    def shared_owners(self, user_id: str, workspace: str | None) -> list[tuple[str, MemoryFilter]]:
        """The other members of ``workspace`` when ``user_id`` is one, each with the
        filter of what they share: their global memories of that workspace. Membership
        exists only in authenticated (team) mode, so in local mode this is empty."""
        if workspace is None:
            return []
        members = self.store.workspace_members(workspace)
        if user_id not in members:
            return []
        flt = MemoryFilter(workspaces=(workspace,), scope=Scope.GLOBAL, now=self.now())
        return [(other, flt) for other in members if other != user_id]

    def visible_workspaces(self, workspace: str | None) -> tuple[str, ...]:
        """What a call scoped to ``workspace`` sees: its own memories plus the user's
        global ones (no workspace)."""
        return ("",) if workspace is None else ("", workspace)

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
        mem = self.store.get_memory(v.check_id(user_id, "user_id"), v.check_id(memory_id, "id"))
        if mem is None:
            raise NotFound(f"no memory {memory_id!r} for user {user_id!r}")
        return mem

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
            workspaces=None if workspace is None else self.visible_workspaces(workspace),
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
            workspaces=None if spans_all else self.visible_workspaces(ws),
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
                shared=() if spans_all else self.shared_owners(uid, ws),
                second=rule_of(self.settings.search_second_round,
                               self.settings.search_expand_kinds),
            )

    # -- sessions --------------------------------------------------------------------
    # Whole messages and model names are checked here, before SessionsMixin writes, so
    # that what one backend would store and another refuse is refused on every backend.
    def create_session(self, user_id: str, **options: Any) -> Session:
        """Start a session (see :meth:`SessionsMixin.create_session`)."""
        _check_text_options(options, "model")
        return super().create_session(user_id, **options)

    def append(self, session_id: str, user_id: str, messages: Sequence[Any], *,
               session: Session | None = None,
               known: Known | None = None) -> builtins.list[Message]:
        """Append messages to a session, atomically (see :meth:`SessionsMixin.append`)."""
        if isinstance(messages, list | tuple):
            messages = [v.check_message(m, i) for i, m in enumerate(messages)]
        return super().append(session_id, user_id, messages, session=session, known=known)

    def context(self, user_id: str, **options: Any) -> Context:
        """Compile a context (see :meth:`SessionsMixin.context`)."""
        messages = options.get("messages")
        if isinstance(messages, list | tuple):
            options["messages"] = [v.check_message(m, i) for i, m in enumerate(messages)]
        _check_text_options(options, "query", "model")
        return super().context(user_id, **options)

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
            workspaces=None if workspace is None else self.visible_workspaces(workspace),
            active_only=not include_history,
        )

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


