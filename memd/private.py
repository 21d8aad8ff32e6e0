"""Owner-only files. memd's store keeps what its owner said as sent, secrets included, and
its exports, logs and service files can name as much (a log line, a database URL with its
password), so whatever memd writes is its owner's alone: the data dir is 0700 and every
file memd writes, in it or elsewhere, 0600.

Modes are given where a file or directory is created, not left to the process's umask
(memd is a library too, and the umask belongs to whoever runs it), and an existing data
dir or store file that is looser is tightened, with a warning that says so: a data dir
made by an older memd, or copied in with default modes, would otherwise stay readable by
every local user.

One exception: the trial PostgreSQL (``memd postgres``) started by root runs as a system
user, which must traverse the data dir to reach its cluster inside it; that data dir
keeps the search (x) bits for others, never the read bits.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("memd")

DIR_MODE = 0o700
FILE_MODE = 0o600
#: What the trial PostgreSQL's system user needs on the data dir holding its cluster.
TRAVERSE = 0o011
#: The directory of the trial PostgreSQL's cluster inside a data dir (memd.pgserver).
CLUSTER_DIR = "postgres"


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Make directory ``path`` if missing (0700; missing parents get the usual modes) and,
    with ``tighten``, take the group's and others' access away from an existing one
    (see the module docstring for the trial PostgreSQL's exception). A directory memd may
    not change (another user's) is left as it is, with a warning."""
    path = Path(path)
    if not path.is_dir():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask
    elif tighten:
        root = getattr(os, "geteuid", lambda: -1)() == 0  # no geteuid on Windows
        keep = TRAVERSE if root and (path / CLUSTER_DIR).is_dir() else 0
        _tighten(path, DIR_MODE | keep)
    return path


def private_file(path: Path) -> Path:
    """Create file ``path`` if missing, empty and 0600; an existing one looser than 0600
    is tightened (with a warning)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _tighten(path, FILE_MODE)
    else:
        os.close(fd)
        os.chmod(path, FILE_MODE)  # the umask may have masked it further: keep rw
    return path


def tighten_files(*paths: Path) -> None:
    """Tighten each of ``paths`` that exists to 0600 (an SQLite store's -wal and -shm,
    which SQLite creates with its database file's mode, made looser before)."""
    for path in paths:
        if Path(path).exists():
            _tighten(Path(path), FILE_MODE)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (replacing what it held), the file 0600."""
    private_file(path)
    with open(path, "wb") as out:
        out.write(data)


def _tighten(path: Path, mode: int) -> None:
    if os.name == "nt":  # no POSIX modes: the profile's ACLs keep it to its owner
        return
    current = stat.S_IMODE(path.stat().st_mode)
    if current & ~mode & 0o077 == 0:
        return
    wanted = current & ~0o077 | mode & 0o077
    try:
        os.chmod(path, wanted)
    except OSError as exc:
        log.warning("%s is readable by others (mode %o) and memd cannot change it (%s)",
                    path, current, exc)
        return
    log.warning("%s was mode %o: memd keeps it to its owner (now %o)", path, current,
                wanted)
