"""A long paragraph that comes back in another session is a client's text, whatever it
says: extraction leaves it out from then on, and what it gave in its first session is
retired. Short paragraphs a user repeats stay the user's."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

import memd
from memd.engine.learning import recurring
from memd.engine.learning.recurring import RETIRED_TAG, paragraph_key
from memd.models.helper import ChatMessage

# An unknown client's context block: no template, no tag, long and sent in every chat.
PREAMBLE = (
    "Agent context for {day}. Workspace at /home/dev/{project}. Always run the full test "
    "suite before you answer, never use any tool that is not listed in the manifest, and "
    "do not inspect git history unless the task needs it. Keep the answer in the format "
    "the integration expects and report every file you touched at the end of the turn."
)


def preamble(day: str, project: str) -> str:
    return PREAMBLE.format(day=day, project=project)


def chat(engine: memd.Memd, *paragraphs: str) -> str:
    session = engine.create_session("local")
    engine.append(session.id, "local", [{"role": "user", "content": "\n\n".join(paragraphs)},
                                         {"role": "assistant", "content": "OK."}])
    while engine.run_jobs():
        pass
    return session.id


def test_a_paragraph_recurs_by_its_words_not_its_dates_or_paths() -> None:
    a = paragraph_key(preamble("2026-03-03", "rocket"))
    assert a is not None and a == paragraph_key(preamble("2026-04-11", "satellite/app"))
    assert a != paragraph_key(preamble("2026-03-03", "x") + " Also use tabs.")
    assert paragraph_key("Run the tests again please.") is None  # short: never counted


def test_a_recurring_paragraph_is_left_out_and_its_memories_retired(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        first = chat(engine, preamble("2026-03-03", "rocket"), "I prefer tabs over spaces.")
        texts = {m.text for m in engine.list("local")}
        assert any("test suite" in t for t in texts)  # nobody could tell yet
        assert any("tabs" in t for t in texts)
        chat(engine, preamble("2026-03-04", "rocket"), "Add a --verbose flag to the CLI.")
        left = [m.text for m in engine.list("local")]
        assert left == ["User prefers tabs over spaces"], left  # the user's words stay
        retired = [m for m in engine.store.iter_memories("local") if RETIRED_TAG in m.tags]
        assert retired and all(not m.is_active and m.session_id == first for m in retired)
        # a third chat with it extracts nothing from it
        chat(engine, preamble("2026-03-05", "rocket"))
        assert [m.text for m in engine.list("local")] == ["User prefers tabs over spaces"]


def test_a_fact_from_a_recurring_paragraph_is_deleted(tmp_path: Path) -> None:
    note = ("The deploy host is deploy.internal.example and it is reached through the "
            "bastion that the platform team runs for every project, with credentials from "
            "the vault. I deploy with Kubernetes on every service the monorepo ships.")
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        chat(engine, note)
        assert [f.key for f in engine.facts("local")] == ["deploy_tool"]
        chat(engine, note)
        assert engine.facts("local") == [] and engine.list("local") == []


def test_a_short_paragraph_said_in_every_chat_stays_the_users(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        for _ in range(3):
            chat(engine, "Always use pytest for the tests.")
        [kept] = engine.list("local")
        assert "pytest" in kept.text and kept.is_active


def test_the_jobs_read_the_message_without_recurring_paragraphs(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        chat(engine, preamble("2026-03-03", "rocket"))
        chat(engine, preamble("2026-03-04", "rocket"))
        text = preamble("2026-03-05", "rocket") + "\n\nI deploy with Docker."
        assert recurring.user_text(engine.store, "local", text) == "I deploy with Docker."


class FactHelper:
    """A helper model that reads one fact in every message it is given."""

    name = model = "scripted"
    context_length = 2048

    def __init__(self, category: str, key: str, value: str) -> None:
        self.answer = json.dumps({"facts": [{"category": category, "key": key,
                                             "value": value, "confidence": 0.9}]})
        self.read: list[str] = []

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        if json_schema is not None and "title" in json_schema.get("properties", {}):
            return json.dumps({"title": "Untitled"})
        self.read.append(messages[-1]["content"])
        return self.answer

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        yield self.complete(messages, max_tokens=max_tokens, temperature=temperature)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_what_the_helper_read_in_a_recurring_paragraph_is_retired(tmp_path: Path) -> None:
    """The helper's facts are not the rules': re-reading the paragraph with the rules does
    not find them, so they are judged by their grounding in what the user's words left."""
    pipeline = " Every build goes through the Halibut pipeline."
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        engine.jobs.helper = FactHelper("preference", "build_pipeline", "Halibut")
        chat(engine, preamble("2026-03-03", "rocket") + pipeline, "I prefer tabs over spaces.")
        assert {f.value for f in engine.facts("local")} == {"Halibut", "tabs"}
        assert any("Halibut" in m.text for m in engine.list("local"))  # nobody could tell
        chat(engine, preamble("2026-03-04", "rocket") + pipeline, "Add a --verbose flag.")
        assert [f.value for f in engine.facts("local")] == ["tabs"]
        assert [m.text for m in engine.list("local")] == ["User prefers tabs over spaces"]
        [gone] = [m for m in engine.store.iter_memories("local") if "Halibut" in m.text]
        assert not gone.is_active and RETIRED_TAG in gone.tags


def test_a_helper_fact_the_users_own_words_still_hold_stays(tmp_path: Path) -> None:
    pipeline = " Every build goes through the Halibut pipeline."
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        engine.jobs.helper = FactHelper("preference", "build_pipeline", "Halibut")
        chat(engine, preamble("2026-03-03", "rocket") + pipeline,
             "My builds all go through Halibut, keep it that way.")
        chat(engine, preamble("2026-03-04", "rocket") + pipeline, "Add a --verbose flag.")
        assert "Halibut" in {f.value for f in engine.facts("local")}
