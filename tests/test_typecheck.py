"""CI's type check catches a drifted contract: a copy of the package with a break planted
in each store and in the CLI's engine calls fails ``mypy`` with the expected errors, and
the same copy without them passes.

Each backend builds its store from parts (memd/backends/*/store.py), each handed to
``ComposedStore`` as a parameter typed by its role protocol, so a drifted part fails where
the store is built; each assigns its class to ``StoreClass``, which holds the class and the
stores it opens to the ``Store`` protocol; ``open_engine`` returns a typed ``Memd``, so the
CLI's calls are checked against the engine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plant:
    """A break: ``old`` becomes ``new`` in ``path``; mypy's output then holds ``expected``
    (``{line}``: the line of the error, found in the planted copy: the one holding
    ``at``, else the planted line) and, when given, the ``member`` as the notes show it
    (so the error names what drifted)."""

    path: str
    old: str
    new: str
    expected: str
    member: str = ""
    at: str = ""


PLANTS = {
    "postgres-widened-return": Plant(
        "memd/backends/postgres/memories.py",
        "    ) -> Memory:\n        bad = set(changes) - set(MEMORY_UPDATABLE) - set(STATS_",
        "    ) -> Memory | None:\n        bad = set(changes) - set(MEMORY_UPDATABLE) - set(STATS_",
        ('memd/backends/postgres/store.py:{line}: error: Argument "memories" to "__init__" '
         'of "ComposedStore" has incompatible type "PostgresMemories"; expected "MemoryStore"'),
        "note:         def update_memory(self, user_id: str, memory_id: str, vector: ",
        "memories=self.memories",
    ),
    "sqlite-changed-parameter": Plant(
        "memd/backends/sqlite/memories.py",
        "        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter\n",
        "        self, user_id: str, vector: Vector, k: str, flt: MemoryFilter\n",
        ('memd/backends/sqlite/store.py:{line}: error: Argument "memories" to "__init__" '
         'of "ComposedStore" has incompatible type "SQLiteMemories"; expected "MemoryStore"'),
        "note:         def nearest_memories(self, user_id: str, vector: ",
        "memories=self.memories",
    ),
    "cli-misspelled-method": Plant(
        "memd/cli/memories.py",
        "            result = m.add(text, store_user(m, user_id),",
        "            result = m.addd(text, store_user(m, user_id),",
        'memd/cli/memories.py:{line}: error: "Memd" has no attribute "addd"',
    ),
    "cli-wrong-argument-type": Plant(
        "memd/cli/memories.py",
        "store_user(m, user_id), k=k,",
        "store_user(m, user_id), k=str(k),",
        'memd/cli/memories.py:{line}: error: Argument "k" to "search" of "Memd" has '
        'incompatible type "str"; expected "int"',
    ),
}


def _error_line(tree: Path, plant: Plant) -> int:
    """Where mypy reports ``plant``: the line holding ``plant.at`` (the part handed to
    the store), or the planted line itself."""
    path = plant.expected.split(":", 1)[0]
    lines = (tree / path).read_text("utf-8").splitlines()
    anchor = plant.at or plant.new.strip()
    return next(i for i, text in enumerate(lines, 1) if anchor in text)


def _mypy(tree: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """CI's type check (pyproject.toml's settings) over the copy in ``tree``."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary",
         "--show-absolute-path"],
        capture_output=True, text=True, cwd=tree, timeout=900,
    )


@dataclass(frozen=True)
class Checked:
    tree: Path
    clean: subprocess.CompletedProcess[str]
    planted: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """mypy over a copy of the package, then over the same copy with every plant (the
    second run reuses the first one's cache, so it checks only what the plants touch).
    The first starts from the checkout's own cache when there is one (CI's type check
    just made it): mypy checks each cached module against its source's hash, so only
    what differs is checked again, and it never caches a module with errors."""
    tree = tmp_path_factory.mktemp("typecheck")
    shutil.copytree(REPO / "memd", tree / "memd",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tree / "pyproject.toml")
    cache = tree / ".mypy_cache"
    if (REPO / ".mypy_cache").is_dir():
        shutil.copytree(REPO / ".mypy_cache", cache)
    clean = _mypy(tree, cache)
    for plant in PLANTS.values():
        target = tree / plant.path
        text = target.read_text("utf-8")
        assert text.count(plant.old) == 1, f"{plant.path} no longer holds {plant.old!r}"
        target.write_text(text.replace(plant.old, plant.new), "utf-8")
    return Checked(tree, clean, _mypy(tree, cache))


def test_the_unplanted_copy_passes(checked: Checked) -> None:
    assert checked.clean.returncode == 0, checked.clean.stdout + checked.clean.stderr


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_planted_break_fails_the_type_check(checked: Checked, name: str) -> None:
    plant = PLANTS[name]
    assert checked.planted.returncode == 1, checked.planted.stderr
    expected = plant.expected.format(line=_error_line(checked.tree, plant))
    assert expected in checked.planted.stdout, checked.planted.stdout
    assert plant.member in checked.planted.stdout, checked.planted.stdout


def test_the_errors_are_in_the_copy(checked: Checked) -> None:
    """The check read the planted copy, not the installed package."""
    assert str(checked.tree) in checked.planted.stdout
