"""The prompts real agent CLIs send in user-role messages (qwen-code, opencode, Cline,
Continue; copied from their published packages into tests/fixtures/client_prompts/) give
no memory, no fact and no standing instruction, read alone or through a whole chat."""

from __future__ import annotations

from pathlib import Path

import pytest

import memd
from memd.engine.learning.extract import extract
from memd.engine.learning.templates import user_words

PROMPTS = sorted((Path(__file__).parent / "fixtures" / "client_prompts").glob("*.txt"))
# Prompts whose sentences the rules would read as the user's standing instructions.
TEMPTING = ("qwen-code-auto-memory.txt", "opencode-compaction.txt", "opencode-summary.txt",
            "opencode-max-steps.txt", "cline-command.txt")


def test_the_corpus_holds_the_prompts_that_became_instructions() -> None:
    names = {p.name for p in PROMPTS}
    assert set(TEMPTING) <= names and len(names) >= 12
    for name in TEMPTING:  # read as the user's prose, each is a standing instruction
        found = extract((PROMPTS[0].parent / name).read_text("utf-8"))
        assert any(ex.provenance.name == "INSTRUCTION" for ex in found), name


@pytest.mark.parametrize("path", PROMPTS, ids=lambda p: p.stem)
def test_a_client_prompt_extracts_nothing(path: Path) -> None:
    assert extract(user_words(path.read_text("utf-8"))) == []


def test_a_chat_of_client_prompts_leaves_no_memory_and_no_fact(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        for path in PROMPTS:
            session = engine.create_session("local")
            engine.append(session.id, "local", [
                {"role": "user", "content": path.read_text("utf-8")},
                {"role": "assistant", "content": "Done."},
            ])
        while engine.run_jobs():
            pass
        assert engine.list("local") == []
        assert engine.facts("local") == []
