"""How search ranks messages (memd.engine.retrieval.retrieve.MessageRanking): a remark made
in passing inside a message about something else is as close to a question as its own
passage, and where a message's age does not count (freshness "never", or "auto" for a
question that does not ask about the present) an old remark is not outranked by a recent
one for its age alone."""

from __future__ import annotations

from pathlib import Path

import pg

from memd.config import Settings
from memd.engine.retrieval.retrieve import MessageRanking
from memd.engine.retrieval.rounds import SecondRound
from memd.types import Hit

DAY = 86_400.0
NOW = 1_780_000_000.0

# The answer sits in the last sentence of a message about cooking.
PASSING = ("Can you give me a recipe for a quick weeknight curry with chickpeas and "
           "spinach, something my kids would eat without complaining about the heat? "
           "Also, unrelated: our analytics vendor keeps every customer record in one "
           "region only.")
QUESTION = "Which region does our analytics vendor keep customer records in?"
# Short remarks that share a few words with the question, closer to it than the long
# message as a whole by the fake embedder's cosine.
FILLERS = [f"Does our vendor keep the logs {i}?" for i in range(12)]


def searched(backend: str, data_dir: Path, sessions: list[tuple[float, list[str]]],
             question: str, **settings: bool | str) -> list[Hit]:
    """The message hits for ``question``, each session's user turns appended at its time,
    the question asked at NOW."""
    clock = [NOW]
    with pg.open_engine(backend, data_dir, clock=lambda: clock[0], **settings) as m:
        for when, turns in sessions:
            clock[0] = when
            m.append(m.create_session("u").id, "u",
                     [{"role": "user", "content": t} for t in turns])
        clock[0] = NOW
        while m.run_jobs():
            pass
        return m.search(question, "u", k=10, kinds=["message"])


def passing_ranked(backend: str, tmp_path: Path, on: bool) -> list[Hit]:
    # Without its passage the remark is far from the question in meaning, and keyword
    # agreement would then keep only a share of its keyword part: left off, so that the
    # whole-message hit is there to compare with.
    return searched(backend, tmp_path / f"passages-{on}",
                    [(NOW - DAY, [PASSING]), (NOW - DAY, FILLERS)], QUESTION,
                    search_passages=on, search_second_round=False,
                    search_keyword_agreement=False)


def test_a_remark_in_passing_is_found_by_its_passage(backend: str, tmp_path: Path) -> None:
    on = passing_ranked(backend, tmp_path, on=True)
    off = passing_ranked(backend, tmp_path, on=False)
    assert on[0].text == PASSING
    whole = next(h for h in off if h.text == PASSING)
    # its last sentence is closer to the question than the whole message about curry
    assert on[0].breakdown["similarity"] > whole.breakdown["similarity"]
    assert on[0].score > whole.score
    fillers_on = {h.text: h.breakdown["similarity"] for h in on if h.text in FILLERS}
    fillers_off = {h.text: h.breakdown["similarity"] for h in off if h.text in FILLERS}
    both = fillers_on.keys() & fillers_off.keys()
    assert both and all(fillers_on[t] == fillers_off[t] for t in both)  # one passage each


OLD = "Ingrid reviews every change to how Tessera bills customers."
RECENT = "Ingrid bought a new bike for the weekend rides."
WHO = "Who reviews changes to how Tessera bills customers, Ingrid?"
WHO_NOW = "Who reviews changes to how Tessera bills customers now, Ingrid?"


def aged(backend: str, tmp_path: Path, freshness: str, question: str = WHO) -> list[Hit]:
    """The hits for ``question`` over the answer said 50 days ago and a remark said an
    hour ago that shares only the name with it."""
    return searched(backend, tmp_path / f"fresh-{freshness}-{len(question)}",
                    [(NOW - 50 * DAY, [OLD]), (NOW - 3600.0, [RECENT])], question,
                    search_message_freshness=freshness, search_second_round=False)


def test_without_freshness_a_message_age_adds_nothing(backend: str, tmp_path: Path) -> None:
    off = aged(backend, tmp_path, freshness="never")
    on = aged(backend, tmp_path, freshness="always")
    assert all(h.breakdown["freshness"] == 0.0 for h in off)
    recent_on = next(h for h in on if h.text == RECENT)
    recent_off = next(h for h in off if h.text == RECENT)
    assert recent_on.breakdown["freshness"] > 0.0
    assert recent_off.score < recent_on.score
    assert off[0].text == OLD


def test_auto_counts_age_only_when_the_question_asks_about_now(
        backend: str, tmp_path: Path) -> None:
    timeless = aged(backend, tmp_path, freshness="auto")
    present = aged(backend, tmp_path, freshness="auto", question=WHO_NOW)
    assert all(h.breakdown["freshness"] == 0.0 for h in timeless)
    assert timeless[0].text == OLD
    assert next(h for h in present if h.text == RECENT).breakdown["freshness"] > 0.0


def test_the_ranking_follows_the_settings() -> None:
    got = MessageRanking.of(Settings(search_second_round=True, search_expand_kinds=False,
                                     search_time_cues=False, search_passages=True,
                                     search_message_freshness="never",
                                     search_keyword_agreement=False, search_second_hop=0,
                                     search_head_coverage=False, search_diversity=False,
                                     search_repeats_last=False,
                                     search_questions_lower=False))
    assert got == MessageRanking(second=SecondRound(seeds=1, kin=False), time_cues=False,
                                 passages=True, freshness="never", agreement=False)
    assert MessageRanking.of(Settings(search_second_round=False)).second is None
