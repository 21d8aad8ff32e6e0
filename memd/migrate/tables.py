"""What ``memd migrate`` copies: the declared list :data:`TABLES`, in foreign-key order.

A declaration, apart from the code, so adding a table is one line here; the module
docstring of ``memd.migrate`` says what each field of :class:`Table` means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class VectorSource:
    """A target column whose values live in a sqlite-vec table, joined on ``key``."""

    table: str
    key: str
    column: str = "embedding"


@dataclass(frozen=True)
class Table:
    """One table to copy; see the ``memd.migrate`` docstring for what each field means."""

    name: str
    key: tuple[str, ...]
    skip: frozenset[str] = frozenset()  # source columns derived on PostgreSQL
    exprs: Mapping[str, str] = field(default_factory=dict)  # target column -> SQLite expr
    vectors: Mapping[str, VectorSource] = field(default_factory=dict)
    monthly: str | None = None  # history partitioned by the month of this column
    source: str | None = None  # the source table, when it is not ``name``: the target
    # table is a projection of it (its other columns belong to other targets)
    # rows whose first key starts with this are the database's own once it has them (a
    # daemon that served the target made them): the target's are kept, not compared
    own_prefix: str | None = None

    @property
    def origin(self) -> str:
        """The source table this target table is copied from."""
        return self.source or self.name


TABLES: tuple[Table, ...] = (
    Table("system_prompts", ("prompt_hash",)),
    Table("users", ("user_id",)),
    Table("api_keys", ("key_id",)),
    Table("workspace_members", ("workspace", "user_id")),
    Table("messages", ("user_id", "message_id"), skip=frozenset({"has_embedding"}),
          vectors={"embedding": VectorSource("message_vec", "message_id")},
          monthly="created_at"),
    # After the messages: a daemon serving the target must not see a session before all
    # its messages, since a session's (turn_count, history_version) names the history
    # that a daemon's history cache keeps for it (memd.engine.conversation.history).
    Table("sessions", ("user_id", "session_id")),
    Table("memories", ("user_id", "memory_id"),
          skip=frozenset({"access_count", "last_accessed_at", "relevance_accumulator"}),
          vectors={"embedding": VectorSource("memory_vec", "memory_id")}),
    # PostgreSQL keeps access stats in a narrow table (sql/postgres/004_memory_stats.sql).
    Table("memory_stats", ("user_id", "memory_id"), source="memories"),
    Table("facts", ("user_id", "fact_id")),
    Table("forgotten", ("user_id", "digest")),
    Table("paragraphs_seen", ("user_id", "paragraph_hash")),
    Table("response_sessions", ("user_id", "response_id")),
    Table("context_objects", ("user_id", "session_id", "object_id")),
    Table("fidelity_transitions", ("user_id", "transition_id")),
    Table("fault_history", ("user_id", "fault_id")),
    Table("admission_decisions", ("user_id", "object_id")),
    Table("memory_entities", ("user_id", "entity", "memory_id")),
    Table("usage_log", ("user_id", "usage_id")),
    Table("learning_paused", ("user_id", "workspace")),
    Table("calls", ("call_id",)),
    # The scheduler's recurring jobs (memd.engine.background.schedule) are a daemon's bookkeeping of
    # its own database: a target that a daemon served keeps its own, with their times.
    Table("jobs", ("job_id",), own_prefix="schedule-"),
    Table("embedding_cache", ("model", "content_hash")),
)
