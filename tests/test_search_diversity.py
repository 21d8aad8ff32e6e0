"""The first messages of a ranking chosen by maximal marginal relevance
(memd.engine.retrieval.diverse, ``search_diversity``): a message that says what one above
it says gives its place to one that says something else; the pool keeps its scores, the
second round's links are not penalised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pg
import pytest

from memd.config import Settings
from memd.engine.retrieval.diverse import diversified
from memd.engine.retrieval.retrieve import MessageRanking
from memd.types import Hit, Message

NOW = 1_780_000_000.0


def message(mid: str) -> Message:
    return Message(id=mid, session_id="s", user_id="u", turn_index=0, role="user",
                   content=mid, token_count=1, created_at=NOW)


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


A, SAME, OTHER = unit(1, 0, 0), unit(0.99, 0.1, 0), unit(0, 1, 0)


def test_a_message_that_says_what_one_above_says_gives_way() -> None:
    scored = [(message("a"), 0.50, {"similarity": 0.50}),
              (message("same"), 0.45, {"similarity": 0.45}),
              (message("other"), 0.40, {"similarity": 0.40}),
              (message("below"), 0.10, {"similarity": 0.10})]
    got = diversified(scored, [A, SAME, OTHER, None], pool=3, penalty=0.1)
    assert [m.id for m, _, _ in got] == ["a", "other", "same", "below"]
    assert [t for _, t, _ in got] == [0.50, 0.45, 0.40, 0.10]
    for _, total, parts in got:
        assert sum(parts.values()) == pytest.approx(total)
    assert got[0][2] == {"similarity": 0.50}  # not moved: untouched


def test_the_second_round_s_link_and_a_message_without_a_vector_keep_their_place() -> None:
    scored = [(message("a"), 0.50, {"similarity": 0.50}),
              (message("link"), 0.45, {"similarity": 0.40, "second_round": 0.05}),
              (message("unknown"), 0.44, {"similarity": 0.44}),
              (message("other"), 0.40, {"similarity": 0.40})]
    got = diversified(scored, [A, SAME, None, OTHER], pool=4, penalty=0.1)
    assert [m.id for m, _, _ in got] == ["a", "link", "unknown", "other"]
    assert diversified(scored, [None] * 4) == scored
    assert diversified([], []) == []


FIRST = "The deploy script copies the build to the staging host."
COPY = "The deploy script copies the build to the staging host again."
ELSE = "Dana says the staging host is only reached over the VPN."
QUESTION = "How does the deploy script reach the staging host?"


def searched(backend: str, data_dir: Path, on: bool) -> list[Hit]:
    with pg.open_engine(backend, data_dir, clock=lambda: NOW, search_second_round=False,
                        search_diversity=on) as m:
        sid = m.create_session("u").id
        m.append(sid, "u", [{"role": "user", "content": t} for t in (FIRST, COPY, ELSE)])
        while m.run_jobs():
            pass
        return m.search(QUESTION, "u", k=10, kinds=["message"])


def test_search_lets_a_different_message_before_a_near_copy(backend: str,
                                                            tmp_path: Path) -> None:
    on = searched(backend, tmp_path / "on", on=True)
    off = searched(backend, tmp_path / "off", on=False)
    assert [h.text for h in off[:2]] in ([FIRST, COPY], [COPY, FIRST])
    assert [h.score for h in on] == [h.score for h in off]
    assert {h.text for h in on} == {h.text for h in off}
    for h in on:
        assert sum(h.breakdown.values()) == pytest.approx(h.score)
    if backend == "sqlite":  # PostgreSQL's keyword rank puts the third too far below
        assert on[1].text == ELSE and on[1].breakdown["diverse"] > 0.0


def test_the_setting_is_off_by_default() -> None:
    assert MessageRanking.of(Settings()).diverse is False
    assert MessageRanking.of(Settings(search_diversity=True)).diverse is True
