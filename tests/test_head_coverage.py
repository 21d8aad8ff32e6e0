"""The head of a message ranking ordered by keyword coverage (memd.engine.retrieval.head,
``search_head_coverage``): among the first messages, one that shares a single word of
the question no longer comes first by that word; the head keeps its scores and the rest
of the list keeps its places."""

from __future__ import annotations

from pathlib import Path

import pg
import pytest

from memd.config import Settings, load_settings
from memd.engine.retrieval.head import HEAD, covered, ordered_head
from memd.engine.retrieval.relevance import content_words, stems
from memd.engine.retrieval.retrieve import MessageRanking
from memd.types import Hit, Message

NOW = 1_780_000_000.0
QUESTION = "Would a document store be a sensible fit for the next zanzibar service?"
ONE_WORD = "A zanzibar, for the one who is in it."
ANSWER = "We tried a document store for a service like that and it was no fit."
OTHER = "The kitchen table arrived today."
#: Remarks that make the answer's words common, so the rare word has the best BM25.
COMMON = ["The store was closed on Sunday, the document said.",
          "That service is a good fit, the document says.",
          "The store and the service: a fit.", "A document about the store service fit."]


def message(mid: str, text: str | None = None) -> Message:
    return Message(id=mid, session_id="s", user_id="u", turn_index=0, role="user",
                   content=text or mid, token_count=1, created_at=NOW)


def parts(similarity: float, keyword: float) -> dict[str, float]:
    return {"similarity": similarity, "keyword": keyword}


def test_a_keyword_part_counts_by_the_share_of_the_question_it_covers() -> None:
    wanted = stems(content_words("document store for the analytics service"))
    assert len(wanted) == 4
    assert covered(0.2, wanted, "our analytics vendor") == pytest.approx(0.2 * 2 / 4)
    assert covered(0.2, wanted, "a document store for a service") == 0.2  # 3 of 4
    assert covered(0.2, wanted, "nothing shared") == 0.0
    assert covered(0.2, frozenset(), "anything") == 0.2


def test_one_shared_word_no_longer_comes_first_and_the_head_keeps_its_scores() -> None:
    scored = [(message("word", ONE_WORD), 0.30, parts(0.15, 0.15)),
              (message("answer", ANSWER), 0.25, parts(0.22, 0.03)),
              (message("third", OTHER), 0.10, parts(0.10, 0.0))]
    rest = [(message(f"m{i}", OTHER), 0.05, parts(0.05, 0.0)) for i in range(HEAD)]
    got = ordered_head(scored + rest, QUESTION)
    assert [m.id for m, _, _ in got[:3]] == ["answer", "word", "third"]
    assert [t for _, t, _ in got[:3]] == [0.30, 0.25, 0.10]
    assert got[3:] == rest[:2] + rest[2:]  # below the head: as it was
    for _, total, p in got[:2]:
        assert sum(p.values()) == pytest.approx(total)  # "head" says by how much it moved
    assert got[2][2] == parts(0.10, 0.0)  # not moved: its parts untouched


def test_a_message_that_names_the_question_s_entity_keeps_its_place() -> None:
    scored = [(message("word", ONE_WORD), 0.30, parts(0.15, 0.15)),
              (message("answer", ANSWER), 0.25, parts(0.22, 0.03))]
    got = ordered_head(scored, QUESTION, ["zanzibar"])
    assert [m.id for m, _, _ in got] == ["word", "answer"]


def test_nothing_changes_without_content_words_or_a_second_message() -> None:
    scored = [(message("word", ONE_WORD), 0.30, parts(0.15, 0.15)),
              (message("answer", ANSWER), 0.25, parts(0.22, 0.03))]
    assert ordered_head(scored, "what would it be?") == scored
    assert ordered_head(scored[:1], QUESTION) == scored[:1]
    assert ordered_head([], QUESTION) == []


def searched(backend: str, data_dir: Path, on: bool) -> list[Hit]:
    with pg.open_engine(backend, data_dir, clock=lambda: NOW, search_second_round=False,
                        search_keyword_agreement=False, search_head_coverage=on,
                        search_diversity=False) as m:
        sid = m.create_session("u").id
        m.append(sid, "u", [{"role": "user", "content": t}
                            for t in (ONE_WORD, ANSWER, OTHER, *COMMON)])
        while m.run_jobs():
            pass
        return m.search(QUESTION, "u", k=10, kinds=["message"])


def test_search_orders_its_head_by_coverage(backend: str, tmp_path: Path) -> None:
    on = searched(backend, tmp_path / "on", on=True)
    off = searched(backend, tmp_path / "off", on=False)
    wanted = stems(content_words(QUESTION))

    def judged(h: Hit) -> float:
        keyword = h.breakdown["keyword"]
        return h.score - keyword + covered(keyword, wanted, h.text)

    assert [h.text for h in on[:HEAD]] == [h.text for h in sorted(off[:HEAD], key=judged,
                                                                   reverse=True)]
    assert [h.score for h in on] == [h.score for h in off]
    assert [h.text for h in on[HEAD:]] == [h.text for h in off[HEAD:]]
    for h in on:
        assert sum(h.breakdown.values()) == pytest.approx(h.score)
    if backend == "sqlite":  # FTS5's BM25 weighs the rare word: first by it alone
        assert off[0].text == ONE_WORD and off[0].breakdown["keyword"] > 0.0
        assert on[0].text != ONE_WORD


def test_the_setting_is_on_by_default_and_reads_as_a_switch(tmp_path: Path) -> None:
    (tmp_path / "memd.toml").write_text('search_head_coverage = "no"\n', "utf-8")
    read = load_settings(tmp_path / "memd.toml")
    assert [MessageRanking.of(s).head for s in (Settings(), read)] == [True, False]
