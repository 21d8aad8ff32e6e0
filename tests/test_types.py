"""CI's type check sees memd as installed, backends included: a call the Store protocol
does not have, or a backend method returning the wrong type, is an error, not ``Any``."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def ini(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def mypy(snippet: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """mypy on ``snippet`` with CI's settings (pyproject.toml's, as an ini file: the
    project's own ``packages`` cannot be combined with a program text)."""
    conf = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["tool"]["mypy"]
    lines = ["[mypy]"]
    lines += [f"{k} = {ini(v)}" for k, v in conf.items() if k not in ("packages", "overrides")]
    for override in conf.get("overrides", []):
        lines.append(f"[mypy-{','.join(override['module'])}]")
        lines += [f"{k} = {ini(v)}" for k, v in override.items() if k != "module"]
    config = tmp_path / "mypy.ini"
    config.write_text("\n".join(lines) + "\n", "utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), "--no-error-summary",
         "--cache-dir", str(REPO / ".mypy_cache"), "-c", snippet],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )


def test_an_engine_call_the_store_lacks_is_a_type_error(tmp_path: Path) -> None:
    done = mypy("from memd.backends.base import Store\n"
                "def f(s: Store) -> None:\n"
                "    s.no_such_method()\n", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert '"Store" has no attribute "no_such_method"' in done.stdout


def test_a_backend_method_is_checked_against_its_signature(tmp_path: Path) -> None:
    done = mypy("from memd.backends.sqlite import SQLiteStore\n"
                "from memd.backends.postgres import PostgresStore\n"
                "def f(a: SQLiteStore, b: PostgresStore) -> int:\n"
                "    return a.get_session('u', 's') or b.get_session('u', 's')\n", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Incompatible return value type (got "Session | None", expected "int")' in done.stdout


def test_a_well_typed_call_passes(tmp_path: Path) -> None:
    done = mypy("from memd.backends.base import Store\n"
                "from memd.types import Session\n"
                "def f(s: Store) -> Session | None:\n"
                "    return s.get_session('u', 's')\n", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
