"""The run of ``memd migrate``: check (plan and conflicts), copy, verify, and its report.

:func:`migrate` is the entry point (``memd migrate`` calls it); see the ``memd.migrate``
docstring for how a run goes and why it can be killed and rerun.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memd.errors import Conflict, InvalidInput, MigrationError, StorageError
from memd.migrate.canon import Column, canon_source, checksum, match_columns, row_digest, to_pg
from memd.migrate.source import Source
from memd.migrate.tables import TABLES, Table
from memd.migrate.target import Target, mark_copying, translate_error
from memd.privacy.urls import redact_dsn


class Advance(Protocol):
    """Moves a progress bar ``n`` rows on; ``item`` names what is being done (the
    table), shown beside the bar."""

    def __call__(self, n: int, item: str | None = None) -> None: ...


Progress = Callable[[str, int], AbstractContextManager[Advance]]
"""``progress(label, total)`` opens a bar of ``total`` rows and yields its Advance."""


def _ignore(n: int, item: str | None = None) -> None:
    pass


@contextmanager
def no_progress(label: str, total: int) -> Iterator[Advance]:
    yield _ignore


def _on(advance: Advance, table: str) -> Callable[[int], None]:
    """``advance`` with ``table`` named beside the bar."""
    advance(0, table)
    return lambda n: advance(n, table)


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

    kept: int = 0  # the target's own rows (Table.own_prefix) kept in place of the source's

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
                                 "copied": t.copied, "kept_target_own": t.kept,
                                 "source_checksum": t.source_checksum,
                                 "target_checksum": t.target_checksum}
                       for t in self.tables},
        }


@dataclass
class _Plan:
    spec: Table
    cols: list[Column]
    source: dict[tuple[Any, ...], bytes]
    target: dict[tuple[Any, ...], list[bytes]]

    @property
    def missing(self) -> set[tuple[Any, ...]]:
        return {k for k in self.source if k not in self.target}

    def conflicts(self) -> list[tuple[Any, ...]]:
        return [k for k, d in self.target.items() if d != [self.source[k]]]

    def keep_own(self) -> int:
        """Leave out the source's rows that the target holds as its own (those under
        ``own_prefix``): neither copied nor compared. Returns how many."""
        prefix = self.spec.own_prefix
        if prefix is None:
            return 0
        own = [k for k in self.target if str(k[0]).startswith(prefix)]
        for k in own:
            del self.source[k], self.target[k]
        return len(own)


def _digest_source(src: Source, spec: Table, cols: list[Column],
                   advance: Callable[[int], None]) -> dict[tuple[Any, ...], bytes]:
    kinds = [c.kind for c in cols]
    key_at = [[c.name for c in cols].index(k) for k in spec.key]
    out: dict[tuple[Any, ...], bytes] = {}
    for n, raw in enumerate(src.rows(spec, cols), 1):
        values = [canon_source(k, v) for k, v in zip(kinds, raw, strict=True)]
        out[tuple(raw[i] for i in key_at)] = row_digest(values)
        if n % 1000 == 0:
            advance(1000)
    advance(len(out) % 1000)
    return out


def _check_vectors(spec: Table, cols: list[Column], raw: list[Any], dim: int) -> None:
    for c, v in zip(cols, raw, strict=True):
        if c.kind == "vector" and v is not None and len(v) != 4 * dim:
            raise MigrationError(f"{spec.name}.{c.name}: a {len(v) // 4}-dim vector in a "
                                 f"{dim}-dim data dir")


def migrate(
    source: Path, dsn: str, *, partitions: tuple[int, int, int] = (256, 256, 512),
    batch_size: int = 2000, progress: Progress = no_progress,
    tables: Sequence[Table] = TABLES, key: str | None = None,
) -> Result:
    """Copy the memd SQLite database at ``source`` (encrypted with ``key``, if given)
    into the PostgreSQL database ``dsn`` (schema created or migrated first); see the
    ``memd.migrate`` docstring. Raises Conflict if the target holds different rows under
    the same keys (nothing is written then)."""
    import apsw
    import psycopg

    if not dsn.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("--to must be a postgresql:// URL")
    if batch_size < 1:
        raise InvalidInput("batch_size must be at least 1")
    started = time.perf_counter()
    where = redact_dsn(dsn)
    phases: dict[str, float] = {}
    src = Source(Path(source), key)
    try:
        from memd.backends.postgres import PostgresStore

        marked = mark_copying(dsn, [t.name for t in tables if t.origin in src.tables])
        # Making a new database's partition layout is most of a small copy's time (a
        # minute or more for the production layout): the bar says what it waits for.
        with progress("schema", 1) as advance:
            advance(0, "tables and partitions")
            store = PostgresStore(dsn, dim=src.dim, partitions=partitions, pool_size=1)
            advance(1, store.database)
        made = 0
        try:
            for spec in tables:
                if spec.monthly and spec.origin in src.tables:
                    for month in src.months(spec.origin, spec.monthly):
                        made += store.ensure_history_partitions(month, months=1)
        finally:
            store.close()
        try:
            tgt = Target(dsn)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to {where}: {exc}") from exc
        try:
            phases["schema"] = time.perf_counter() - started
            results = _run(src, tgt, tables, batch_size, progress, phases, marked)
            if all(r.matches for r in results):
                tgt.unmark()
        except psycopg.Error as exc:
            raise translate_error(exc, f"migrating into {where}") from exc
        except apsw.Error as exc:
            raise StorageError(f"reading {source}: {exc}") from exc
        finally:
            tgt.close()
    finally:
        src.close()
    absent = [t.name for t in tables if t.origin not in src.tables]
    return Result(str(source), where, results, absent, made, time.perf_counter() - started,
                  phases)


def _run(src: Source, tgt: Target, tables: Sequence[Table], batch_size: int,
         progress: Progress, phases: dict[str, float], marked: bool) -> list[TableResult]:
    """Plan, copy and verify; ``marked``: this run made the target's record of a copy
    under way (:func:`mark_copying`), which a refused plan leaves as it found it."""
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
            cols = match_columns(spec, src.columns(spec.origin), target_cols)
            digests = _digest_source(src, spec, cols, _on(advance, spec.name))
            plans.append(_Plan(spec, cols, digests,
                               tgt.digests(spec, cols, list(digests), _ignore)))
    kept = {p.spec.name: p.keep_own() for p in plans}
    conflicts = [(p.spec.name, k) for p in plans for k in p.conflicts()]
    if conflicts:
        if marked:  # nothing was written: the target is as it was
            tgt.unmark()
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
                copied[p.spec.name] = _copy_table(src, tgt, p, todo, batch_size,
                                                  _on(advance, p.spec.name))
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
            after = (tgt.digests(p.spec, p.cols, list(p.source), _on(advance, p.spec.name))
                     if copied[p.spec.name] else p.target)
            target_digests = [d for ds in after.values() for d in ds]
            results.append(TableResult(
                p.spec.name, len(p.source), len(target_digests), copied[p.spec.name],
                checksum(p.source.values()), checksum(target_digests), kept[p.spec.name],
            ))
    phases["verifying"] = time.perf_counter() - clock
    return results



def _copy_table(src: Source, tgt: Target, p: _Plan, todo: set[tuple[Any, ...]],
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
        batch.append([to_pg(k, v) for k, v in zip(kinds, raw, strict=True)])
        if len(batch) >= batch_size:
            flush(user)
    for user in list(batches):
        flush(user)
    return copied



def _spec(tables: Sequence[Table], name: str) -> Table:
    return next(t for t in tables if t.name == name)
