"""Column conversions and the canonical form of a row, the same for both sides.

Which target columns a table copies and how each value converts (SQLite -> COPY value),
and the digest of a row read from either side: both sides go through these functions,
so equal checksums mean equal content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from memd.errors import MigrationError
from memd.migrate.tables import Table, VectorSource

# The conversion kind of each PostgreSQL column type (format_type); vector(n) is "vector".
_KINDS = {
    "text": "text", "smallint": "int", "integer": "int", "bigint": "int",
    "double precision": "float", "real": "float", "boolean": "bool", "jsonb": "json",
    "json": "json", "text[]": "array", "bytea": "bytes",
}


# -- canonical form ----------------------------------------------------------------------
def _tag(obj: Any) -> Any:
    """A parsed JSON value with every scalar tagged by its JSON type (unambiguous)."""
    if isinstance(obj, dict):
        return {"o": {k: _tag(v) for k, v in obj.items()}}
    if isinstance(obj, list):
        return {"a": [_tag(v) for v in obj]}
    if isinstance(obj, bool):
        return {"b": obj}
    if isinstance(obj, Decimal):
        return {"n": "0" if obj == 0 else str(obj.normalize())}
    if isinstance(obj, str):
        return {"s": obj}
    return None


def canon_json(text: str | None) -> Any:
    if text is None:
        return None
    if text == "{}":
        return {"o": {}}
    return _tag(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def vector_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def row_digest(values: list[Any]) -> bytes:
    return hashlib.sha256(_ENCODER.encode(values).encode("utf-8", "surrogatepass")).digest()


def checksum(digests: Iterable[bytes]) -> str:
    """A table's checksum: sha256 over its rows' digests in sorted order."""
    h = hashlib.sha256()
    for d in sorted(digests):
        h.update(d)
    return h.hexdigest()


# -- columns -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    name: str
    oid: int
    kind: str
    source: str | None  # SQLite expression; None for a vector column (merged in)
    vectors: VectorSource | None = None


def column_kind(pg_type: str, where: str) -> str:
    if pg_type.startswith("vector("):
        return "vector"
    if pg_type not in _KINDS:
        raise MigrationError(f"{where} has type {pg_type}, which memd migrate cannot convert")
    return _KINDS[pg_type]


def match_columns(spec: Table, source_cols: list[str], target: list[tuple[str, int, str, bool]],
                  ) -> list[Column]:
    """The target columns this table copies, in target order, with their sources."""
    cols: list[Column] = []
    for name, oid, pg_type, generated in target:
        if generated:
            continue
        where = f"{spec.name}.{name}"
        if name in spec.vectors:
            cols.append(Column(name, oid, column_kind(pg_type, where), None, spec.vectors[name]))
        elif name in spec.exprs:
            cols.append(Column(name, oid, column_kind(pg_type, where), spec.exprs[name]))
        elif name in source_cols:
            cols.append(Column(name, oid, column_kind(pg_type, where), f't."{name}"'))
    mapped = {c.name for c in cols} | set(spec.skip)
    lost = [c for c in source_cols if c not in mapped]
    if lost and spec.source is None:
        raise MigrationError(
            f"{spec.name}: source columns {lost} have no target column; declare them in "
            "memd.migrate.TABLES (skip= if PostgreSQL derives them)"
        )
    if missing := [k for k in spec.key if k not in {c.name for c in cols}]:
        raise MigrationError(f"{spec.name}: key columns {missing} are not copied")
    vec_keys = {c.vectors.key for c in cols if c.vectors is not None}
    if len(vec_keys) > 1:
        raise MigrationError(f"{spec.name}: vector columns must share one key column")
    return cols


def to_pg(kind: str, raw: Any) -> Any:
    """A source value as the target column's COPY value."""
    if raw is None:
        return None
    if kind == "bool":
        return bool(raw)
    if kind == "json":
        from psycopg.types.json import Jsonb

        return Jsonb(raw, dumps=_same)  # PostgreSQL parses the text itself
    if kind == "array":
        return json.loads(raw)
    if kind == "vector":
        import numpy as np

        return np.frombuffer(raw, dtype="<f4")
    if kind == "float":
        return float(raw)
    return raw


def _same(text: Any) -> str:
    return str(text)


def canon_source(kind: str, raw: Any) -> Any:
    if raw is None:
        return None
    if kind == "bool":
        return bool(raw)
    if kind == "json":
        return canon_json(raw)
    if kind == "array":
        return json.loads(raw)
    if kind == "vector":
        return vector_digest(raw)
    if kind == "bytes":
        return bytes(raw).hex()
    if kind == "float":
        return float(raw)
    return raw


def canon_target(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "json":
        return canon_json(value)  # selected as ::text
    if kind == "vector":
        import numpy as np

        arr = value.to_numpy() if hasattr(value, "to_numpy") else value
        return vector_digest(np.asarray(arr, dtype="<f4").tobytes())
    if kind == "bytes":
        return bytes(value).hex()
    return value
