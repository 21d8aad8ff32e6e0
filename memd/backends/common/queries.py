"""Statements both backends build at call time from optional parts, for either driver's
placeholder."""

from __future__ import annotations

from typing import Any

from memd.backends.common.columns import CALL_COLUMNS

# Every change to stored messages but an append raises the session's history version.
BUMP_HISTORY_VERSION = ("UPDATE sessions SET history_version = history_version + 1 "
                        "WHERE user_id = ? AND session_id = ?")


def recent_query(
    columns: str, user_id: str, session_id: str, before_turn: int | None, *, mark: str,
    active: str, nonneg: str, table: str = "messages",
) -> tuple[str, list[Any]]:
    """``Store.recent_messages`` as one SQL statement for either backend: the running
    token sum is a window over turn numbers and counts only, and just the messages it
    keeps are read in full. ``mark`` is the placeholder, ``active`` the SQL for an active
    message, ``nonneg`` the two-argument max function, ``table`` what holds the user's
    messages; the caller appends the limit and the budget to the parameters returned."""
    where = f"user_id = {mark} AND session_id = {mark} AND {active}"
    params: list[Any] = [user_id, session_id]
    if before_turn is not None:
        where += f" AND turn_index < {mark}"
        params.append(before_turn)
    tokens = f"{nonneg}(token_count, 0)"
    return (
        f"SELECT {columns} FROM {table} WHERE {where} AND turn_index >= ("
        f"SELECT min(turn_index) FROM (SELECT turn_index, sum({tokens}) OVER (ORDER BY "
        f"turn_index DESC ROWS UNBOUNDED PRECEDING) - {tokens} AS newer FROM (SELECT "
        f"turn_index, token_count FROM {table} WHERE {where} ORDER BY turn_index DESC "
        f"LIMIT {mark}) AS page) AS w WHERE newer <= {mark}) ORDER BY turn_index DESC",
        [*params, *params],
    )


def calls_query(
    user_id: str, *, mark: str, session_id: str | None, workspace: str | None,
    since: float | None, until: float | None, limit: int,
) -> tuple[str, list[Any]]:
    """``Store.list_calls`` as one SQL statement for either backend, with ``mark`` the
    driver's placeholder and ``workspace`` as the backend stores it (None: any). The
    order is the one the (user_id, created_at DESC) index keeps; the call id only breaks
    ties."""
    where = [f"user_id = {mark}"]
    params: list[Any] = [user_id]
    for test, value in (("session_id =", session_id), ("workspace =", workspace),
                        ("created_at >=", since), ("created_at <", until)):
        if value is not None:
            where.append(f"{test} {mark}")
            params.append(value)
    return (f"SELECT {CALL_COLUMNS} FROM calls WHERE {' AND '.join(where)} "
            f"ORDER BY created_at DESC, call_id DESC LIMIT {mark}", [*params, limit])
