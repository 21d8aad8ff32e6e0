"""The answer score of a recalled line: what kind of word a question asks for, whether a
line holds it, and that the score keeps out a line on the question's topic that does not
answer it while the line that does stays."""

from __future__ import annotations

from pathlib import Path

import pytest

import memd
from memd.config import load_settings
from memd.engine.block.compile import RECALL_KIND
from memd.engine.memory import Memd
from memd.engine.retrieval.answers import (
    BIAS,
    WEIGHTS,
    advice_object,
    asks_for,
    features,
    holds,
    likelihood,
)
from memd.errors import InvalidInput


def test_the_kind_of_word_a_question_asks_for() -> None:
    assert asks_for("How many bikes did I service in March?") == "number"
    assert asks_for("How often do I attend yoga classes?") == "number"
    assert asks_for("When did I adopt Max?") == "time"
    assert asks_for("What date did I move to Lisbon?") == "time"
    assert asks_for("What breed is my dog?") == ""


def test_a_line_holds_a_number_or_a_calendar_word() -> None:
    assert holds("number", "I've been going three times a week") == 1.0
    assert holds("number", "I have 200 followers") == 1.0
    assert holds("number", "I love my yoga classes") == 0.0
    assert holds("time", "I adopted him last March") == 1.0
    assert holds("time", "I adopted him from a shelter") == 0.0
    assert holds("", "anything at all") == 0.5  # no kind asked for: neither way


def test_the_shared_words_leave_out_the_questions_frame() -> None:
    # "days" and "Saturday" frame the question: only "bike" and "ride" are asked about
    f = features(0.4, "How many days did I ride my bike last Saturday?",
                 "I ride my bike to work")
    assert len(f) == len(WEIGHTS)
    assert f[1] == 1.0 and f[4] == 2.0


def test_the_score_rises_with_the_cosine_and_the_kind_asked_for() -> None:
    q = "How many followers do I have on Instagram?"
    with_number = "I had around 200 followers on Instagram when I posted them."
    without = "I've been posting more on Instagram to get more followers lately."
    assert likelihood(0.5, q, with_number) > likelihood(0.5, q, without)
    assert likelihood(0.6, q, without) > likelihood(0.4, q, without)
    # a line that only asks says less than one that states
    asked = "Do you have tips to get more followers on Instagram?"
    assert likelihood(0.5, q, asked) < likelihood(0.5, q, without)
    assert 0.0 < likelihood(0.0, q, "") < 1 / (1 + 2.718 ** BIAS)


def _recalled(engine: Memd, query: str) -> list[str]:
    _, mems = engine.memory_candidates("u", query, sent_chains=())
    return [m.text for m in mems if m.kind == RECALL_KIND]


def test_recall_keeps_the_line_that_answers_and_drops_the_one_that_does_not(
    tmp_path: Path,
) -> None:
    query = "How many followers do I have on Instagram?"
    answers = "I have 200 followers on Instagram now, most of them from my hiking posts."
    topical = "Do you think Instagram followers care about hiking posts?"
    for floor, kept in ((0.0, 2), (0.07, 1)):
        with memd.open(tmp_path / f"d{floor}", embedder="fake",
                       recall_answer_floor=floor) as engine:
            for said in (answers, topical):
                s = engine.create_session("u")
                engine.append(s.id, "u", [{"role": "user", "content": said},
                                          {"role": "assistant", "content": "Noted."}])
            while engine.run_jobs():
                pass
            recalled = _recalled(engine, query)
            assert len(recalled) == kept, recalled
            assert any("200 followers" in t for t in recalled)


@pytest.mark.parametrize("name", ["recall_answer_floor", "recall_question_floor"])
def test_the_floors_are_settings_checked_on_load(tmp_path: Path, name: str) -> None:
    assert getattr(load_settings(data_dir=tmp_path, **{name: "0.1"}), name) == 0.1
    for bad in ("abc", 1.0, 1.5, -0.1, True):
        with pytest.raises(InvalidInput, match=f"{name} must be a number"):
            load_settings(data_dir=tmp_path, **{name: bad})


def test_one_decision_per_question_on_its_likeliest_answer(tmp_path: Path) -> None:
    query = "How many followers do I have on Instagram?"
    said = ("I have 200 followers on Instagram now, most of them from my hiking posts.",
            "I post my hiking photos on Instagram and hope for more followers.")

    def recall(floor: float) -> list[str]:
        with memd.open(tmp_path / f"q{floor}", embedder="fake", recall_answer_floor=0,
                       recall_question_floor=floor) as engine:
            for text in said:
                s = engine.create_session("u")
                engine.append(s.id, "u", [{"role": "user", "content": text},
                                          {"role": "assistant", "content": "Noted."}])
            while engine.run_jobs():
                pass
            _, mems = engine.memory_candidates("u", query, sent_chains=())
            lines = [m for m in mems if m.kind == RECALL_KIND]
            scores.extend(likelihood(m.similarity, query, _said(m.text)) for m in lines)
            return [m.text for m in lines]

    scores: list[float] = []
    assert len(recall(0.0)) == 2
    best, worst = max(scores), min(scores)
    assert worst < best
    # a floor between the two lines' scores: the likeliest reaches it, so both come
    assert len(recall((best + worst) / 2)) == 2
    # a floor over the likeliest: the question gets no recalled line at all
    assert recall(min(best + 0.01, 0.99)) == []


def _said(item: str) -> str:
    """The user's words of a recalled item's text, as the answer score reads them."""
    return item.split("User: ", 1)[1].split("\nAssistant (earlier reply): ")[0]


def test_an_advice_request_is_answered_by_the_users_own_words_on_its_object(
    tmp_path: Path,
) -> None:
    said = "I'm looking for a new case for my phone, an iPhone 13 Pro with a cracked screen."
    asked = "Which case would fit my phone, an iPhone 13 Pro with a cracked screen?"

    def recall(text: str, query: str, name: str) -> list[str]:
        # a question floor no line's answer score reaches: only the advice rule admits
        with memd.open(tmp_path / name, embedder="fake", recall_question_floor=0.9,
                       sure_similarity=0.3, known_words=False) as engine:
            s = engine.create_session("u")
            engine.append(s.id, "u", [{"role": "user", "content": text},
                                      {"role": "assistant", "content": "Noted."}])
            while engine.run_jobs():
                pass
            _, mems = engine.memory_candidates("u", query, sent_chains=())
            return [m.text for m in mems if m.kind == RECALL_KIND]

    request = "Can you suggest some accessories for my phone, an iPhone 13 Pro?"
    assert any("iPhone 13 Pro" in t for t in recall(said, request, "advice"))
    # the same line for a question that asks for a fact: the question floor holds
    assert recall(said, "What phone do I have, an iPhone 13 Pro?", "fact") == []
    # a question the user asked is not their words on the object
    assert recall(asked, request, "asked") == []
    # a line that shares the request's framing but not the user's thing it names
    framing = "Can you suggest some accessories and cases I could buy for my laptop?"
    line = "I'm looking for some accessories and cases I could buy for my new iPhone 13 Pro."
    assert recall(line, framing, "framing") == []
    assert recall(line, framing.replace("laptop", "iPhone"), "named") != []


def test_the_users_own_thing_a_request_for_advice_names() -> None:
    assert advice_object("Can you suggest some useful accessories for my phone?") == {"phone"}
    assert advice_object("Any tips for rearranging my new bedroom?") == {"bedro"}
    assert advice_object("Can you recommend resources to learn video editing?") == set()
    assert advice_object("What breed is my dog?") == set()
