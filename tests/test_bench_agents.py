"""The recorded agent corpus replayed through the engine (bench.bench_agents): memd learns
only what the user typed, keeps one session per conversation, and makes none for a side
request; and the replay's figures see it when that fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_real_agents import HOST, PROMPTS

from bench import bench_agents


def test_the_typed_prompts_are_those_of_the_recording() -> None:
    assert bench_agents.TYPED == PROMPTS


def test_the_corpus_teaches_only_what_the_user_typed() -> None:
    result = bench_agents.run()
    assert result["junk"] == [] and result["junk_rate"] == 0.0
    assert any(HOST in t for t in result["learnt_items"]), result["learnt_items"]
    assert result["conversations"] == 8  # four clients, two runs each
    assert result["sessions"] == result["conversations"]
    assert result["split_conversations"] == []
    assert result["side_requests"] >= 2  # opencode's title requests
    assert result["side_as_turns"] == 0 and result["side_sessions"] == 0


def _copy(tmp_path: Path, edit: str) -> Path:
    """The corpus with every text ``edit`` names changed: ``old=>new``."""
    old, new = edit.split("=>")
    folder = tmp_path / "agents"
    shutil.copytree(bench_agents.CORPUS, folder)
    for path in folder.glob("*.jsonl"):
        path.write_text(path.read_text(encoding="utf-8").replace(old, new), "utf-8")
    return folder


def test_a_memory_the_user_did_not_type_is_junk(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "Read notes.txt and tell me=>I prefer tabs over spaces. Tell me")
    result = bench_agents.run(folder)
    assert any("tabs" in t for t in result["junk"]), result
    assert result["junk_rate"] > 0


def test_a_side_request_taken_for_a_turn_is_counted(tmp_path: Path) -> None:
    # opencode's title prompt, reworded so that no side-prompt opening knows it
    folder = _copy(tmp_path, "You are a title generator.=>You write headlines.")
    records = [json.loads(line) for line in
               (folder / "opencode.jsonl").read_text(encoding="utf-8").splitlines()]
    assert any(r["side"] and "You write headlines." in json.dumps(r["body"]) for r in records)
    result = bench_agents.run(folder)
    assert result["side_as_turns"] >= 1
    assert result["side_sessions"] >= 1
