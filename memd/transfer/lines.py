"""The export file: its header, row and trailer lines, how values are written, and the
check of a whole file before anything is imported from it."""

from __future__ import annotations

import base64
import calendar
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.errors import InvalidInput
from memd.migrate.canon import canon_json, checksum, row_digest, vector_digest
from memd.migrate.tables import TABLES, Table

FORMAT = "memd-export"
VERSION = 1

# The one column that holds what a client sent before the sanitizer replaced its secrets,
# and the column with the replaced copy (NULL when there was nothing to replace).
ORIGINAL, SANITIZED = ("messages", "content"), "sanitized"
REDACTED_NOTE = ("messages.content holds each message's sanitized text (secrets replaced "
                 "by placeholders); the original contents are not in this file")

_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True)
class Layout:
    """One table as a file holds it: the declared table and its columns with their kinds
    ("vector" and "bytes" base64, "json" a JSON value, anything else the value itself)."""

    spec: Table
    columns: tuple[tuple[str, str], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def key(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.spec.key)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.spec.name, "key": list(self.spec.key),
                "columns": [list(c) for c in self.columns]}


def encode(kind: str, raw: Any) -> Any:
    """A stored value as the file writes it (either backend's driver value)."""
    if raw is None:
        return None
    if kind == "vector":
        if not isinstance(raw, bytes):
            import numpy as np

            raw = np.asarray(raw.to_numpy() if hasattr(raw, "to_numpy") else raw,
                             dtype="<f4").tobytes()
        return base64.b64encode(raw).decode("ascii")
    if kind == "bytes":
        return base64.b64encode(bytes(raw)).decode("ascii")
    if kind == "json":
        return json.loads(raw)  # selected as text
    return raw


def raw_bytes(value: str) -> bytes:
    """The bytes of a "vector" or "bytes" value of the file."""
    return base64.b64decode(value, validate=True)


def _canon(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "vector":
        return vector_digest(raw_bytes(value))
    if kind == "bytes":
        return raw_bytes(value).hex()
    if kind == "json":
        return canon_json(json.dumps(value))
    return value


def digest(layout: Layout, row: dict[str, Any]) -> bytes:
    """A row's digest: memd migrate's canonical form over the row as the file holds it."""
    return row_digest([_canon(kind, row[name]) for name, kind in layout.columns])


def redact(layout: Layout, row: dict[str, Any]) -> dict[str, Any]:
    """The row as an export without originals writes it."""
    table, column = ORIGINAL
    if layout.spec.name == table and row.get(SANITIZED) is not None:
        row[column] = row[SANITIZED]
    return row


def header(source: str, dim: int, originals: bool, layouts: list[Layout]) -> str:
    head: dict[str, Any] = {"format": FORMAT, "version": VERSION, "source": source,
                            "dim": dim, "originals": originals}
    if not originals:
        head["note"] = REDACTED_NOTE
    head["tables"] = [lay.to_json() for lay in layouts]
    return _DUMPS(head) + "\n"


def row_line(layout: Layout, row: dict[str, Any]) -> str:
    return _DUMPS({"table": layout.spec.name, "row": row}) + "\n"


def trailer(counts: dict[str, int], sums: dict[str, str]) -> str:
    return _DUMPS({"end": FORMAT, "tables": {
        t: {"rows": counts[t], "checksum": sums[t]} for t in counts}}) + "\n"


# -- reading a file ----------------------------------------------------------------------
@dataclass
class Checked:
    """A whole export file, checked: its header, and each table's row digests by key."""

    path: Path
    source: str
    dim: int
    originals: bool
    layouts: list[Layout]
    digests: dict[str, dict[tuple[Any, ...], bytes]] = field(default_factory=dict)
    months: set[float] = field(default_factory=set)  # of the monthly tables' rows

    def checksum(self, table: str) -> str:
        return checksum(self.digests[table].values())


def _bad(path: Path, line: int, why: str) -> InvalidInput:
    return InvalidInput(f"{path}, line {line}: {why}; nothing was imported")


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with path.open(encoding="utf-8") as f:
            for n, text in enumerate(f, 1):
                if not text.endswith("\n"):
                    raise _bad(path, n, "the file ends in the middle of a line (truncated?)")
                try:
                    yield n, json.loads(text)
                except ValueError as exc:
                    raise _bad(path, n, f"not JSON ({exc})") from exc
    except UnicodeDecodeError as exc:
        why = ("ends in the middle of a character (truncated?)"
               if exc.reason == "unexpected end of data" else f"is not UTF-8 text: {exc}")
        raise InvalidInput(f"{path} {why}; nothing was imported") from exc
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc


def _layouts(path: Path, head: Any) -> list[Layout]:
    specs = {t.name: t for t in TABLES}
    out = []
    try:
        for t in head["tables"]:
            spec = specs[t["name"]]
            if tuple(t["key"]) != spec.key:
                raise _bad(path, 1, f"table {spec.name} has the key {t['key']}, not "
                                    f"{list(spec.key)}")
            out.append(Layout(spec, tuple((str(n), str(k)) for n, k in t["columns"])))
    except InvalidInput:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, 1, f"the header's table list is malformed ({exc!r})") from exc
    return out


def check(path: Path, advance: Callable[[int], None]) -> Checked:
    """Read the whole file and check it against its trailer: format and version, every
    line's shape, no key twice, row counts and checksums. Raises InvalidInput."""
    lines = _lines(path)
    first = next(lines, None)
    if first is None:
        raise InvalidInput(f"{path} is empty; nothing was imported")
    _, head = first
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise _bad(path, 1, "not a memd export (no memd-export header)")
    if head.get("version") != VERSION:
        raise _bad(path, 1, f"export format version {head.get('version')!r}; this memd "
                            f"reads version {VERSION}")
    layouts = _layouts(path, head)
    try:
        out = Checked(path, str(head["source"]), int(head["dim"]), bool(head["originals"]),
                      layouts, {lay.spec.name: {} for lay in layouts})
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, 1, f"the header is malformed ({exc!r})") from exc
    by_name = {lay.spec.name: (i, lay) for i, lay in enumerate(layouts)}
    at = 0  # rows come in the header's table order
    for n, line in lines:
        if isinstance(line, dict) and line.get("end") == FORMAT:
            _check_trailer(out, n, line)
            if next(lines, None) is not None:
                raise _bad(path, n + 1, "lines after the trailer")
            return out
        try:
            at = _check_row(out, by_name, at, n, line)
        except InvalidInput:
            raise
        except (TypeError, ValueError) as exc:  # e.g. a list where a key value belongs
            raise _bad(path, n, f"a value does not fit its column ({exc})") from exc
        advance(1)
    raise InvalidInput(f"{path} has no trailer line (truncated?); nothing was imported")


def _check_row(out: Checked, by_name: dict[str, tuple[int, Layout]], at: int, n: int,
               line: Any) -> int:
    """Check one row line and record its digest; returns its table's place."""
    path = out.path
    if not isinstance(line, dict) or set(line) != {"table", "row"} \
            or not isinstance(line["table"], str):
        raise _bad(path, n, "not a row line")
    i, lay = by_name.get(line["table"], (-1, None))
    if lay is None or i < at:
        raise _bad(path, n, f"table {line['table']!r} is not expected here")
    row = line["row"]
    if not isinstance(row, dict) or list(row) != lay.names:
        raise _bad(path, n, f"the row's columns are not those of {lay.spec.name}")
    key = lay.key(row)
    seen = out.digests[lay.spec.name]
    if key in seen:
        raise _bad(path, n, f"{lay.spec.name} holds the key {list(key)} twice")
    seen[key] = digest(lay, row)
    if lay.spec.monthly and isinstance(row.get(lay.spec.monthly), int | float):
        t = time.gmtime(row[lay.spec.monthly])
        out.months.add(float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))))
    return i


def _check_trailer(out: Checked, n: int, line: dict[str, Any]) -> None:
    tables = line.get("tables")
    if not isinstance(tables, dict) or set(tables) != set(out.digests):
        raise _bad(out.path, n, "the trailer does not list the header's tables")
    for name, seen in out.digests.items():
        want = tables[name]
        if not isinstance(want, dict) or want.get("rows") != len(seen):
            raise _bad(out.path, n, f"{name}: the file holds {len(seen)} rows, its trailer "
                                    f"says {want.get('rows') if isinstance(want, dict) else '?'}")
        if want.get("checksum") != out.checksum(name):
            raise _bad(out.path, n, f"{name}: the rows do not match the trailer's checksum")


def rows(path: Path, layouts: list[Layout]) -> Iterator[tuple[Layout, dict[str, Any]]]:
    """The row lines of a file :func:`check` accepted, with their tables."""
    by_name = {lay.spec.name: lay for lay in layouts}
    for _, line in _lines(path):
        if isinstance(line, dict) and "table" in line:
            yield by_name[line["table"]], line["row"]
