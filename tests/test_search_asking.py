"""User messages that only ask, in a message ranking (memd.engine.retrieval.asking,
``search_questions_lower``): they count half their score, below the statements that
match as well; nothing is dropped and the parts still add up."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_search_second_round import searched

from memd.config import Settings, load_settings
from memd.engine.retrieval.asking import WEIGHT, asks_only, lowered
from memd.engine.retrieval.retrieve import MessageRanking
from memd.server.watch import LIVE_KEYS
from memd.types import Message

NOW = 1_780_000_000.0
QUESTION = "Is the letter to the landlord too formal?"
ASKED = "Is the letter to the landlord too formal now?"
STATED = "The letter to the landlord sounded too formal, I thought."


def message(mid: str, text: str, role: str = "user") -> Message:
    return Message(id=mid, session_id=mid, user_id="u", turn_index=0, role=role,
                   content=text, token_count=1, created_at=NOW)


def test_a_message_that_only_asks_counts_its_weight_and_moves_down() -> None:
    scored = [(message("q", "How would I type-annotate that?"), 0.50, {"similarity": 0.50}),
              (message("s", "We picked Go because hiring for it is easy."), 0.40,
               {"similarity": 0.40}),
              (message("t", "thanks"), 0.10, {"similarity": 0.10})]
    got = lowered(scored)
    assert [m.id for m, _, _ in got] == ["s", "q", "t"]
    assert got[1][1] == pytest.approx(0.50 * WEIGHT)
    assert got[0][1] == 0.40 and got[2][1] == 0.10  # statements keep their scores
    for _, total, parts in got:
        assert sum(parts.values()) == pytest.approx(total)  # "asking" says by how much
    assert "asking" in got[1][2] and "asking" not in got[0][2]


def test_a_question_beside_a_statement_is_no_question_only() -> None:
    assert asks_only("Can you make it shorter?")
    assert asks_only("Can you make it shorter? What would a reviewer ask?")
    assert asks_only("how do I profile it")  # a question without its mark
    assert not asks_only("Can you make it shorter? Also, the board meets on the 19th.")
    assert not asks_only("Draft a polite message to Lars.")
    assert not asks_only("")


def test_assistant_messages_and_unchanged_lists_keep_their_order() -> None:
    reply = message("r", "Would you like it shorter?", role="assistant")
    scored = [(reply, 0.5, {"similarity": 0.5}),
              (message("s", "The board meets in May."), 0.4, {"similarity": 0.4})]
    assert lowered(scored) == scored
    assert lowered([]) == []


def test_search_puts_the_statement_above_the_question(backend: str, tmp_path: Path,
                                                      ) -> None:
    sessions = [[ASKED], [STATED]]

    def hits(on: bool) -> list[tuple[str, dict[str, float]]]:
        found = searched(backend, tmp_path / str(on), QUESTION, sessions,
                         search_questions_lower=on)
        return [(h.text, h.breakdown) for h in found]

    off, on = hits(False), hits(True)
    assert [t for t, _ in off] == [ASKED, STATED]  # by its words the question is closer
    assert [t for t, _ in on] == [STATED, ASKED]
    assert on[1][1]["asking"] < 0 and "asking" not in off[0][1]


def test_the_setting_is_on_by_default_live_and_reads_as_a_switch(tmp_path: Path) -> None:
    (tmp_path / "memd.toml").write_text('search_questions_lower = "off"\n', "utf-8")
    read = load_settings(tmp_path / "memd.toml")
    assert [MessageRanking.of(s).asking for s in (Settings(), read)] == [True, False]
    assert MessageRanking.of(replace(Settings(), search_questions_lower=True)).asking
    assert "search_questions_lower" in LIVE_KEYS
