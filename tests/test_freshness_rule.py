"""Which questions a message's age bears on (memd.engine.retrieval.timecues.asks_recent,
``search_message_freshness = "auto"``), and how the setting reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.config import Settings, load_settings
from memd.engine.retrieval.retrieve import MessageRanking
from memd.engine.retrieval.timecues import asks_recent
from memd.errors import InvalidInput

NOW = 1_780_000_000.0

PRESENT = [
    "Who owns billing now?",
    "What is the latest on the Tessera migration?",
    "Which database do we currently run?",
    "What's the current plan for the cache?",
    "Is Ingrid still on leave?",
    "What does the team use these days?",
    "What did Omar most recently say about the deadline?",
    "Has anything changed lately?",
    "What did we decide last week about retries?",
    "What happened yesterday with the deploy?",
    "What changed since March 3?",
    "What did I plant two weeks ago?",
]
TIMELESS = [
    "Who owns billing?",
    "Which day did Omar originally pick for shipping?",
    "What time did Omar ask the team to meet seven weeks ago?",
    "What did we use before March 3?",
    "Would the team be fine with Rust here?",
    "What did we settle on for the piece that broke during the outage?",
]


@pytest.mark.parametrize("question", PRESENT)
def test_a_question_about_the_present_counts_age(question: str) -> None:
    assert asks_recent(question, NOW)


@pytest.mark.parametrize("question", TIMELESS)
def test_a_timeless_or_past_question_does_not(question: str) -> None:
    assert not asks_recent(question, NOW)


def test_the_mode_decides() -> None:
    timeless, present = TIMELESS[0], PRESENT[0]
    assert not MessageRanking(freshness="auto").ages(timeless, NOW)
    assert MessageRanking(freshness="auto").ages(present, NOW)
    assert MessageRanking(freshness="always").ages(timeless, NOW)
    assert not MessageRanking(freshness="never").ages(present, NOW)


def read(tmp_path: Path, line: str) -> str:
    """``search_message_freshness`` as a config file holding ``line`` sets it."""
    path = tmp_path / "memd.toml"
    path.write_text(f"search_message_freshness = {line}\n", "utf-8")
    return load_settings(path).search_message_freshness


def test_the_setting_reads_modes_and_the_old_switch(tmp_path: Path) -> None:
    assert Settings().search_message_freshness == "auto"
    assert read(tmp_path, '"Always"') == "always"
    assert read(tmp_path, "true") == "always"
    assert read(tmp_path, "false") == "never"
    assert read(tmp_path, '"off"') == "never"
    with pytest.raises(InvalidInput, match="auto, always, never"):
        read(tmp_path, '"sometimes"')
