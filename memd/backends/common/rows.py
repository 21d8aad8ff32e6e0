"""Rows of the :mod:`.columns` lists as memd's dataclasses, written once for both
drivers: each backend makes its mappers with the decoders its driver needs for JSON
(SQLite hands JSON over as text, psycopg as bytes) and string arrays (SQLite: JSON text,
PostgreSQL: a list). Flags compare with 1, which a SQLite 0/1 and a PostgreSQL boolean
both answer as a bool; both store "no workspace" as ''."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memd.types import (
    Fact,
    Job,
    Memory,
    Message,
    Provenance,
    Scope,
    Session,
    SessionStatus,
    Tier,
    Usage,
)

Row = Sequence[Any]
# Stored enum values back to members, by index (each enum's values are 0, 1, ...): a
# tuple lookup, where calling the enum costs about as much as the rest of a row's mapping.
TIERS = tuple(Tier)
SCOPES = tuple(Scope)
PROVENANCES = tuple(Provenance)
assert all(m.value == i for e in (TIERS, SCOPES, PROVENANCES) for i, m in enumerate(e))


def load_json_text(text: str) -> Any:
    """json.loads with a fast path for the empty values most rows hold."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def load_json_bytes(data: bytes) -> Any:
    """json.loads, with the most common value (metadata ``{}``) made without it."""
    return {} if data == b"{}" else json.loads(data)


@functools.lru_cache(maxsize=4096)
def strings_from_json(text: str) -> tuple[str, ...]:
    """A JSON array of strings (tags, entities) as a tuple; most rows repeat a few
    values, and a tuple can be shared."""
    return tuple(load_json_text(text))


@dataclass(frozen=True, slots=True)
class RowMappers:
    session: Callable[[Row], Session]
    message: Callable[[Row], Message]
    memory: Callable[[Row], Memory]
    fact: Callable[[Row], Fact]
    job: Callable[[Row], Job]
    usage: Callable[[Row], Usage]
    call: Callable[[Row, str], dict[str, Any]]


def row_mappers(load: Callable[[Any], Any], strings: Callable[[Any], tuple[str, ...]]
                ) -> RowMappers:
    """The mappers for a driver whose JSON values ``load`` decodes and whose string
    arrays ``strings`` makes tuples of."""

    def session(r: Row) -> Session:
        return Session(
            id=r[0], user_id=r[1], workspace=r[2] or None, created_at=r[3], updated_at=r[4],
            expires_at=r[5], status=SessionStatus(r[6]), model=r[7], context_window=r[8],
            system_prompt_hash=r[9], system_prompt_tokens=r[10], max_response_tokens=r[11],
            turn_count=r[12], total_prompt_tokens=r[13], total_completion_tokens=r[14],
            total_cost_microcents=r[15], summary_text=r[16], summary_token_count=r[17],
            parent_session_id=r[18], metadata=load(r[19]), history_version=r[20],
            title=r[21],
        )

    def message(r: Row) -> Message:
        return Message(
            id=r[0], session_id=r[1], user_id=r[2], turn_index=r[3], role=r[4], content=r[5],
            token_count=r[6], created_at=r[7], name=r[8],
            tool_calls=load(r[9]) if r[9] is not None else None, tool_call_id=r[10],
            content_hash=r[11], model=r[12], finish_reason=r[13], prompt_tokens=r[14],
            completion_tokens=r[15], latency_ms=r[16], is_compressed=r[17] == 1,
            compressed_summary_id=r[18], is_pruned=r[19] == 1, metadata=load(r[20]),
            chain_hash=r[21], sanitized=r[22],
        )

    def memory(r: Row) -> Memory:
        return Memory(
            id=r[0], user_id=r[1], workspace=r[2] or None, session_id=r[3], tier=TIERS[r[4]],
            scope=SCOPES[r[5]], text=r[6], content_hash=r[7], provenance=PROVENANCES[r[8]],
            provenance_message_id=r[9], confidence=r[10], importance=r[11],
            relevance_accumulator=r[12], access_count=r[13], last_accessed_at=r[14],
            created_at=r[15], updated_at=r[16], expires_at=r[17], is_active=r[18] == 1,
            is_validated=r[19] == 1, token_count=r[20], superseded_by=r[21],
            tags=strings(r[22]), entities=strings(r[23]), metadata=load(r[24]),
        )

    def fact(r: Row) -> Fact:
        return Fact(
            id=r[0], user_id=r[1], category=r[2], key=r[3], value=r[4], confidence=r[5],
            importance=r[6], created_at=r[7], updated_at=r[8], workspace=r[9] or None,
            is_active=r[10] == 1, superseded_by=r[11], source_message_id=r[12],
            metadata=load(r[13]),
        )

    def job(r: Row) -> Job:
        return Job(id=r[0], kind=r[1], payload=load(r[2]), user_id=r[3], attempts=r[4],
                   run_after=r[5], created_at=r[6], last_error=r[7])

    def usage(r: Row) -> Usage:
        return Usage(id=r[0], user_id=r[1], session_id=r[2], workspace=r[3] or None,
                     model=r[4], prompt_tokens=r[5], completion_tokens=r[6],
                     cost_microcents=r[7], latency_ms=r[8], created_at=r[9],
                     metadata=load(r[10]))

    def call(r: Row, user_id: str) -> dict[str, Any]:
        """A CALL_COLUMNS row as ``Store.get_call`` returns it."""
        return {"id": r[0], "user_id": user_id, "session_id": r[1],
                "workspace": r[2] or None, "model": r[3], "created_at": r[4],
                "status": r[5], "report": load(r[6]), "metadata": load(r[7])}

    return RowMappers(session, message, memory, fact, job, usage, call)
