"""The wheel works without the source tree: the store backends and their SQL migrations
ship inside it as ``memd.backends`` and ``memd.sql``, and a non-editable install runs the
CLI.

The wheel is built from a copy of the repository (so setuptools' ``build/`` dir can't
leak stale files into it, nor litter the working tree) and installed with ``--no-deps``
into a fresh venv. That venv sees the dev environment's dependencies (apsw, numpy, ...)
through a ``.pth`` file that lists the dev site-packages directory as a plain path:
site.py appends such a path after the venv's own site-packages and does not run the
``.pth`` files inside it, so the editable install's import finder is never loaded and
``memd`` can only come from the wheel. No network is needed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
REQUIRED_FILES = {
    "memd/backends/base.py",
    "memd/backends/sqlite/__init__.py",
    "memd/sql/sqlite/001_core.sql",
    "memd/sql/sqlite/002_vectors.sql",
}
PROBE = """
import importlib.metadata as md, importlib.resources as res, json, sys
import memd, memd.backends, memd.backends.base, memd.sql
print(json.dumps({
    "memd": memd.__file__,
    "backends": memd.backends.__file__,
    "sqlite_sql": sorted(p.name for p in res.files("memd.sql").joinpath("sqlite").iterdir()),
    "dist": str(md.distribution("memd").locate_file("")),
    "stores": sorted(ep.name for ep in md.entry_points(group="memd.stores")),
    "finders": [type(f).__module__ for f in sys.meta_path],
}))
"""


def run(args: list[str | Path], env: dict[str, str] | None = None,
        cwd: Path | None = None) -> str:
    """Run a command; on failure, fail the test with its output. Returns stdout."""
    proc = subprocess.run(
        [str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=600, stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE, symlinks=True)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--wheel-dir", tmp / "dist", src])
    (built,) = (tmp / "dist").glob("memd-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
         "--no-index", wheel])
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .strip())
    dev_site = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "memd_test_dev_site.pth").write_text("".join(f"{p}\n" for p in dev_site))
    return venv


def venv_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    env.update(MEMD_EMBEDDER="fake", MEMD_DATA_DIR=str(data_dir), PYTHONNOUSERSITE="1")
    return env


def test_wheel_ships_every_module_and_the_sql_inside_memd(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    source = REPO / "memd"
    in_repo = {p.relative_to(REPO).as_posix() for p in source.rglob("*.py")}
    in_repo |= {f"memd/sql/sqlite/{p.name}" for p in (source / "sql" / "sqlite").glob("*.sql")}
    # the web inspector's pages, served from the package
    in_repo |= {p.relative_to(REPO).as_posix() for p in (source / "ui" / "static").iterdir()}
    assert REQUIRED_FILES | in_repo <= names, sorted((REQUIRED_FILES | in_repo) - names)
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"memd"}, top


def test_wheel_installs_and_imports_from_the_venv(venv: Path, tmp_path: Path) -> None:
    # cwd matters: `python -c` puts it first on sys.path, and the repo root holds memd/.
    out = json.loads(run([venv / "bin" / "python", "-c", PROBE], env=venv_env(tmp_path / "data"),
                         cwd=tmp_path))
    root = venv.resolve()
    for key in ("memd", "backends", "dist"):
        assert Path(out[key]).resolve().is_relative_to(root), (key, out[key])
    assert {"001_core.sql", "002_vectors.sql"} <= set(out["sqlite_sql"])
    assert "sqlite" in out["stores"]
    assert not [f for f in out["finders"] if "__editable__" in f], out["finders"]


def test_wheel_cli_help(venv: Path, tmp_path: Path) -> None:
    out = run([venv / "bin" / "memd", "--help"], env=venv_env(tmp_path / "data"), cwd=tmp_path)
    assert "search" in out


def test_wheel_cli_round_trip(venv: Path, tmp_path: Path) -> None:
    env = venv_env(tmp_path / "data")
    memd = venv / "bin" / "memd"
    run([memd, "add", "I prefer tabs over spaces", "--user", "alice"], env=env, cwd=tmp_path)
    hits = json.loads(
        run([memd, "search", "tabs", "--user", "alice", "--json"], env=env, cwd=tmp_path)
    )
    assert isinstance(hits, list) and hits, hits
    assert "tabs" in hits[0]["text"]
