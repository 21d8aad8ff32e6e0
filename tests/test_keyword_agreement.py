"""Keyword evidence weighed by the meaning (memd.engine.retrieval.agreement,
``search_keyword_agreement``): a message that shares only a word with the question keeps
a floor's share of its keyword part, one that is also close in meaning keeps it whole."""

from __future__ import annotations

from pathlib import Path

import pg
import pytest

from memd.config import Settings, load_settings
from memd.engine.retrieval.agreement import FLOOR, agreed
from memd.engine.retrieval.retrieve import MessageRanking
from memd.types import Hit, Message

NOW = 1_780_000_000.0
QUESTION = "Would the new parser handle Rust macros well?"
CLOSE = "The parser handles Rust macros well, even the nested ones."
ALSO_CLOSE = "Rust macros and the parser: we wrote the handling ourselves."
ONE_WORD = "The new kitchen table arrived today."


def message(mid: str) -> Message:
    return Message(id=mid, session_id="s", user_id="u", turn_index=0, role="user",
                   content=mid, token_count=1, created_at=NOW)


def parts(similarity: float, keyword: float) -> dict[str, float]:
    return {"similarity": similarity, "keyword": keyword, "freshness": 0.0}


def test_a_keyword_match_without_the_meaning_keeps_the_floor() -> None:
    scored = [(message("word"), 0.15, parts(0.0, 0.15)),
              (message("close"), 0.14, parts(0.12, 0.02)),
              (message("closest"), 0.20, parts(0.20, 0.0)),
              (message("half"), 0.10, parts(0.06, 0.04))]
    got = {m.id: (total, p) for m, total, p in agreed(scored)}
    # the reference is the second best similarity, 0.12: "close" keeps its whole part
    assert got["close"] == (pytest.approx(0.14), parts(0.12, 0.02))
    assert got["word"][1]["keyword"] == pytest.approx(0.15 * FLOOR)
    assert got["word"][0] == pytest.approx(0.15 * FLOOR)
    share = FLOOR + (1 - FLOOR) * 0.5
    assert got["half"][1]["keyword"] == pytest.approx(0.04 * share)
    assert [m.id for m, _, _ in agreed(scored)] == ["closest", "close", "half", "word"]


def test_a_message_that_names_what_the_question_names_keeps_its_keyword_part() -> None:
    scored = [(message("Ticket #4411 again"), 0.15, parts(0.0, 0.15)),
              (message("the 4411th try"), 0.15, parts(0.0, 0.15)),
              (message("close"), 0.14, parts(0.12, 0.02)),
              (message("closest"), 0.20, parts(0.20, 0.0))]
    got = {m.id: p["keyword"] for m, _, p in agreed(scored, ["4411", "juniper"])}
    assert got["Ticket #4411 again"] == 0.15
    assert got["the 4411th try"] == pytest.approx(0.15 * FLOOR)  # not the word itself


def test_nothing_changes_without_a_similarity_to_weigh_by() -> None:
    scored = [(message("a"), 0.15, parts(0.0, 0.15)), (message("b"), 0.1, parts(0.0, 0.1))]
    assert agreed(scored) == scored
    assert agreed([]) == []


def searched(backend: str, data_dir: Path, on: bool) -> list[Hit]:
    with pg.open_engine(backend, data_dir, clock=lambda: NOW, search_second_round=False,
                        search_keyword_agreement=on) as m:
        sid = m.create_session("u").id
        m.append(sid, "u", [{"role": "user", "content": t}
                            for t in (CLOSE, ALSO_CLOSE, ONE_WORD)])
        while m.run_jobs():
            pass
        return m.search(QUESTION, "u", k=10, kinds=["message"])


def test_search_weighs_keywords_by_the_meaning(backend: str, tmp_path: Path) -> None:
    on = {h.text: h for h in searched(backend, tmp_path / "on", on=True)}
    off = {h.text: h for h in searched(backend, tmp_path / "off", on=False)}
    word_on, word_off = on[ONE_WORD], off[ONE_WORD]
    assert word_off.breakdown["keyword"] > 0.0  # it shares "new" with the question
    assert word_on.breakdown["keyword"] < word_off.breakdown["keyword"]
    assert word_on.score < word_off.score
    assert on[CLOSE].breakdown == off[CLOSE].breakdown  # close in meaning: kept whole


def test_the_setting_reads_as_a_switch(tmp_path: Path) -> None:
    assert Settings().search_keyword_agreement is True
    assert MessageRanking.of(Settings()).agreement is True
    assert MessageRanking.of(Settings(search_keyword_agreement=False)).agreement is False
    path = tmp_path / "memd.toml"
    path.write_text('search_keyword_agreement = "off"\n', "utf-8")
    assert load_settings(path).search_keyword_agreement is False
