"""Whatever memd writes is its owner's alone: the data dir 0700, and the store with its
WAL and shared memory, exports, logs, the daemon's lock and address files, 0600, whatever
the umask; a data dir or store left looser is tightened when memd opens it."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import memd
from memd.cli import main as cli
from memd.cli.service import log_handlers
from memd.private import private_dir, private_file
from memd.server.discovery import hold_data_dir, write_daemon_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """A umask that would leave every file readable by all: memd must not rely on it."""
    old = os.umask(0o000)
    yield
    os.umask(old)


def test_a_new_store_is_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with memd.open(data) as m:
        s = m.create_session("alice")
        m.append(s.id, "alice", [{"role": "user", "content": "my token is hunter2"}])
        m.run_jobs()
        files = sorted(p.name for p in data.iterdir())
        assert {"memd.db", "memd.db-wal", "memd.db-shm"} <= set(files)
        assert {p.name: mode(p) for p in data.iterdir()} == dict.fromkeys(files, 0o600)
    assert mode(data) == 0o700


def test_a_loose_data_dir_and_store_are_tightened(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "d"
    with memd.open(data) as m:
        m.add("I prefer tabs", "alice")
    data.chmod(0o755)
    for name in ("memd.db", "memd.db-wal", "memd.db-shm"):
        if (data / name).exists():
            (data / name).chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="memd"), memd.open(data) as m:
        assert [x.text for x in m.list("alice")] == ["I prefer tabs"]
        assert mode(data) == 0o700
        assert {mode(p) for p in data.iterdir()} == {0o600}
    assert f"{data} was mode 755" in caplog.text


def test_a_custom_store_path_keeps_its_folder_mode(tmp_path: Path) -> None:
    """``--db`` naming a file elsewhere: the file is private, the user's folder is not
    memd's to change."""
    folder = tmp_path / "projects"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with memd.open(tmp_path / "d", db=str(folder / "other.db")) as m:
        m.add("x marks the spot", "alice")
    assert mode(folder) == 0o755
    assert mode(folder / "other.db") == 0o600


def test_exports_are_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with memd.open(data) as m:
        m.add("I prefer tabs", "alice")
    out = tmp_path / "backup.jsonl"
    result = CliRunner().invoke(cli, ["--data-dir", str(data), "export", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0 and mode(out) == 0o600


def test_logs_are_owner_only_after_rotation_too(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "memd.log"
    [handler] = [h for h in log_handlers(log_file) if isinstance(h, logging.FileHandler)]
    try:
        assert isinstance(handler, logging.handlers.RotatingFileHandler)
        handler.emit(logging.makeLogRecord({"msg": "user said hunter2"}))
        handler.doRollover()
        handler.emit(logging.makeLogRecord({"msg": "again"}))
    finally:
        handler.close()
    assert mode(log_file) == 0o600 and mode(Path(f"{log_file}.1")) == 0o600
    assert mode(log_file.parent) == 0o700


def test_daemon_lock_and_address_files_are_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "d"
    fd = hold_data_dir(data)
    assert fd is not None
    try:
        path = write_daemon_file(data, "127.0.0.1", 8765)
    finally:
        os.close(fd)
    assert mode(data) == 0o700
    assert mode(path) == 0o600 and mode(data / "daemon.lock") == 0o600


def test_private_helpers_keep_owner_bits_and_only_tighten(tmp_path: Path) -> None:
    made = private_file(tmp_path / "f")
    assert mode(made) == 0o600
    made.chmod(0o400)  # tighter than 0600: left as it is
    private_file(made)
    assert mode(made) == 0o400
    folder = private_dir(tmp_path / "a" / "b")
    assert mode(folder) == 0o700
    folder.chmod(0o750)
    private_dir(folder, tighten=False)
    assert mode(folder) == 0o750
    private_dir(folder)
    assert mode(folder) == 0o700


def test_the_notes_folder_memd_makes_is_owner_only(tmp_path: Path) -> None:
    from memd.engine.learning.notes import NotesFolder

    with memd.open(tmp_path / "d") as m:
        NotesFolder(m).watcher()
        assert mode(m.settings.notes_path) == 0o700
    mine = tmp_path / "shared-notes"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    with memd.open(tmp_path / "e", notes_dir=mine) as m:
        NotesFolder(m).watcher()
    assert mode(mine) == 0o755  # a folder the user chose keeps its mode
