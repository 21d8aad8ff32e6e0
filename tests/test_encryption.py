"""Encryption at rest of the SQLite store (memd.backends.sqlite.cipher), on real files
through the apsw-sqlite3mc build: what reaches the disk, opening with and without the
key, the keyring and environment key sources, ``memd encrypt`` and ``memd migrate``'s
reader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import keyring
import numpy as np
import pytest
from click.testing import CliRunner, Result
from keyring.backend import KeyringBackend

import memd
from memd.backends.sqlite import fts_query
from memd.cli import main
from memd.errors import StorageError
from memd.keys import KEYRING_SERVICE, keyring_user

SECRET_TEXT = "Quillfeather keeps the marmalade ledger in the attic"
# Words of it as they could reach the file: the row's text, its FTS5 terms.
WORDS = (b"Quillfeather", b"quillfeather", b"marmalade")
KEY = "correct horse battery staple"


def plaintext_in(data_dir: Path) -> list[str]:
    """The database files in ``data_dir`` (memd.db, its WAL, any journal) that hold a
    word of SECRET_TEXT."""
    files = sorted(data_dir.glob("memd.db*"))
    assert files
    return [f.name for f in files if any(w in f.read_bytes() for w in WORDS)]


def cli(*args: str, input: str | None = None) -> Result:  # noqa: A002 - click's name
    return CliRunner().invoke(main, list(args), input=input)


class MemoryKeyring(KeyringBackend):
    """A keyring in this process, through keyring's own API (no Secret Service here)."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.passwords.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.passwords[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        del self.passwords[(service, username)]


@pytest.fixture
def memory_keyring() -> Iterator[MemoryKeyring]:
    before = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    yield ring
    keyring.set_keyring(before)


@pytest.fixture
def env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMD_ENCRYPTION", "env")
    monkeypatch.setenv("MEMD_DB_KEY", KEY)


def found(m: Any) -> list[Any]:
    return [h for h in m.search(SECRET_TEXT, "alice") if h.kind == "memory"]


def test_an_encrypted_store_shows_no_plaintext_and_opens_only_with_its_key(
        hermetic_env: Path, env_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With encryption on, neither the file nor its WAL holds the text, while the store
    is open or after; reopened with the key, vector search (sqlite-vec's vec0 as well as
    the store's cached vectors) and the keyword side connection find the memory; without
    the key, or with a wrong one, opening fails with an error that says so."""
    m = memd.open()
    m.add(SECRET_TEXT, "alice")
    assert found(m)
    assert (hermetic_env / "memd.db-wal").stat().st_size > 0  # the rows are in the WAL
    assert plaintext_in(hermetic_env) == []
    store: Any = m.store  # the SQLite store
    store.connection.checkpoint()  # from a side connection, keyed like the store's
    m.close()
    assert plaintext_in(hermetic_env) == []
    assert not (hermetic_env / "memd.db").read_bytes().startswith(b"SQLite format 3")

    m = memd.open()
    hits = found(m)
    assert [h.text for h in hits] == [SECRET_TEXT]
    # the query's vector is the memory's (fake embedder): cosine 1, times its weight
    assert hits[0].breakdown["similarity"] == pytest.approx(m.settings.weights.similarity)
    vector = m.embedder.embed([SECRET_TEXT])[0]
    store = m.store
    knn = store.connection._db.execute(
        "SELECT memory_id, distance FROM memory_vec WHERE user_id = 'alice' AND "
        "embedding MATCH ? AND k = 1", (np.asarray(vector, np.float32).tobytes(),)
    ).fetchall()
    assert knn == [(hits[0].id, pytest.approx(0.0, abs=1e-4))]
    match = fts_query("alice", "marmalade")
    assert match is not None
    store.memories.side.lock.acquire()  # held by a ranking until it is done
    assert [r[0] for r in store.memories.side.rank(match, 5)] == [hits[0].id]
    store.scrub()  # VACUUM rewrites the file: encrypted still
    assert plaintext_in(hermetic_env) == []
    assert [h.id for h in found(m)] == [hits[0].id]
    m.close()

    monkeypatch.setenv("MEMD_ENCRYPTION", "off")
    with pytest.raises(StorageError, match="memd.db is encrypted: to open it, set "
                                           'encryption = "env"'):
        memd.open()
    monkeypatch.setenv("MEMD_ENCRYPTION", "env")
    monkeypatch.setenv("MEMD_DB_KEY", "not the key")
    with pytest.raises(StorageError, match="the key is wrong"):
        memd.open()
    monkeypatch.delenv("MEMD_DB_KEY")
    with pytest.raises(StorageError, match="MEMD_DB_KEY is not set"):
        memd.open()
    # and a plaintext apsw connection reads nothing of it
    with pytest.raises(apsw.NotADBError):
        apsw.Connection(str(hermetic_env / "memd.db")).execute(
            "SELECT count(*) FROM sqlite_schema").fetchall()


def test_memd_encrypt_converts_a_plaintext_store(hermetic_env: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`memd encrypt` with the key in MEMD_DB_KEY rewrites a plaintext store in place:
    afterwards no file holds the text, memd commands need the key and find the memory
    with it, and a second run refuses."""
    m = memd.open()
    m.add(SECRET_TEXT, "alice")
    m.close()
    assert plaintext_in(hermetic_env) == ["memd.db"]

    no_key = cli("encrypt", "--yes")
    assert no_key.exit_code == 1 and "MEMD_DB_KEY is not set" in no_key.output
    monkeypatch.setenv("MEMD_DB_KEY", KEY)
    declined = cli("encrypt", input="n\n")
    assert declined.exit_code == 1 and plaintext_in(hermetic_env) == ["memd.db"]
    done = cli("encrypt", input="y\n")
    assert done.exit_code == 0, done.output
    assert 'set encryption = "env"' in done.output
    assert plaintext_in(hermetic_env) == []
    assert sorted(p.name for p in hermetic_env.glob("memd.db*")) == ["memd.db"]

    locked_out = cli("search", SECRET_TEXT, "--user", "alice")
    assert locked_out.exit_code == 1
    assert "memd.db is encrypted: to open it" in locked_out.output
    assert "Traceback" not in locked_out.output
    monkeypatch.setenv("MEMD_ENCRYPTION", "env")
    searched = cli("search", SECRET_TEXT, "--user", "alice")
    assert searched.exit_code == 0, searched.output
    assert SECRET_TEXT in searched.output
    again = cli("encrypt", "--yes")
    assert again.exit_code == 2 and "encrypted already" in again.output


def test_the_key_in_the_os_keyring(hermetic_env: Path, memory_keyring: MemoryKeyring,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With encryption = "keyring" the key is the keyring's password for service memd
    and the file's path: none there is a clear error; `memd encrypt --key-from keyring`
    before the store exists stores a new random key, and the store is created with it."""
    monkeypatch.setenv("MEMD_ENCRYPTION", "keyring")
    with pytest.raises(StorageError, match="the OS keyring holds no key for .*memd.db"):
        memd.open()
    made = cli("encrypt", "--key-from", "keyring")
    assert made.exit_code == 0, made.output
    assert "memd creates it encrypted" in made.output
    user = keyring_user(hermetic_env / "memd.db")
    key = memory_keyring.passwords[(KEYRING_SERVICE, user)]
    assert len(key) >= 32 and key not in made.output

    with memd.open() as m:
        m.add(SECRET_TEXT, "alice")
    assert plaintext_in(hermetic_env) == []
    with memd.open() as m:
        assert [h.text for h in found(m)] == [SECRET_TEXT]
    memory_keyring.passwords[(KEYRING_SERVICE, user)] = "another key"
    with pytest.raises(StorageError, match="the key is wrong"):
        memd.open()


def test_the_key_is_never_shown(hermetic_env: Path, env_key: None) -> None:
    """`memd config show` lists the encryption setting and its source, never the key."""
    shown = cli("config", "show")
    assert shown.exit_code == 0, shown.output
    assert "encryption" in shown.output and "env MEMD_ENCRYPTION" in shown.output
    assert KEY not in shown.output


def test_migrate_reads_an_encrypted_store(hermetic_env: Path, env_key: None) -> None:
    """`memd migrate`'s reader opens an encrypted source with its key, and only so."""
    from memd.migrate.source import Source

    with memd.open() as m:
        m.add(SECRET_TEXT, "alice")
    src = Source(hermetic_env / "memd.db", KEY)
    try:
        assert src.count("memories") == 1
    finally:
        src.close()
    with pytest.raises(StorageError, match="memd.db is encrypted"):
        Source(hermetic_env / "memd.db")


def test_export_and_import_of_an_encrypted_store(hermetic_env: Path, env_key: None,
                                                  tmp_path: Path) -> None:
    """`memd export` reads an encrypted store with its key; the file it writes imports
    into another (encrypted) data dir, where search finds the memory."""
    with memd.open() as m:
        m.add(SECRET_TEXT, "alice")
    dump = tmp_path / "dump.jsonl"
    out = cli("export", str(dump))
    assert out.exit_code == 0, out.output
    assert "Quillfeather" in dump.read_text("utf-8")
    other = tmp_path / "other"
    out = cli("--data-dir", str(other), "import", str(dump))
    assert out.exit_code == 0, out.output
    assert plaintext_in(other) == []
    with memd.open(other) as m:
        assert [h.text for h in found(m)] == [SECRET_TEXT]
