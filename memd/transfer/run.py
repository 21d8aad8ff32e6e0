"""Export a store to a file and import a file into a store; the ``memd.transfer``
docstring says how and why."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from memd.errors import Conflict, InvalidInput, StorageError
from memd.migrate import Progress
from memd.migrate.canon import checksum
from memd.migrate.run import no_progress
from memd.transfer import lines
from memd.transfer.lines import Checked, Layout

if TYPE_CHECKING:
    from memd.config import Settings


class Side(Protocol):
    """One backend as export and import see it (memd.transfer.sqlite and .postgres)."""

    kind: str
    dim: int
    layouts: list[Layout]

    def count(self, layout: Layout) -> int: ...
    def rows(self, layout: Layout) -> Iterator[list[Any]]: ...
    def end_read(self) -> None: ...
    def writing(self) -> AbstractContextManager[None]: ...
    def write(self, layout: Layout, rows: Iterator[dict[str, Any]]) -> int: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class TableCount:
    table: str
    rows: int  # in the file
    written: int  # by this run (the others were there already, identical)
    checksum: str


@dataclass(frozen=True)
class Summary:
    """What an export wrote or an import read and wrote."""

    originals: bool
    tables: list[TableCount]

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def written(self) -> int:
        return sum(t.written for t in self.tables)


def _is_sqlite(settings: Settings) -> bool:
    from memd.registry import store_class, store_for

    return store_for(settings.db) is store_class("sqlite")


def _reader(settings: Settings) -> Side:
    if _is_sqlite(settings):
        from memd.keys import key_for
        from memd.transfer.sqlite import SQLiteSide

        return SQLiteSide.reader(Path(settings.db_path),
                                 key_for(settings.encryption, settings.db_path))
    from memd.transfer.postgres import PostgresSide

    return PostgresSide(settings.db)


def _file_rows(layout: Layout, raw: Iterator[list[Any]], originals: bool,
               ) -> Iterator[dict[str, Any]]:
    """The rows of a table as a file holds them."""
    for values in raw:
        row = {name: lines.encode(kind, v)
               for (name, kind), v in zip(layout.columns, values, strict=True)}
        yield row if originals else lines.redact(layout, row)


def export_store(settings: Settings, out: TextIO, *, originals: bool = False,
                 progress: Progress = no_progress) -> Summary:
    """Write the configured store to ``out`` as an export file (messages' sanitized text
    in place of their original content unless ``originals``)."""
    side = _reader(settings)
    try:
        out.write(lines.header(side.kind, side.dim, originals, side.layouts))
        counts, sums, tables = {}, {}, []
        with progress("exporting", sum(side.count(lay) for lay in side.layouts)) as advance:
            for lay in side.layouts:
                digests = []
                for row in _file_rows(lay, side.rows(lay), originals):
                    digests.append(lines.digest(lay, row))
                    out.write(lines.row_line(lay, row))
                    if len(digests) % 1000 == 0:
                        advance(1000)
                advance(len(digests) % 1000)
                name = lay.spec.name
                counts[name], sums[name] = len(digests), checksum(digests)
                tables.append(TableCount(name, len(digests), len(digests), sums[name]))
        out.write(lines.trailer(counts, sums))
    finally:
        side.close()
    return Summary(originals, tables)


def _stored(side: Side, layout: Layout, keys: dict[tuple[Any, ...], bytes],
            originals: bool) -> dict[tuple[Any, ...], bytes]:
    """Digests of the stored rows with these keys, in the file's form (redacted as the
    file is): a rerun of an import, or a redacted backup of this very store, matches."""
    out = {}
    for row in _file_rows(layout, side.rows(layout), originals):
        key = layout.key(row)
        if key in keys:
            out[key] = lines.digest(layout, row)
    return out


def _open_target(settings: Settings, checked: Checked) -> Side:
    """The configured store, created or migrated as ``memd serve`` would, with the
    history partitions of the file's months (PostgreSQL)."""
    from memd.registry import store_for

    store = store_for(settings.db).from_settings(settings, checked.dim)
    from memd.backends.sqlite import SQLiteStore

    if isinstance(store, SQLiteStore):
        from memd.transfer.sqlite import SQLiteSide

        return SQLiteSide.writer(store)
    try:
        for month in sorted(checked.months):
            store.ensure_history_partitions(month, months=1)
    finally:
        store.close()
    from memd.transfer.postgres import PostgresSide

    return PostgresSide(settings.db)


def _matching(side: Side, checked: Checked) -> dict[str, Layout]:
    have = {lay.spec.name: lay for lay in side.layouts}
    for lay in checked.layouts:
        if have.get(lay.spec.name) != lay:
            raise InvalidInput(
                f"{checked.path}: table {lay.spec.name} does not have the columns the store "
                "has (an export of another memd version?); nothing was imported")
    return have


def import_store(settings: Settings, path: Path, *,
                 progress: Progress = no_progress) -> Summary:
    """Import the export file at ``path`` into the configured store: the whole file is
    checked first, then the store's rows with the same keys (a different row stops the
    import before anything is written; an identical one is skipped), then the missing
    rows are written and the store's rows compared with the file's checksums."""
    try:
        with path.open("rb") as f:
            total = sum(1 for _ in f)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    with progress("checking", max(total - 2, 0)) as advance:
        checked = lines.check(path, advance)
    kind = "sqlite" if _is_sqlite(settings) else "postgres"
    if checked.source != kind:
        hint = " (memd migrate moves a SQLite store into PostgreSQL)" if kind == "postgres" \
            else ""
        raise InvalidInput(f"{path} is an export of a {checked.source} store; it imports "
                           f"into a {checked.source} store, and this one is {kind}{hint}")
    side = _open_target(settings, checked)
    try:
        layouts = _matching(side, checked)
        todo: dict[str, set[tuple[Any, ...]]] = {}
        conflicts: list[str] = []
        for lay in checked.layouts:
            name = lay.spec.name
            stored = _stored(side, layouts[name], checked.digests[name], checked.originals)
            conflicts += [f"{name} {dict(zip(lay.spec.key, k, strict=True))}"
                          for k, d in stored.items() if d != checked.digests[name][k]]
            todo[name] = set(checked.digests[name]) - set(stored)
        side.end_read()
        if conflicts:
            raise Conflict(
                f"the store already holds different data for {len(conflicts)} row(s) with "
                f"the same keys (e.g. {'; '.join(conflicts[:3])}); nothing was imported. "
                "memd import never overwrites: import into an empty data dir")
        written = _write(side, checked, todo, progress)
        tables = []
        for lay in checked.layouts:
            name = lay.spec.name
            after = _stored(side, layouts[name], checked.digests[name], checked.originals)
            if len(after) != len(checked.digests[name]) or \
                    checksum(after.values()) != checked.checksum(name):
                raise StorageError(f"{name}: the store does not match the file after the "
                                   "import")
            tables.append(TableCount(name, len(after), written[name], checked.checksum(name)))
        side.end_read()
    finally:
        side.close()
    return Summary(checked.originals, tables)


def _write(side: Side, checked: Checked, todo: dict[str, set[tuple[Any, ...]]],
           progress: Progress) -> dict[str, int]:
    """Write the rows of ``todo``."""
    written = {lay.spec.name: 0 for lay in checked.layouts}
    with progress("importing", sum(map(len, todo.values()))) as advance, side.writing():
        groups = itertools.groupby(lines.rows(checked.path, checked.layouts),
                                   key=lambda pair: pair[0])
        for lay, group in groups:
            missing = todo[lay.spec.name]
            rows = (row for _, row in group if lay.key(row) in missing)
            written[lay.spec.name] = n = side.write(lay, rows)
            advance(n)
    return written
