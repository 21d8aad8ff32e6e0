"""Time cues in search (memd.engine.retrieval.timecues): each rule reads the span of
dates its expression points at, and a search whose question names a time raises the
messages said then, never above the best direct hit."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pg
import pytest

from memd.config import Weights
from memd.engine.retrieval.timecues import DAY, RECENT_DAYS, Window, boost, window
from memd.types import Hit, Message

NOW = datetime(2026, 5, 20, 12, tzinfo=UTC).timestamp()


def days_back(query: str) -> tuple[float, float]:
    """The window of ``query`` as days before NOW (start, end)."""
    got = window(query, NOW)
    assert got is not None, query
    return (NOW - got.start) / DAY, (NOW - got.end) / DAY


@pytest.mark.parametrize(("query", "lo", "hi"), [
    ("what did I eat 3 days ago", 2.0, 4.0),
    ("the plan we made two weeks ago", 14 - 14 / 3, 14 + 14 / 3),
    ("a couple of months ago we moved", 40.0, 80.0),
    ("the idea from a week ago", 7 - 7 / 3, 7 + 7 / 3),
])
def test_n_units_ago_is_centred_on_that_many_units_back(query: str, lo: float,
                                                        hi: float) -> None:
    end, start = days_back(query)[1], days_back(query)[0]
    assert end == pytest.approx(lo) and start == pytest.approx(hi)


def test_yesterday_is_the_last_two_days() -> None:
    assert days_back("What did I say yesterday?") == (2.0, 0.0)


@pytest.mark.parametrize(("query", "days"), [("last week", 14.0), ("last month", 60.0),
                                             ("over the past year", 730.0)])
def test_last_unit_reaches_back_two_units_to_now(query: str, days: float) -> None:
    assert days_back(f"what happened {query}?") == (days, 0.0)


@pytest.mark.parametrize("query", ["Which one did I pick most recently?",
                                   "What have I been reading lately?",
                                   "What's our release day these days?"])
def test_recently_is_the_last_weeks(query: str) -> None:
    assert days_back(query) == (RECENT_DAYS, 0.0)


def test_before_a_date_is_everything_until_it() -> None:
    got = window("what did we use before March 3?", NOW)
    assert got is not None and got.start == float("-inf")
    assert got.end == datetime(2026, 3, 3, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("query", ["what changed after 2026-03-03", "since March 3rd",
                                   "anything new since the 3rd of March"])
def test_after_a_date_is_from_it_to_now(query: str) -> None:
    got = window(query, NOW)
    assert got is not None and got.end == NOW
    assert got.start == datetime(2026, 3, 3, tzinfo=UTC).timestamp()


def test_a_date_later_in_the_year_means_last_year() -> None:
    got = window("what did we agree after December 1?", NOW)
    assert got is not None and got.start == datetime(2025, 12, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("query", ["What did we settle on after the outage?",
                                   "Which week works for you?", "before February 31",
                                   "How many days does a sprint last?"])
def test_no_cue_no_window(query: str) -> None:
    assert window(query, NOW) is None


def _msg(mid: str, when: float) -> Message:
    return Message(id=mid, session_id="s", user_id="u", role="user", content=mid, turn_index=0,
                   token_count=1, created_at=when)


def test_boost_raises_dated_hits_under_the_best() -> None:
    cue = Window(NOW - 10 * DAY, NOW, "recently")
    old, new, top = _msg("old", NOW - 50 * DAY), _msg("new", NOW - DAY), _msg("top", 0.0)
    got = boost([(top, 0.9, {}), (old, 0.5, {}), (new, 0.49, {})], cue, Weights())
    assert [m.id for m, _, _ in got] == ["top", "new", "old"]
    assert got[1][2]["time_cue"] > 0 and got[1][1] < 0.9
    assert "time_cue" not in got[2][2]


EARLY = "What time does Yuki want the daily standup? At 9:30 sharp."
LATE = "Yuki moved it to 10:15."
OLD = "Yuki wants the notes kept short."
QUESTION = "What time does Yuki want the daily standup, most recently?"


def ranked(backend: str, data_dir: Path, on: bool) -> list[Hit]:
    """The hits for a recency question over two remarks made some 60 days ago and one
    made two days ago, the first worded closest to the question."""
    clock = [NOW - 60 * DAY]
    with pg.open_engine(backend, data_dir, clock=lambda: clock[0],
                        search_time_cues=on) as m:
        for when, text in ((NOW - 60 * DAY, EARLY), (NOW - 59 * DAY, OLD),
                           (NOW - 2 * DAY, LATE)):
            clock[0] = when
            m.append(m.create_session("u").id, "u", [{"role": "user", "content": text}])
        clock[0] = NOW
        while m.run_jobs():
            pass
        return m.search(QUESTION, "u", k=10, kinds=["message"])


def test_a_recency_question_raises_the_recent_remark(backend: str, tmp_path: Path) -> None:
    on = ranked(backend, tmp_path / "on", True)
    off = ranked(backend, tmp_path / "off", False)
    late_on = next(h for h in on if h.text == LATE)
    late_off = next(h for h in off if h.text == LATE)
    assert late_on.breakdown["time_cue"] > 0 and "time_cue" not in late_off.breakdown
    assert late_on.score > late_off.score
    assert on[0].text == EARLY and on[0].score > late_on.score  # the best hit stays first
    assert on[1].text == LATE  # right after it, above the older remark OLD
