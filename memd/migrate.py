"""``memd migrate``: copy a SQLite data dir into PostgreSQL, exactly, resumably.

What is copied is one declared list, :data:`TABLES`, in foreign-key order. An entry names a
table, the columns that identify a row (its key as PostgreSQL sees it: user_id first on the
per-user tables) and only what differs from a column-for-column copy; a plain table is one
line. A table is copied only if the source has it.

Column conversions follow from the target column's type, read from PostgreSQL's catalog:
INTEGER 0/1 -> boolean; JSON TEXT -> jsonb (the text is handed to PostgreSQL unchanged);
JSON array TEXT -> text[]; sqlite-vec float32 blobs (``vectors=``, read from the vec0 table
in key order and merged) -> vector; BLOB -> bytea; REAL epoch seconds -> double precision
(both schemas keep float epoch seconds); integers and text as they are. Both schemas store
"no workspace" as '' (a table whose schemas disagreed would say so with ``exprs=``, e.g.
``{"workspace": "nullif(t.workspace, '')"}``). A source column with no target column stops
the run unless the entry ``skip``s it (derived on PostgreSQL: messages.has_embedding is
``embedding IS NOT NULL`` there); generated columns (the tsvectors) are PostgreSQL's; a
target column the source lacks keeps its default. Messages land in monthly partitions
(``monthly=``): the month partitions of every month the source's history covers are made
before copying, or the rows would sit in the DEFAULT partitions.

How a run goes, and why it can be killed and rerun:

1. schema: :class:`PostgresStore` creates or migrates the target schema as ``memd serve``
   would, then the history's month partitions are made.
2. plan: one pass over each source table digests every row (sha256 of its canonical form,
   below); the target rows with the same keys are read (the keys go into a temp table and
   are joined) and digested the same way. A key whose target row differs is a conflict:
   the run stops before writing anything. Keys missing from the target are what to copy.
3. copy: the missing rows stream through binary COPY in batches, one transaction each,
   each batch one user's rows (so it routes to that user's partitions only: a batch
   spread over a production layout's thousands of leaves would exhaust the lock table,
   as would any query that does not name its user). A killed run loses only its open
   batch; the next run's plan derives the resume point from what the target holds, so
   it copies exactly the rest, and a complete target makes a run that copies nothing and
   says so. (Preferred to a staging table with ON CONFLICT DO NOTHING: the plan reads the
   target anyway, to catch conflicts before writing, and COPY straight into the table is
   faster. A concurrent writer of the same keys fails its batch with a unique violation,
   reported as a conflict.) Copying into an empty table with a small partition tree drops
   its vector indexes first and builds them after the last batch (HNSW builds much faster
   in bulk); their definitions wait in schema_meta, so a killed run's rerun rebuilds them.
4. verify: per table, the row counts and a checksum of each side: sha256 over the sorted
   row digests of the source rows, and of the target rows with the source's keys.

The canonical form of a row is the JSON list of its column values after conversion: ints,
floats (repr, exact), text, booleans, null; jsonb and JSON text parsed with numbers as
normalized decimals (1.50 == 1.5, as jsonb compares them) and every value tagged with its
JSON type; text[] as a list; vectors as sha256 of their float32 little-endian bytes and
bytea as hex. Both sides go through the same functions, so equal checksums mean equal
content, embeddings included.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import Conflict, InvalidInput, MemdError, MigrationError, StorageError

if TYPE_CHECKING:
    import apsw
    import psycopg


@dataclass(frozen=True)
class VectorSource:
    """A target column whose values live in a sqlite-vec table, joined on ``key``."""

    table: str
    key: str
    column: str = "embedding"


@dataclass(frozen=True)
class Table:
    """One table to copy; see the module docstring for what each field means."""

    name: str
    key: tuple[str, ...]
    skip: frozenset[str] = frozenset()  # source columns derived on PostgreSQL
    exprs: Mapping[str, str] = field(default_factory=dict)  # target column -> SQLite expr
    vectors: Mapping[str, VectorSource] = field(default_factory=dict)
    monthly: str | None = None  # history partitioned by the month of this column
    source: str | None = None  # the source table, when it is not ``name``: the target
    # table is a projection of it (its other columns belong to other targets)

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
    # that a daemon's history cache keeps for it (memd.engine.history).
    Table("sessions", ("user_id", "session_id")),
    Table("memories", ("user_id", "memory_id"),
          skip=frozenset({"access_count", "last_accessed_at", "relevance_accumulator"}),
          vectors={"embedding": VectorSource("memory_vec", "memory_id")}),
    # PostgreSQL keeps access stats in a narrow table (sql/postgres/004_memory_stats.sql).
    Table("memory_stats", ("user_id", "memory_id"), source="memories"),
    Table("facts", ("user_id", "fact_id")),
    Table("memory_entities", ("user_id", "entity", "memory_id")),
    Table("usage_log", ("user_id", "usage_id")),
    Table("calls", ("call_id",)),
    Table("jobs", ("job_id",)),
    Table("embedding_cache", ("model", "content_hash")),
)

# The conversion kind of each PostgreSQL column type (format_type); vector(n) is "vector".
_KINDS = {
    "text": "text", "smallint": "int", "integer": "int", "bigint": "int",
    "double precision": "float", "real": "float", "boolean": "bool", "jsonb": "json",
    "json": "json", "text[]": "array", "bytea": "bytes",
}
# Vector indexes are built much faster in bulk than row by row, so copying
# into an empty table drops them first and builds them after its last batch. Their
# definitions wait in schema_meta under this prefix, so a killed run's rerun rebuilds them.
_DEFERRED_AMS = ("hnsw", "ivfflat")
_DEFERRED_KEY = "migrate.deferred_index."
_DEFER_MAX_RELATIONS = 2000  # tables and indexes of a partition tree

Progress = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]
"""``progress(label, total)`` opens a bar; the callable it yields advances it by n."""


@contextmanager
def _no_progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


@dataclass(frozen=True)
class TableResult:
    """The outcome for one table: rows on each side (the target's: those with the
    source's keys), rows this run copied, and each side's content checksum."""

    table: str
    source_rows: int
    target_rows: int
    copied: int
    source_checksum: str
    target_checksum: str

    @property
    def matches(self) -> bool:
        return (self.source_rows == self.target_rows
                and self.source_checksum == self.target_checksum)


@dataclass(frozen=True)
class Result:
    source: str
    target: str
    tables: list[TableResult]
    absent: list[str]  # declared tables the source does not have
    partitions_made: int
    seconds: float
    phases: dict[str, float]  # seconds spent in schema, checking, copying, verifying

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables)

    @property
    def matches(self) -> bool:
        return all(t.matches for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "target": self.target, "copied": self.copied,
            "matches": self.matches, "seconds": round(self.seconds, 3),
            "partitions_made": self.partitions_made, "absent_in_source": self.absent,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "tables": {t.table: {"source_rows": t.source_rows, "target_rows": t.target_rows,
                                 "copied": t.copied, "source_checksum": t.source_checksum,
                                 "target_checksum": t.target_checksum}
                       for t in self.tables},
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


def _canon_json(text: str | None) -> Any:
    if text is None:
        return None
    if text == "{}":
        return {"o": {}}
    return _tag(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def _vector_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _row_digest(values: list[Any]) -> bytes:
    return hashlib.sha256(_ENCODER.encode(values).encode("utf-8", "surrogatepass")).digest()


def checksum(digests: Iterable[bytes]) -> str:
    """A table's checksum: sha256 over its rows' digests in sorted order."""
    h = hashlib.sha256()
    for d in sorted(digests):
        h.update(d)
    return h.hexdigest()


# -- columns -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Column:
    name: str
    oid: int
    kind: str
    source: str | None  # SQLite expression; None for a vector column (merged in)
    vectors: VectorSource | None = None


def _kind(pg_type: str, where: str) -> str:
    if pg_type.startswith("vector("):
        return "vector"
    if pg_type not in _KINDS:
        raise MigrationError(f"{where} has type {pg_type}, which memd migrate cannot convert")
    return _KINDS[pg_type]


def _columns(spec: Table, source_cols: list[str], target: list[tuple[str, int, str, bool]],
             ) -> list[_Column]:
    """The target columns this table copies, in target order, with their sources."""
    cols: list[_Column] = []
    for name, oid, pg_type, generated in target:
        if generated:
            continue
        where = f"{spec.name}.{name}"
        if name in spec.vectors:
            cols.append(_Column(name, oid, _kind(pg_type, where), None, spec.vectors[name]))
        elif name in spec.exprs:
            cols.append(_Column(name, oid, _kind(pg_type, where), spec.exprs[name]))
        elif name in source_cols:
            cols.append(_Column(name, oid, _kind(pg_type, where), f't."{name}"'))
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


def _to_pg(kind: str, raw: Any) -> Any:
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


def _canon_source(kind: str, raw: Any) -> Any:
    if raw is None:
        return None
    if kind == "bool":
        return bool(raw)
    if kind == "json":
        return _canon_json(raw)
    if kind == "array":
        return json.loads(raw)
    if kind == "vector":
        return _vector_digest(raw)
    if kind == "bytes":
        return bytes(raw).hex()
    if kind == "float":
        return float(raw)
    return raw


def _canon_target(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "json":
        return _canon_json(value)  # selected as ::text
    if kind == "vector":
        import numpy as np

        arr = value.to_numpy() if hasattr(value, "to_numpy") else value
        return _vector_digest(np.asarray(arr, dtype="<f4").tobytes())
    if kind == "bytes":
        return bytes(value).hex()
    return value


# -- source ------------------------------------------------------------------------------
class _Source:
    """The SQLite side, read in one read transaction (a consistent snapshot)."""

    def __init__(self, path: Path) -> None:
        import apsw
        import sqlite_vec

        if not path.is_file():
            raise InvalidInput(f"no memd database at {path}")
        self.path = path
        try:
            db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE)
            db.enable_load_extension(True)
            db.load_extension(sqlite_vec.loadable_path())
            db.enable_load_extension(False)
            db.set_busy_timeout(10_000)
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'schema_meta'"
                              ).fetchall():
                raise InvalidInput(f"{path} is not a memd database")
            row = db.execute("SELECT value FROM schema_meta WHERE key = 'dim'").fetchone()
        except apsw.Error as exc:
            raise InvalidInput(f"cannot read {path} as a memd database: {exc}") from exc
        self.dim = int(row[0]) if row else 384
        # Bring an older data dir to the current schema, as any memd command would.
        from memd.backends.sqlite import SQLiteStore

        SQLiteStore(path, dim=self.dim).close()
        self.db: apsw.Connection = db
        db.execute("BEGIN")
        self.tables = {name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        self.db.execute("COMMIT")
        self.db.close()

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')]

    def count(self, table: str) -> int:
        ((n,),) = self.db.execute(f'SELECT count(*) FROM "{table}"').fetchall()
        return int(n or 0)

    def months(self, table: str, column: str) -> list[float]:
        """Epoch starts (UTC) of the months ``column`` falls in."""
        rows = self.db.execute(
            f"SELECT DISTINCT CAST(strftime('%Y', \"{column}\", 'unixepoch') AS INTEGER), "
            f"CAST(strftime('%m', \"{column}\", 'unixepoch') AS INTEGER) FROM \"{table}\""
        )
        return [float(calendar.timegm((y, m, 1, 0, 0, 0))) for y, m in rows if y is not None]

    def rows(self, spec: Table, cols: list[_Column]) -> Iterator[list[Any]]:
        """The table's rows as raw values in ``cols`` order, vectors merged in."""
        plain = [c for c in cols if c.vectors is None]
        vec = [c for c in cols if c.vectors is not None]
        query = f'SELECT {", ".join(c.source or "" for c in plain)} FROM "{spec.origin}" t'
        if not vec:
            for r in self.db.execute(query):
                yield list(r)
            return
        assert vec[0].vectors is not None
        id_col = vec[0].vectors.key
        id_at = [c.name for c in plain].index(id_col)
        query += f' ORDER BY t."{id_col}"'
        streams: list[Iterator[tuple[str, bytes]]] = []
        for c in vec:
            vs = c.vectors
            assert vs is not None
            cur = self.db.cursor()  # a cursor each: the streams interleave
            streams.append(iter(cur.execute(
                f'SELECT "{vs.key}", "{vs.column}" FROM "{vs.table}" ORDER BY 1')))
        heads: list[tuple[str, bytes] | None] = [next(s, None) for s in streams]
        at = {c.name: i for i, c in enumerate(plain)}
        for r in self.db.cursor().execute(query):
            key = r[id_at]
            found: dict[str, bytes | None] = {}
            for i, c in enumerate(vec):
                head = heads[i]
                while head is not None and head[0] < key:  # orphans: no row, not copied
                    head = next(streams[i], None)
                heads[i] = head
                found[c.name] = head[1] if head is not None and head[0] == key else None
            yield [found[c.name] if c.vectors is not None else r[at[c.name]] for c in cols]


# -- target ------------------------------------------------------------------------------
def _redact(dsn: str) -> str:
    """``dbname on host:port`` for messages (never the password)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:  # malformed: reported when it is used
        return "PostgreSQL"
    host = info.get("host") or "localhost"
    port = f":{info['port']}" if info.get("port") else ""
    return f"database {info.get('dbname') or info.get('user') or '?'} on {host}{port}"


class _Target:
    def __init__(self, dsn: str) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        self.conn: psycopg.Connection[Any] = psycopg.connect(dsn)
        register_vector(self.conn)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def columns(self, table: str) -> list[tuple[str, int, str, bool]]:
        rows = self.conn.execute(
            "SELECT attname, atttypid::int, format_type(atttypid, atttypmod), "
            "attgenerated <> '' FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,),
        ).fetchall()
        self.conn.commit()
        return [(str(n), int(o), str(t), bool(g)) for n, o, t, g in rows]

    def digests(self, spec: Table, cols: list[_Column], keys: Sequence[tuple[Any, ...]],
                advance: Callable[[int], None]) -> dict[tuple[Any, ...], list[bytes]]:
        """Digests of the target rows whose keys are in ``keys``, by key. One user at a
        time, each in its own transaction: a query naming its user touches (and locks)
        one hash partition, not the thousands of a production layout."""
        out: dict[tuple[Any, ...], list[bytes]] = {}
        for user, group in _by_user(spec, keys).items():
            self._digest_group(spec, cols, user, group, out, advance)
        return out

    def _digest_group(self, spec: Table, cols: list[_Column], user: str | None,
                      keys: Sequence[tuple[Any, ...]], out: dict[tuple[Any, ...], list[bytes]],
                      advance: Callable[[int], None]) -> None:
        from psycopg import sql

        key_cols = [next(c for c in cols if c.name == k) for k in spec.key]
        key_at = [[c.name for c in cols].index(k) for k in spec.key]
        ident = sql.Identifier
        with self.conn.transaction():
            self.conn.execute(sql.SQL(
                "CREATE TEMP TABLE memd_keys ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA"
            ).format(sql.SQL(", ").join(map(ident, spec.key)), ident(spec.name)))
            with self.conn.cursor() as cur, cur.copy(
                sql.SQL("COPY memd_keys ({}) FROM STDIN (FORMAT BINARY)").format(
                    sql.SQL(", ").join(map(ident, spec.key)))
            ) as copy:
                copy.set_types([c.oid for c in key_cols])
                for k in keys:
                    copy.write_row(k)
            self.conn.execute("ANALYZE memd_keys")
            select = sql.SQL(", ").join(
                sql.SQL("t.{}::text").format(ident(c.name)) if c.kind == "json"
                else sql.SQL("t.{}").format(ident(c.name)) for c in cols
            )
            query = sql.SQL("SELECT {} FROM {} t JOIN memd_keys USING ({})").format(
                select, ident(spec.name), sql.SQL(", ").join(map(ident, spec.key)))
            if user is not None:  # a constant, so that the plan prunes partitions
                query = sql.SQL("{} WHERE t.user_id = {}").format(query, sql.Literal(user))
            kinds = [c.kind for c in cols]
            with self.conn.cursor("memd_migrate_read", binary=True) as cur:
                cur.itersize = 2000
                cur.execute(query)
                n = 0
                for r in cur:
                    values = [_canon_target(k, v) for k, v in zip(kinds, r, strict=True)]
                    out.setdefault(tuple(r[i] for i in key_at), []).append(_row_digest(values))
                    n += 1
                    if n % 1000 == 0:
                        advance(1000)
                advance(n % 1000)

    def deferred(self, table: str) -> dict[str, str]:
        """Vector indexes of ``table`` an earlier run dropped and has not rebuilt yet."""
        prefix = f"{_DEFERRED_KEY}{table}."
        rows = self.conn.execute(
            "SELECT key, value FROM schema_meta WHERE starts_with(key, %s)", (prefix,)
        ).fetchall()
        self.conn.commit()
        return {str(k): str(v) for k, v in rows}

    def defer_indexes(self, table: str) -> dict[str, str]:
        """Drop the vector indexes of ``table`` if it is empty, recording their definitions
        in schema_meta first (one transaction); returns what was deferred."""
        from psycopg import sql

        with self.conn.transaction():
            # Only for a small partition tree: dropping and building an index on the
            # parent locks every leaf's, and thousands would exhaust the lock table.
            ((size,),) = self.conn.execute(
                "SELECT count(*) * (1 + (SELECT count(*) FROM pg_index "
                "WHERE indrelid = to_regclass(%s))) FROM pg_partition_tree(to_regclass(%s))",
                (table, table)).fetchall()
            if size > _DEFER_MAX_RELATIONS or self.conn.execute(
                sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table))
            ).fetchone():
                return {}
            found = self.conn.execute(
                "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index x "
                "JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_am a ON a.oid = c.relam "
                "WHERE x.indrelid = to_regclass(%s) AND a.amname = ANY(%s)",
                (table, list(_DEFERRED_AMS)),
            ).fetchall()
            out = {f"{_DEFERRED_KEY}{table}.{name}": str(ddl) for name, ddl in found}
            for key, ddl in out.items():
                self.conn.execute("INSERT INTO schema_meta (key, value) VALUES (%s, %s) "
                                  "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                                  (key, ddl))
            for name, _ in found:
                self.conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        return out

    def rebuild_indexes(self, deferred: Mapping[str, str]) -> None:
        """Create the deferred indexes again (a bulk build) and forget their records."""
        for key, ddl in deferred.items():
            # the parent's definition reads "ON ONLY t"; on the parent it makes every leaf's
            ddl = ddl.replace(" ON ONLY ", " ON ", 1).replace(
                "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
            with self.conn.transaction():
                self.conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
                self.conn.execute(ddl.encode())
                self.conn.execute("DELETE FROM schema_meta WHERE key = %s", (key,))

    def copy(self, spec: Table, cols: list[_Column], rows: list[list[Any]]) -> None:
        """Copy one batch in one transaction."""
        import psycopg
        from psycopg import sql

        ident = sql.Identifier
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            ident(spec.name), sql.SQL(", ").join(ident(c.name) for c in cols))
        try:
            with self.conn.transaction(), self.conn.cursor() as cur, cur.copy(query) as copy:
                copy.set_types([c.oid for c in cols])
                for r in rows:
                    copy.write_row(r)
        except psycopg.Error as exc:  # name the row PostgreSQL refused ("COPY t, line N")
            what = f"copying {spec.name}"
            line = re.search(r"line (\d+)", exc.diag.context or "")
            if line and 0 < int(line[1]) <= len(rows):
                row = rows[int(line[1]) - 1]
                names = [c.name for c in cols]
                what += f" {dict((k, row[names.index(k)]) for k in spec.key)}"
            raise _translate(exc, what) from exc


def _translate(exc: Exception, what: str) -> MemdError:
    import psycopg

    if isinstance(exc, psycopg.errors.UniqueViolation):
        return Conflict(f"{what}: the target gained rows with the same keys meanwhile: {exc}")
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return MigrationError(f"{what}: PostgreSQL refused a row: {exc}")
    return StorageError(f"{what}: {exc}")


# -- the run -----------------------------------------------------------------------------
@dataclass
class _Plan:
    spec: Table
    cols: list[_Column]
    source: dict[tuple[Any, ...], bytes]
    target: dict[tuple[Any, ...], list[bytes]]

    @property
    def missing(self) -> set[tuple[Any, ...]]:
        return {k for k in self.source if k not in self.target}

    def conflicts(self) -> list[tuple[Any, ...]]:
        return [k for k, d in self.target.items() if d != [self.source[k]]]


def _digest_source(src: _Source, spec: Table, cols: list[_Column],
                   advance: Callable[[int], None]) -> dict[tuple[Any, ...], bytes]:
    kinds = [c.kind for c in cols]
    key_at = [[c.name for c in cols].index(k) for k in spec.key]
    out: dict[tuple[Any, ...], bytes] = {}
    for n, raw in enumerate(src.rows(spec, cols), 1):
        values = [_canon_source(k, v) for k, v in zip(kinds, raw, strict=True)]
        out[tuple(raw[i] for i in key_at)] = _row_digest(values)
        if n % 1000 == 0:
            advance(1000)
    advance(len(out) % 1000)
    return out


def _check_vectors(spec: Table, cols: list[_Column], raw: list[Any], dim: int) -> None:
    for c, v in zip(cols, raw, strict=True):
        if c.kind == "vector" and v is not None and len(v) != 4 * dim:
            raise MigrationError(f"{spec.name}.{c.name}: a {len(v) // 4}-dim vector in a "
                                 f"{dim}-dim data dir")


def migrate(
    source: Path, dsn: str, *, partitions: tuple[int, int, int] = (256, 256, 512),
    batch_size: int = 2000, progress: Progress = _no_progress,
    tables: Sequence[Table] = TABLES,
) -> Result:
    """Copy the memd SQLite database at ``source`` into the PostgreSQL database ``dsn``
    (schema created or migrated first); see the module docstring. Raises Conflict if the
    target holds different rows under the same keys (nothing is written then)."""
    import apsw
    import psycopg

    if not dsn.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("--to must be a postgresql:// URL")
    if batch_size < 1:
        raise InvalidInput("batch_size must be at least 1")
    started = time.perf_counter()
    where = _redact(dsn)
    phases: dict[str, float] = {}
    src = _Source(Path(source))
    try:
        from memd.backends.postgres import PostgresStore

        store = PostgresStore(dsn, dim=src.dim, partitions=partitions, pool_size=1)
        made = 0
        try:
            for spec in tables:
                if spec.monthly and spec.origin in src.tables:
                    for month in src.months(spec.origin, spec.monthly):
                        made += store.ensure_history_partitions(month, months=1)
        finally:
            store.close()
        try:
            tgt = _Target(dsn)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to {where}: {exc}") from exc
        try:
            phases["schema"] = time.perf_counter() - started
            results = _run(src, tgt, tables, batch_size, progress, phases)
        except psycopg.Error as exc:
            raise _translate(exc, f"migrating into {where}") from exc
        except apsw.Error as exc:
            raise StorageError(f"reading {source}: {exc}") from exc
        finally:
            tgt.close()
    finally:
        src.close()
    absent = [t.name for t in tables if t.origin not in src.tables]
    return Result(str(source), where, results, absent, made, time.perf_counter() - started,
                  phases)


def _run(src: _Source, tgt: _Target, tables: Sequence[Table], batch_size: int,
         progress: Progress, phases: dict[str, float]) -> list[TableResult]:
    import psycopg

    clock = time.perf_counter()
    present = [t for t in tables if t.origin in src.tables]
    plans: list[_Plan] = []
    counts = {t.name: src.count(t.origin) for t in present}
    with progress("checking", sum(counts.values())) as advance:
        for spec in present:
            target_cols = tgt.columns(spec.name)
            if not target_cols:
                raise MigrationError(f"the target has no table {spec.name}")
            cols = _columns(spec, src.columns(spec.origin), target_cols)
            digests = _digest_source(src, spec, cols, advance)
            plans.append(_Plan(spec, cols, digests,
                               tgt.digests(spec, cols, list(digests), _ignore)))
    conflicts = [(p.spec.name, k) for p in plans for k in p.conflicts()]
    if conflicts:
        shown = "; ".join(f"{t} {dict(zip(_spec(tables, t).key, k, strict=True))}"
                          for t, k in conflicts[:3])
        raise Conflict(
            f"the target already holds different data for {len(conflicts)} row(s) with the "
            f"same keys (e.g. {shown}); nothing was copied. memd migrate never overwrites: "
            "use an empty database, or stop the daemons serving it and delete those rows first"
        )
    phases["checking"] = time.perf_counter() - clock
    clock = time.perf_counter()
    missing = {p.spec.name: p.missing for p in plans}
    copied = {p.spec.name: 0 for p in plans}
    with progress("copying", sum(len(m) for m in missing.values())) as advance:
        for p in plans:
            todo = missing[p.spec.name]
            deferred = tgt.deferred(p.spec.name)
            if todo and not deferred:
                deferred = tgt.defer_indexes(p.spec.name)
            if not todo:
                tgt.rebuild_indexes(deferred)
                continue
            try:
                copied[p.spec.name] = _copy_table(src, tgt, p, todo, batch_size, advance)
            except Exception:
                # Leave the target searchable; if even that fails, a rerun rebuilds them.
                with contextlib.suppress(psycopg.Error):
                    tgt.rebuild_indexes(deferred)
                raise
            tgt.rebuild_indexes(deferred)
    phases["copying"] = time.perf_counter() - clock
    clock = time.perf_counter()
    results = []
    recheck = [p for p in plans if copied[p.spec.name]]
    with progress("verifying", sum(len(p.source) for p in recheck)) as advance:
        for p in plans:
            after = (tgt.digests(p.spec, p.cols, list(p.source), advance)
                     if copied[p.spec.name] else p.target)
            target_digests = [d for ds in after.values() for d in ds]
            results.append(TableResult(
                p.spec.name, len(p.source), len(target_digests), copied[p.spec.name],
                checksum(p.source.values()), checksum(target_digests),
            ))
    phases["verifying"] = time.perf_counter() - clock
    return results


def _by_user(spec: Table, keys: Iterable[tuple[Any, ...]]) -> dict[str | None, list[Any]]:
    """Keys grouped by their user_id (one group, None, if the table has no user)."""
    at = spec.key.index("user_id") if "user_id" in spec.key else None
    groups: dict[str | None, list[Any]] = {}
    for k in keys:
        groups.setdefault(None if at is None else k[at], []).append(k)
    return groups


def _copy_table(src: _Source, tgt: _Target, p: _Plan, todo: set[tuple[Any, ...]],
                batch_size: int, advance: Callable[[int], None]) -> int:
    """Copy the rows of ``todo`` in batches of one user each (a batch then routes to
    that user's partitions only); returns how many were copied."""
    key_at = [[c.name for c in p.cols].index(k) for k in p.spec.key]
    user_at = p.spec.key.index("user_id") if "user_id" in p.spec.key else None
    kinds = [c.kind for c in p.cols]
    batches: dict[Any, list[list[Any]]] = {}
    copied = 0

    def flush(user: Any) -> None:
        nonlocal copied
        rows = batches.pop(user)
        tgt.copy(p.spec, p.cols, rows)
        copied += len(rows)
        advance(len(rows))

    for raw in src.rows(p.spec, p.cols):
        key = tuple(raw[i] for i in key_at)
        if key not in todo:
            continue
        _check_vectors(p.spec, p.cols, raw, src.dim)
        user = None if user_at is None else key[user_at]
        batch = batches.setdefault(user, [])
        batch.append([_to_pg(k, v) for k, v in zip(kinds, raw, strict=True)])
        if len(batch) >= batch_size:
            flush(user)
    for user in list(batches):
        flush(user)
    return copied


def _ignore(n: int) -> None:
    pass


def _spec(tables: Sequence[Table], name: str) -> Table:
    return next(t for t in tables if t.name == name)
