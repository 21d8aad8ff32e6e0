"""Shared fixtures for the whole suite.

Every test is hermetic (autouse ``hermetic_env``): memd's data, config and XDG dirs point
into the test's ``tmp_path``, no ``MEMD_*`` setting leaks in from the developer's shell,
the fake embedder is the default (tests of the real MiniLM set ``MEMD_EMBEDDER=minilm``
with ``monkeypatch``), and Hugging Face never goes to the network. Subprocesses a test
starts inherit this environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pg import BACKENDS, pg_cleanup, pg_session  # noqa: F401  (autouse: per-test databases)

import memd
from memd.engine.memory import Memd
from memd.server.app import create_app

_LEAKY_VARS = ("MEMD_CONFIG", "MEMD_DB", "MEMD_EMBEDDER_PATH", "MEMD_USER")


@pytest.fixture(autouse=True)
def hermetic_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point memd at ``tmp_path``; returns the data dir (``tmp_path / "data"``)."""
    data_dir = tmp_path / "data"
    for name in _LEAKY_VARS:
        # load_settings raises if MEMD_CONFIG names a missing file, so unset it and let
        # XDG_CONFIG_HOME lead the default lookup to an empty dir instead.
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMD_DATA_DIR", str(data_dir))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # serve's log file
    monkeypatch.setenv("MEMD_EMBEDDER", "fake")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return data_dir


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of a registered store (memd.registry): a test or fixture that takes it
    runs once on each backend."""
    return str(request.param)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Memd]:
    """A memd engine over a fresh SQLite store in ``tmp_path / "d"``."""
    m = memd.open(tmp_path / "d")
    yield m
    m.close()


@pytest.fixture
def client(engine: Memd) -> Iterator[TestClient]:
    """The daemon's app over ``engine``, in-process, without the job worker."""
    with TestClient(create_app(engine, run_jobs=False), base_url="http://127.0.0.1") as c:
        yield c


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `-p no:xdist` runs without it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The suite runs on ``-n auto`` workers (pyproject's addopts): one per CPU this
    process may use, at most four (each worker starts its own PostgreSQL and models)."""
    usable = getattr(os, "sched_getaffinity", None)
    cpus = len(usable(0)) if usable is not None else os.cpu_count() or 1
    return max(1, min(4, cpus))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each schemathesis case its own node id: the plugin names its items by the
    API operation (``test_api[GET /health]``) but leaves them the test function's node
    id, and pytest-xdist, which tells items apart by node id, would run only one."""
    for item in items:
        if item.name.endswith("]") and not item.nodeid.endswith("]"):
            operation = item.name.partition("[")[2].removesuffix("]")
            item._id = item._id.with_params(operation)  # pytest's NodeId of the item
