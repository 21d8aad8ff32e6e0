"""How the CLI finds a daemon serving the same data dir.

``memd serve`` writes ``daemon.json`` (pid, host, port) into the data dir while it runs
and removes it on exit. A stale file (the process is gone, or nothing answers /health)
is ignored. One daemon per data dir: it holds an exclusive lock on ``daemon.lock`` from
before it opens the store until it exits (the kernel drops the lock of a process that
dies), so of two daemons started at the same moment one gets it and the other is
refused, where the file alone would let both through.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import httpx

from memd.private import private_dir, private_file, write_private

FILENAME = "daemon.json"
LOCKNAME = "daemon.lock"


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


def write_daemon_file(data_dir: Path, host: str, port: int) -> Path:
    private_dir(data_dir)
    path = data_dir / FILENAME
    connect = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    write_private(path, json.dumps({"pid": os.getpid(), "host": connect,
                                    "port": port}).encode())
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


def find_daemon(data_dir: Path, timeout: float = 30.0) -> Any:
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
