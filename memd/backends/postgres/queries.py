"""PostgreSQL statement parts the channels build on: memories read with their stats,
the memory filter, and the keyword search text."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from memd.backends.common.columns import JOB_COLUMNS, MEMORY_COLUMNS
from memd.types import MemoryFilter

if TYPE_CHECKING:
    from memd.backends.postgres.partitions import Tables

T = TypeVar("T")
_WORD = re.compile(r"\w+", re.UNICODE)

# Memories are read from the view memory_rows (memories with their memory_stats row, see
# sql/postgres/004_memory_stats.sql) and written to the two tables.
STATS_COLUMNS = "user_id, memory_id, access_count, last_accessed_at, relevance_accumulator"
_STATS_DEFAULTS = {"relevance_accumulator": "0", "access_count": "0", "last_accessed_at": ""}
STATS_UPDATABLE = {"access_count": "access_count"}  # in memory_stats
# The columns of the memories table itself: MEMORY_COLUMNS without the stats.
MEMORY_TABLE_COLUMNS = ", ".join(
    c for c in MEMORY_COLUMNS.split(", ") if c not in _STATS_DEFAULTS)
# MEMORY_COLUMNS over ``r`` (memories columns) left-joined to memory_stats ``s``.
JOINED_COLUMNS = ", ".join(
    (f"coalesce(s.{c}, {_STATS_DEFAULTS[c]})" if _STATS_DEFAULTS[c] else f"s.{c}")
    if c in _STATS_DEFAULTS else f"r.{c}"
    for c in MEMORY_COLUMNS.split(", ")
)
JOB_RETURNING = ", ".join("j." + c for c in JOB_COLUMNS.split(", "))


# The memories that have stats, by a join from memory_stats: ordering by its access_count
# reads the user's most accessed memories from idx_memory_stats_access in order, stopping
# at the LIMIT.
def accessed(t: Tables) -> str:
    return (f"(SELECT m.*, s.access_count AS hits FROM {t.memory_stats} s JOIN {t.memories} m "
            "ON m.user_id = s.user_id AND m.memory_id = s.memory_id) AS accessed")


def with_stats(inner: str, tail: str = "", order: str = "", stats: str = "memory_stats"
               ) -> str:
    """``inner`` (a SELECT of MEMORY_TABLE_COLUMNS then ``tail`` columns, over one user's
    memories) with each row's stats: a primary-key probe per row ``inner`` kept
    (LATERAL with LIMIT 1, which keeps it from being flattened into a join that the
    planner would answer by hashing the user's whole stats). Its one parameter, the user
    id, follows ``inner``'s (it prunes memory_stats to that user's partition when the
    statement is planned). ``stats``: the table the stats are read from."""
    return (f"SELECT {JOINED_COLUMNS}{tail} FROM ({inner}) AS r LEFT JOIN LATERAL (SELECT "
            f"access_count, last_accessed_at, relevance_accumulator FROM {stats} "
            f"WHERE user_id = %s AND memory_id = r.memory_id LIMIT 1) AS s ON true {order}")


def memory_where(user_id: str, flt: MemoryFilter) -> tuple[str, list[Any]]:
    """SQL for ``flt`` over memories (bare column names) and its parameters."""
    clauses = ["user_id = %s"]
    params: list[Any] = [user_id]
    if not flt.include_inactive:
        clauses.append("is_active")
    if not flt.include_superseded:
        clauses.append("superseded_by IS NULL")
    if not flt.include_expired and flt.now is not None:
        clauses.append("(expires_at IS NULL OR expires_at > %s)")
        params.append(flt.now)
    if flt.workspaces is not None:
        clauses.append("workspace = ANY(%s)")
        params.append(list(flt.workspaces))
    if flt.tiers is not None:
        clauses.append("memory_tier = ANY(%s)")
        params.append([int(t) for t in flt.tiers])
    if flt.scope is not None:
        clauses.append("memory_scope = %s")
        params.append(int(flt.scope))
    if flt.session_id is not None:
        clauses.append("(memory_scope = 1 OR session_id = %s)")
        params.append(flt.session_id)
    if flt.tags:
        clauses.append("tags @> %s")
        params.append(list(flt.tags))
    return " AND ".join(clauses), params


def search_text(text: str) -> str | None:
    """``websearch_to_tsquery`` input for free text: its words OR-ed (at most 32). Words are
    ``\\w+`` runs and the operator word "or" is dropped, so no search syntax survives:
    safe with any user text. PostgreSQL's english configuration drops stopwords."""
    words = [w for w in dict.fromkeys(_WORD.findall(text.lower())) if w != "or"][:32]
    return " or ".join(words) or None


def ranked(rows: Sequence[Sequence[Any]], make: Callable[[Sequence[Any]], T]
           ) -> list[tuple[T, float]]:
    """Keyword rows, their rank last: each mapped by ``make``, with its rank relative to
    the best one (1.0 for the top row)."""
    top = max((float(r[-1]) for r in rows), default=0.0) or 1.0
    return [(make(r), float(r[-1]) / top) for r in rows]


# memd_keyword_own_memory_top's filter arguments (probe_filter), typed: a NULL or a list
# of Python ints must name the function's argument types.
PROBE_FILTER = ", %s::boolean, %s::float8, %s::smallint[], %s::smallint, %s::text, %s::text[]"


def probe_filter(flt: MemoryFilter) -> list[Any]:
    """The filter arguments of memd_keyword_own_memory_top (011) after its workspaces,
    as memory_where applies them: with superseded rows, live at, tiers, scope,
    session, tags (None: no filter of that kind)."""
    return [
        flt.include_superseded,
        None if flt.include_expired else flt.now,
        None if flt.tiers is None else [int(t) for t in flt.tiers],
        None if flt.scope is None else int(flt.scope),
        flt.session_id,
        list(flt.tags) if flt.tags else None,
    ]
