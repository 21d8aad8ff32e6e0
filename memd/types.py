"""Shared dataclasses: what every backend returns and every layer passes around.

Timestamps are float seconds since the epoch (UTC); a backend converts at its edge
(PostgreSQL stores TIMESTAMPTZ). ``workspace`` is ``None`` for a memory that belongs to
the user everywhere (global), or a workspace name for one project.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar


class Tier(enum.IntEnum):
    """Memory tiers, from ephemeral to permanent (docs/design.md, "Memory tiers")."""

    WORKING = 0  # L0: ephemeral, never durable-critical
    SESSION = 1  # L1: extracted in a session, short TTL
    EPISODIC = 2  # L2: promoted or summaries of compacted history
    SEMANTIC = 3  # L3: durable knowledge, user statements
    PROCEDURAL = 4  # L4: behaviour, instructions


class Scope(enum.IntEnum):
    LOCAL = 0  # bound to its session
    GLOBAL = 1  # the user's, across sessions


class Provenance(enum.IntEnum):
    """How a memory came to be; it sets the memory's authority in the retrieval score."""

    USER_STATED = 0
    SYSTEM_INFERRED = 1
    CORRECTION = 2
    PREFERENCE = 3
    FACT = 4
    INSTRUCTION = 5
    TOOL_OUTPUT = 6
    SUMMARY = 7


class SessionStatus(enum.IntEnum):
    ACTIVE = 1
    PAUSED = 2
    CLOSED = 3
    EXPIRED = 4


ROLES = ("system", "user", "assistant", "tool", "function", "developer")

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an ``__init__`` that sets each field through its
    slot's descriptor, where the generated one calls ``object.__setattr__`` by name per
    field (the way around the frozen ``__setattr__``) at about three times the cost of
    a plain assignment. Same parameters, defaults and immutability; for the types a
    context compile builds by the hundred."""
    params, body = [], []
    env: dict[str, Any] = {"MISSING": MISSING}
    for f in fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only:
            raise TypeError(f"quick_init: {cls.__name__}.{f.name} is not a plain field")
        env[f"set_{f.name}"] = vars(cls)[f.name].__set__
        if f.default is not MISSING:
            env[f"default_{f.name}"] = f.default
            params.append(f"{f.name}=default_{f.name}")
        elif f.default_factory is not MISSING:
            env[f"factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            body.append(f" if {f.name} is MISSING: {f.name} = factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f" set_{f.name}(self, {f.name})")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init: {cls.__name__} has a __post_init__")
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body), env)  # noqa: S102
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    user_id: str
    workspace: str | None
    created_at: float
    updated_at: float
    expires_at: float | None = None
    status: SessionStatus = SessionStatus.ACTIVE
    model: str | None = None
    context_window: int = 8192
    system_prompt_hash: str | None = None
    system_prompt_tokens: int = 0
    max_response_tokens: int = 1024
    turn_count: int = 0
    total_prompt_tokens: int = 0
    total_completion_tokens: int = 0
    total_cost_microcents: int = 0
    summary_text: str | None = None
    summary_token_count: int = 0
    parent_session_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # Bumped by every change to the stored messages other than an append (which shows in
    # turn_count): (turn_count, history_version) names one state of the stored history.
    history_version: int = 0
    # A few words naming what the session is about, from its first user message
    # (memd.engine.conversation.titles); None until then.
    title: str | None = None


def openai_message(
    role: str, content: str | None, name: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None, tool_call_id: str | None = None,
) -> dict[str, Any]:
    """An OpenAI ``ChatCompletionMessageParam`` dict, without empty optional fields."""
    if content is None and role not in ("assistant", "function"):
        content = ""  # OpenAI requires string content for system/developer/user/tool
    out: dict[str, Any] = {"role": role, "content": content}
    if name is not None:
        out["name"] = name
    if tool_calls:
        out["tool_calls"] = tool_calls
    if tool_call_id is not None:
        out["tool_call_id"] = tool_call_id
    return out


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message as a client sends it, before it is stored."""

    role: str
    content: str | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int | None = None
    # ``content`` with its secrets replaced by placeholders (memd.privacy), set by the
    # engine when the sanitizer changed something; a client never sends it
    sanitized: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Message:
    """A stored message of the conversation history: append-only."""

    id: str
    session_id: str
    user_id: str
    turn_index: int
    role: str
    content: str | None
    token_count: int
    created_at: float
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    content_hash: str | None = None
    model: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int | None = None
    is_compressed: bool = False
    compressed_summary_id: str | None = None
    is_pruned: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    chain_hash: str | None = None  # hash of the session's messages up to this one
    # ``content`` with its secrets replaced by placeholders (memd.privacy), None when the
    # sanitizer found none: what everything derived from the message reads (safe_text)
    sanitized: str | None = None

    @property
    def safe_text(self) -> str | None:
        """The text anything derived from this message may use (memories, facts,
        embeddings, full-text indexes, memory blocks, memd-built history): the sanitized
        copy when there is one, else ``content``. ``content`` itself, the client's own
        words, is what its owner reads back and what chain hashes cover."""
        return self.content if self.sanitized is None else self.sanitized

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI ``ChatCompletionMessageParam`` dict, the caller's own:
        a Message may be shared (the history cache keeps one for every compile), so its
        ``tool_calls`` are copied, not handed out."""
        tool_calls = copy.deepcopy(self.tool_calls) if self.tool_calls else None
        return openai_message(self.role, self.content, self.name, tool_calls,
                              self.tool_call_id)


#: Messages ranked for a query: (message, score, the score's parts), best first.
ScoredMessages = list[tuple[Message, float, dict[str, float]]]


@quick_init
@dataclass(frozen=True, slots=True)
class Memory:
    """A long-term memory (docs/design.md, "Storage")."""

    id: str
    user_id: str
    text: str
    content_hash: str
    token_count: int
    created_at: float
    updated_at: float
    workspace: str | None = None
    session_id: str | None = None
    tier: Tier = Tier.SEMANTIC
    scope: Scope = Scope.GLOBAL
    provenance: Provenance = Provenance.USER_STATED
    provenance_message_id: str | None = None
    confidence: float = 0.5
    importance: float = 0.5
    relevance_accumulator: float = 0.0
    access_count: int = 0
    last_accessed_at: float | None = None
    expires_at: float | None = None
    is_active: bool = True
    is_validated: bool = False
    superseded_by: str | None = None
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``summary`` for an episodic summary of compacted history, else ``memory``."""
        return "summary" if self.provenance == Provenance.SUMMARY else "memory"


@dataclass(frozen=True, slots=True)
class Fact:
    """A structured fact: one active value per user+workspace+category+key."""

    id: str
    user_id: str
    category: str
    key: str
    value: str
    confidence: float
    importance: float
    created_at: float
    updated_at: float
    workspace: str | None = None
    is_active: bool = True
    superseded_by: str | None = None
    source_message_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return f"{self.key}: {self.value}"


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which memories a query may see. ``workspaces=None`` means any workspace;
    ``""`` in the tuple stands for the user's global (workspace-less) memories."""

    workspaces: tuple[str, ...] | None = None
    tiers: tuple[Tier, ...] | None = None
    scope: Scope | None = None
    session_id: str | None = None  # LOCAL memories of other sessions are hidden
    tags: tuple[str, ...] = ()
    include_inactive: bool = False
    include_superseded: bool = False
    include_expired: bool = False
    now: float | None = None


@dataclass(frozen=True, slots=True)
class ParagraphSeen:
    """A long paragraph of a user message, as the store has seen it (by its hash,
    ``key``): where it was first seen, in how many sessions so far, and whether this
    sighting counted a session it had not been seen in just before."""

    key: str
    first_session_id: str
    first_message_id: str
    sessions: int
    new_session: bool


@quick_init
@dataclass(frozen=True, slots=True)
class Found:
    """A memory found by retrieval's candidate channels (see ``Store.memory_candidates``):
    its cosine with the query (0.0 when it has no vector yet), its full-text relevance
    in [0, 1] (0.0 unless the keyword channel found it) and whether the query's
    entities led to it."""

    memory: Memory
    similarity: float = 0.0
    keyword: float = 0.0
    entity: bool = False


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a memory, message, summary or fact, with its score breakdown."""

    kind: str
    id: str
    text: str
    score: float
    breakdown: dict[str, float]
    session_id: str | None = None
    workspace: str | None = None
    token_count: int = 0
    created_at: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "text": self.text,
            "score": round(self.score, 6),
            "breakdown": {k: round(v, 6) for k, v in self.breakdown.items()},
            "session_id": self.session_id,
            "workspace": self.workspace,
            "token_count": self.token_count,
            "created_at": self.created_at,
            "metadata": self.metadata,
        }


@quick_init
@dataclass(frozen=True, slots=True)
class ReportItem:
    section: str  # "fact", "memory", "summary", "history"
    kind: str
    id: str
    tokens: int
    score: float | None = None


@dataclass(frozen=True, slots=True)
class ContextReport:
    """What the compiler put in a context, and why (docs/design.md, "Context compilation")."""

    task_type: str
    budget: dict[str, int]
    tokens: dict[str, int]
    items: list[ReportItem]
    history_cut: bool
    total_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_type": self.task_type,
            "budget": dict(self.budget),
            "tokens": dict(self.tokens),
            "history_cut": self.history_cut,
            "total_tokens": self.total_tokens,
            "items": [
                {"section": i.section, "kind": i.kind, "id": i.id, "tokens": i.tokens,
                 "score": None if i.score is None else round(i.score, 6)}
                for i in self.items
            ],
        }


@dataclass(frozen=True, slots=True)
class Context:
    messages: list[dict[str, Any]]
    report: ContextReport


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    kind: str
    payload: dict[str, Any]
    user_id: str | None
    attempts: int
    run_after: float
    created_at: float
    last_error: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    id: str
    user_id: str
    created_at: float
    session_id: str | None = None
    workspace: str | None = None
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_microcents: int = 0
    latency_ms: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageTotal:
    """Usage summed over one group (a day, a model, a workspace or a client): ``key``
    is the group's value (an int day since the epoch, else a name; None: not named)."""

    key: str | int | None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_microcents: int


@dataclass(frozen=True, slots=True)
class User:
    """A user of an authenticated (team) daemon."""

    id: str
    name: str
    created_at: float


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key's record. The key itself is never stored: only its SHA-256."""

    id: str
    user_id: str
    label: str
    created_at: float
    last_used_at: float | None = None
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job as the queue lists it: ``state`` is ``pending`` or ``dead``; ``updated_at``
    is when it last changed (enqueued, claimed for an attempt, or retried)."""

    job: Job
    state: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class WindowInfo:
    """The model's context window as the caller resolved it (None: unknown), the source
    that gave it, for the call report, and the factor from memd's token counts to the
    model's own where it was measured."""

    tokens: int | None
    source: str = "unknown"
    detail: str = ""
    token_scale: float = 1.0
