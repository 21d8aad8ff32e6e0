"""A long paragraph that comes back in another session is a client's text, whatever it
says: extraction leaves it out from then on, and what it gave in its first session is
retired. Short paragraphs a user repeats stay the user's."""

from __future__ import annotations

from pathlib import Path

import memd
from memd.engine import recurring
from memd.engine.recurring import RETIRED_TAG, paragraph_key

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
