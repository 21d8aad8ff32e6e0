"""How the CLI finds a daemon serving the same data dir, and which store it serves.

``memd serve`` writes ``daemon.json`` (pid, host, port, and the store it serves) into the
data dir while it runs and removes it on exit. A stale file (the process is gone, or
nothing answers /health) is ignored. The store is recorded because a data dir does not
decide the store: ``--db`` (or ``MEMD_DB``) may name another one, and a CLI command must
go through the daemon only when it serves the store the command names
(:class:`StorePlace` says which store a setting names, without its password).

One daemon per data dir: it holds an exclusive lock on ``daemon.lock`` from before it
opens the store until it exits (the kernel drops the lock of a process that dies), so of
two daemons started at the same moment one gets it and the other is refused, where the
file alone would let both through.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from memd.private import private_dir, private_file, write_private

if TYPE_CHECKING:
    from memd.config import Settings

FILENAME = "daemon.json"
LOCKNAME = "daemon.lock"


@dataclass(frozen=True)
class StorePlace:
    """Which store a ``db`` setting names: ``backend`` (``SQLite`` or ``PostgreSQL``),
    ``shown`` (the file, or the database and server without user or password) and ``key``,
    equal for two settings that name the same store (an absolute file path; the server,
    port and database name)."""

    backend: str
    shown: str
    key: str


def store_place(settings: Settings) -> StorePlace:
    """The store ``settings.db`` names (raises as opening it would for a database no
    installed store opens)."""
    from memd.registry import store_class, store_for

    if store_for(settings.db) is store_class("sqlite"):
        path = Path(settings.db_path)
        return StorePlace("SQLite", str(path), f"sqlite:{path.expanduser().resolve()}")
    from memd.privacy.urls import redact_dsn

    return StorePlace("PostgreSQL", redact_dsn(settings.db), _postgres_key(settings.db))


def _postgres_key(dsn: str) -> str:
    """Server, port and database of a libpq URL or DSN, with libpq's defaults filled in;
    two spellings of one database that this does not equate are taken as two stores,
    which only makes the CLI open the store itself rather than through the daemon."""
    import getpass

    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:  # unreadable: opening it fails; never equal to another
        return "postgresql:unreadable:" + hashlib.sha256(dsn.encode()).hexdigest()

    def part(key: str, env: str, default: str) -> str:
        return str(info.get(key) or os.environ.get(env) or default)

    user = part("user", "PGUSER", getpass.getuser())
    host = part("host", "PGHOST", "") or part("hostaddr", "PGHOSTADDR", "")
    return (f"postgresql://{host}:{part('port', 'PGPORT', '5432')}/"
            f"{part('dbname', 'PGDATABASE', user)}")


def hold_data_dir(data_dir: Path) -> int | None:
    """Take the data dir's daemon lock; its file descriptor (kept open while serving), or
    None when another daemon holds it."""
    private_dir(data_dir)
    fd = os.open(private_file(data_dir / LOCKNAME), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def write_daemon_file(data_dir: Path, host: str, port: int,
                      store: StorePlace | None = None) -> Path:
    private_dir(data_dir)
    path = data_dir / FILENAME
    connect = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    record: dict[str, Any] = {"pid": os.getpid(), "host": connect, "port": port}
    if store is not None:
        record["store"] = asdict(store)
    write_private(path, json.dumps(record).encode())
    return path


def remove_daemon_file(path: Path) -> None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if data.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def daemon_record(data_dir: Path) -> tuple[int, str, int] | None:
    """(pid, host, port) of ``daemon.json`` in ``data_dir``, or None when there is none
    or it cannot be read."""
    try:
        info = json.loads((data_dir / FILENAME).read_text())
        return int(info["pid"]), str(info["host"]), int(info["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def served_store(data_dir: Path) -> StorePlace | None:
    """The store the daemon of ``data_dir`` says it serves in ``daemon.json`` (None when
    there is no file, or a daemon of an older memd wrote it)."""
    try:
        store = json.loads((data_dir / FILENAME).read_text())["store"]
        return StorePlace(str(store["backend"]), str(store["shown"]), str(store["key"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_daemon(data_dir: Path, timeout: float = 30.0) -> httpx.Client | None:
    """An ``httpx.Client`` for the live daemon of ``data_dir``, or None."""
    record = daemon_record(data_dir)
    if record is None or not alive(record[0]):
        return None
    _, host, port = record
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    try:
        httpx.get(f"{base}/health", timeout=2.0).raise_for_status()
    except httpx.HTTPError:
        return None
    key = os.environ.get("MEMD_API_KEY")  # a daemon in auth mode needs one
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=base, timeout=timeout, headers=headers)
