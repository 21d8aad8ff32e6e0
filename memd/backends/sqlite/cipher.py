"""Encryption at rest of the SQLite store, and the one function that opens its file.

memd's apsw is the apsw-sqlite3mc build: SQLite3 Multiple Ciphers, which encrypts every
page of the database and of its WAL (ChaCha20-Poly1305, its default cipher, with a page
key derived from a passphrase) and still loads sqlite-vec. Off by default; the
``encryption`` setting says where the passphrase comes from (:mod:`memd.keys`).

A plaintext SQLite file begins with ``SQLite format 3``; an encrypted one with bytes
that look random. Every connection memd opens to the file (:func:`connect`) checks that
header against the key it has, so that a missing key, a key for a plaintext file and a
wrong key each fail with an error that says which, before any statement runs.

What it does not cover: the old plaintext pages that converting a file in place
(:func:`encrypt`) leaves in free disk blocks, copies made before, and PostgreSQL, whose
data the server's own or the disk's encryption protects.
"""

from __future__ import annotations

import os

import apsw

from memd.errors import InvalidInput, StorageError
from memd.keys import KEY_ENV

PLAIN_HEADER = b"SQLite format 3\x00"
READWRITE = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
_HOW = (f'set encryption = "env" with the key in {KEY_ENV}, or encryption = "keyring" '
        "(env MEMD_ENCRYPTION)")


def is_encrypted(path: str | os.PathLike[str]) -> bool | None:
    """Whether the database file at ``path`` is encrypted; None when there is none yet
    (no file, or an empty one)."""
    try:
        with open(path, "rb") as f:
            header = f.read(len(PLAIN_HEADER))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from exc
    return None if not header else header != PLAIN_HEADER


def connect(path: str, key: str | None, flags: int = READWRITE) -> apsw.Connection:
    """A connection to the database at ``path``, keyed with ``key`` (None: plaintext)
    and checked by a first read. A missing key, a key for a plaintext file and a wrong
    key raise StorageError saying which."""
    memory = path == ":memory:"
    encrypted = None if memory else is_encrypted(path)
    if key is None and encrypted:
        raise StorageError(f"{path} is encrypted: to open it, {_HOW}")
    if key is not None and encrypted is False:
        raise StorageError(f"{path} is not encrypted, but encryption is on: `memd "
                           "encrypt` encrypts it, or set encryption = \"off\"")
    db = apsw.Connection(path, flags=flags)
    try:
        if key is not None and not memory:
            if db.pragma("key", key) != "ok":
                raise StorageError("this SQLite has no encryption: memd needs "
                                   "apsw-sqlite3mc in place of apsw")
            db.execute("SELECT count(*) FROM sqlite_schema").fetchall()
    except apsw.NotADBError:
        db.close()
        raise StorageError(f"cannot open {path}: the key is wrong") from None
    except BaseException:
        db.close()
        raise
    return db


def connect_reader(path: str, key: str | None) -> apsw.Connection:
    """A read-only connection to the database at ``path`` for a worker thread's reads:
    :func:`connect`'s, waiting up to 10 s on a lock, with a 16 MB page cache (FTS5
    pages)."""
    db = connect(path, key, apsw.SQLITE_OPEN_READONLY)
    db.set_busy_timeout(10_000)
    db.execute("PRAGMA cache_size = -16384")
    return db


def encrypt(path: str, key: str) -> None:
    """Encrypt the plaintext database at ``path`` in place with ``key``. It needs the
    file to itself (no daemon serving it): SQLite3 Multiple Ciphers rewrites a plaintext
    file only in rollback-journal mode, so the file leaves WAL mode for the rewrite and
    returns to it after."""
    import sqlite_vec

    if is_encrypted(path) is not False:
        raise InvalidInput(f"{path} is not a plaintext SQLite database (already "
                           "encrypted, or missing)")
    db = connect(path, None)
    try:
        db.enable_load_extension(True)  # the rewrite reads the vec0 tables' schema
        db.load_extension(sqlite_vec.loadable_path())
        db.enable_load_extension(False)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        mode = db.execute("PRAGMA journal_mode = DELETE").fetchall()[0][0]
        if mode != "delete":
            raise StorageError(f"{path} is in use (is a memd daemon serving it?): stop it "
                               "and try again")
        db.pragma("rekey", key)
        db.execute("PRAGMA journal_mode = WAL")
    except apsw.BusyError:
        raise StorageError(f"{path} is in use (is a memd daemon serving it?): stop it and "
                           "try again") from None
    except apsw.Error as exc:
        raise StorageError(f"cannot encrypt {path}: {exc}") from exc
    finally:
        db.close()
