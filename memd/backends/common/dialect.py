"""SQL written once for both drivers: statements are written with ``?`` marks and the
spellings below, and each backend swaps in its own."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Dialect:
    mark: str  # the driver's parameter placeholder
    true: str  # boolean literals, for SET clauses
    false: str
    ignore_prefix: str  # an INSERT that skips rows a unique key already holds...
    ignore_suffix: str  # ...is written ``{ignore_prefix} t (...) VALUES (...){ignore_suffix}``
    bool_columns: bool  # whether a flag column is a boolean (else 0 or 1)

    def sql(self, text: str) -> str:
        """``text`` with its ``?`` marks as the driver's placeholders."""
        return _swap(text, self.mark)

    def flag(self, column: str) -> str:
        """A test that the flag ``column`` is set."""
        return column if self.bool_columns else f"{column} = 1"

    def unflagged(self, column: str) -> str:
        """A test that the flag ``column`` is not set."""
        return f"NOT {column}" if self.bool_columns else f"{column} = 0"

    def json_text(self, column: str, *keys: str) -> str:
        """The text at ``keys`` inside the JSON ``column`` (NULL where it has none);
        ``keys`` are names written in code, never a caller's input."""
        if self.bool_columns:  # PostgreSQL: jsonb
            path = "".join(f"->'{k}'" for k in keys[:-1])
            return f"({column}{path}->>'{keys[-1]}')"
        return f"json_extract({column}, '$.{'.'.join(keys)}')"

    def day_of(self, column: str) -> str:
        """The UTC day (whole days since the epoch) of the unix time ``column``."""
        if self.bool_columns:
            return f"CAST(FLOOR({column} / 86400) AS BIGINT)"
        return f"CAST({column} / 86400 AS INTEGER)"  # truncates: floor for times >= 0

    def among(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A test that ``column`` is one of ``values``, and its parameters: one array
        parameter where the driver binds lists, else one placeholder per value."""
        if self.bool_columns:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({', '.join([self.mark] * len(values))})", list(values)


SQLITE = Dialect(mark="?", true="1", false="0", ignore_prefix="INSERT OR IGNORE INTO",
                 ignore_suffix="", bool_columns=False)
POSTGRES = Dialect(mark="%s", true="true", false="false", ignore_prefix="INSERT INTO",
                   ignore_suffix=" ON CONFLICT DO NOTHING", bool_columns=True)


@functools.lru_cache(maxsize=1024)
def _swap(text: str, mark: str) -> str:
    return text.replace("?", mark)
