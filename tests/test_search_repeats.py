"""Repeated texts in a message ranking (memd.engine.retrieval.repeats,
``search_repeats_last``): a message whose words a better-ranked one says whole follows
the last message that is no such repeat; nothing is dropped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_search_second_round import searched

from memd.config import Settings, load_settings
from memd.engine.retrieval.repeats import once, words
from memd.engine.retrieval.retrieve import MessageRanking
from memd.server.watch import LIVE_KEYS
from memd.types import Message

NOW = 1_780_000_000.0
QUESTION = "Is that letter too formal?"
REPEATED = "Is that too formal?"
OTHER = "The letter to the landlord sounded too formal, I thought."


def message(mid: str, text: str) -> Message:
    return Message(id=mid, session_id=mid, user_id="u", turn_index=0, role="user",
                   content=text, token_count=1, created_at=NOW)


def test_later_copies_follow_the_last_other_text_in_their_order() -> None:
    scored = [(message("a1", "same"), 0.50, {"similarity": 0.50}),
              (message("b", "other"), 0.45, {"similarity": 0.45}),
              (message("a2", "same"), 0.44, {"similarity": 0.44}),
              (message("c", "third"), 0.30, {"similarity": 0.30}),
              (message("a3", "same"), 0.20, {"similarity": 0.20})]
    got = once(scored)
    assert [m.id for m, _, _ in got] == ["a1", "b", "c", "a2", "a3"]
    totals = [t for _, t, _ in got]
    assert totals[:3] == [0.50, 0.45, 0.30]  # the first of each text keeps its score
    assert totals == sorted(totals, reverse=True) and totals[3] < 0.30
    assert totals[4] == 0.20  # already below: unchanged
    for _, total, parts in got:
        assert sum(parts.values()) == pytest.approx(total)  # "repeat" says by how much
    assert "repeat" in got[3][2] and "repeat" not in got[4][2]


def test_a_request_said_again_inside_a_longer_message_is_a_repeat() -> None:
    scored = [(message("long", "Nice, that worked! Is that too formal?"), 0.5, {}),
              (message("other", "The letter went out."), 0.4, {}),
              (message("short", "is that TOO formal"), 0.3, {}),
              (message("ok", "ok"), 0.2, {}),  # inside "took" and "look", not a word there
              (message("more", "Is that too formal? Also, the board meets in May."), 0.1, {})]
    scored.insert(2, (message("took", "It took a look."), 0.35, {}))
    assert [m.id for m, _, _ in once(scored)] == ["long", "other", "took", "ok", "more",
                                                  "short"]
    assert words("Is that -- too formal?") == " is that too formal "
    assert words(" ?! ") == ""


def test_nothing_moves_without_a_copy_and_an_empty_text_is_no_copy() -> None:
    scored = [(message("a", ""), 0.5, {}), (message("b", ""), 0.4, {}),
              (message("c", "said"), 0.3, {})]
    assert once(scored) == scored


def test_only_the_user_s_messages_are_compared() -> None:
    reply = replace(message("reply", "You asked: is that too formal? Not at all."),
                    role="assistant")
    scored = [(reply, 0.5, {}), (message("asked", "Is that too formal?"), 0.4, {}),
              (replace(reply, id="again"), 0.3, {})]
    assert once(scored) == scored
    assert once([]) == []


def test_search_gives_the_first_places_to_distinct_texts(backend: str, tmp_path: Path,
                                                        ) -> None:
    sessions = [[REPEATED] for _ in range(5)] + [[OTHER]]

    def texts(on: bool) -> list[str]:  # the copies are questions: not weighed down here
        hits = searched(backend, tmp_path / str(on), QUESTION, sessions,
                        search_repeats_last=on, search_questions_lower=False)
        return [h.text for h in hits]

    off, on = texts(False), texts(True)
    assert off[:5] == [REPEATED] * 5  # every copy matches as well as the first
    assert on[:2] == [REPEATED, OTHER]
    assert sorted(on) == sorted(off)  # the same hits, copies moved, none dropped


def test_the_setting_is_on_by_default_live_and_reads_as_a_switch(tmp_path: Path) -> None:
    (tmp_path / "memd.toml").write_text('search_repeats_last = "off"\n', "utf-8")
    read = load_settings(tmp_path / "memd.toml")
    assert [MessageRanking.of(s).once for s in (Settings(), read)] == [True, False]
    assert "search_repeats_last" in LIVE_KEYS
