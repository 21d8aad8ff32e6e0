"""The gate before any memory block: a question about something the user's history never
mentions gets none, while one about what the user said does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memd.engine.block.compile import NOTE_KIND, STYLE_RULE, Candidate
from memd.engine.memory import Memd
from memd.engine.retrieval.vocabulary import (
    FRAME,
    MIN_SESSIONS,
    REPLY_ONLY,
    Known,
    LongHistories,
    forms,
    has_vocabulary,
    knows,
)

FILLER = [
    ("I went hiking in the mountains with my sister last weekend.",
     "That sounds lovely, mountain trails are great in the autumn."),
    ("I am learning to bake sourdough bread at home.",
     "Sourdough takes patience; keep the starter warm."),
    ("My team moved the staging host to a new data centre.",
     "Moving hosts is a good moment to check your backups."),
]
STATEMENT = "I walk my dog Rex in the park every morning before work."


def history(engine: Memd, user: str, sessions: int) -> None:
    """``sessions`` conversations of filler, then one that says STATEMENT."""
    for n in range(sessions - 1):
        said, reply = FILLER[n % len(FILLER)]
        s = engine.create_session(user)
        engine.append(s.id, user, [{"role": "user", "content": said},
                                   {"role": "assistant", "content": reply}])
    s = engine.create_session(user)
    engine.append(s.id, user, [{"role": "user", "content": STATEMENT},
                               {"role": "assistant", "content": "Rex must love the park."}])
    engine.run_jobs()


def counted(mems: list[Candidate]) -> list[Candidate]:
    """What would count as an injection: not a note, not a style rule."""
    return [c for c in mems if c.kind != NOTE_KIND and c.rule != STYLE_RULE]


def test_forms_reach_the_plain_and_the_plural_word() -> None:
    assert "sport" in forms("sports") and "walk" in forms("walked")
    assert "dogs" in forms("dog") and forms("dog")[0] == "dog"
    assert "bu" not in forms("bus")  # no form shorter than four letters


@pytest.fixture
def engine(backend: str, tmp_path: Path) -> Iterator[Memd]:
    """An engine on each backend: the look-ups go through each one's full-text index."""
    import pg

    opened = pg.open_engine(backend, tmp_path / "d")
    yield opened
    opened.close()


def test_a_word_never_said_fails_and_one_the_user_said_passes(engine: Memd) -> None:
    history(engine, "u", 3)
    store = engine.store
    said = knows(store, "u", "Where do I walk Rex?")
    assert said == Known(frozenset(), frozenset()) and said.passes
    # a word the question is framed with need not be in the history
    assert "often" in FRAME and knows(store, "u", "How often do I walk Rex?").passes
    # and so need its calendar, order and counting words ("last Saturday", "earliest")
    assert knows(store, "u", "Where did I walk Rex last Saturday, the earliest of the "
                             "two walks?").passes
    assert not knows(store, "u", "Where did I walk Rex last Saturday with Converse?").passes
    never = knows(store, "u", "Which Converse sneakers do I wear to walk Rex?")
    assert never.absent == {"conve", "sneak", "wear"} and not never.passes
    # "love" is only in the assistant's reply: one such word is allowed, not two
    reply = knows(store, "u", "Does Rex love the walk?")
    assert reply.reply_only == {"love"} and not reply.absent and REPLY_ONLY == 1
    assert reply.passes
    assert not Known(frozenset(), frozenset({"love", "patie"})).passes
    # the question's own message, once stored, does not know its own words
    ask = engine.create_session("u")
    [stored] = engine.append(ask.id, "u", [{"role": "user", "content": "Is Biscuit a cat?"}])
    assert knows(store, "u", "Is Biscuit a cat?").passes
    assert not knows(store, "u", "Is Biscuit a cat?", lambda m: m.id == stored.id).passes
    # what the user's memories say counts as said
    assert knows(store, "u", "Is Biscuit a cat?", lambda m: m.id == stored.id,
                 ["User's cat is called Biscuit"]).passes


def test_a_long_history_gives_no_block_for_a_question_it_never_mentions(
        tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    history(engine, "u", MIN_SESSIONS)
    assert has_vocabulary(engine.store, "u")
    related = "Where do I walk my dog Rex every morning?"
    unrelated = "How old is my dog Rex's puppy Biscuit?"
    _, mems = engine.memory_candidates("u", related, sent_chains=())
    assert any("dog Rex" in c.text for c in counted(mems))
    _, mems = engine.memory_candidates("u", unrelated, sent_chains=())
    assert counted(mems) == []
    # the gate, not the cosine, kept it out: without it (and without the question's
    # floor on answers, which a line with no age in it fails too) the statement comes
    ungated = Memd.open(tmp_path / "m", embedder="fake", known_words=False,
                        recall_question_floor=0)
    _, mems = ungated.memory_candidates("u", unrelated, sent_chains=())
    assert any("dog Rex" in c.text for c in counted(mems))


class CountingStore:
    """The store's list_sessions, counted (all has_vocabulary reads)."""

    def __init__(self, store: Any) -> None:
        self.store, self.asked = store, 0

    def list_sessions(self, *args: Any, **kwargs: Any) -> Any:
        self.asked += 1
        return self.store.list_sessions(*args, **kwargs)


def test_a_long_history_is_asked_of_the_store_once_a_minute(tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    store = CountingStore(engine.store)
    clock = [100.0]
    gate = LongHistories(ttl=60.0, clock=lambda: clock[0])
    history(engine, "u", 3)
    assert not gate.has_vocabulary(store, "u")  # type: ignore[arg-type]
    assert not gate.has_vocabulary(store, "u")  # type: ignore[arg-type]
    assert store.asked == 2  # a short history is asked again: it grows
    history(engine, "u", MIN_SESSIONS)
    assert gate.has_vocabulary(store, "u")  # type: ignore[arg-type]
    clock[0] += 59
    assert gate.has_vocabulary(store, "u") and store.asked == 3  # type: ignore[arg-type]
    assert not gate.has_vocabulary(store, "v") and store.asked == 4  # type: ignore[arg-type]
    engine.erase_user("u")
    # kept a minute: the gate stays on, and the erased history knows none of the words
    assert gate.has_vocabulary(store, "u") and store.asked == 4  # type: ignore[arg-type]
    assert not knows(engine.store, "u", "Where do I walk my dog Rex?").passes
    clock[0] += 1
    assert not gate.has_vocabulary(store, "u") and store.asked == 5  # type: ignore[arg-type]


def test_a_short_history_is_not_gated_but_judged_on_higher_floors(tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    history(engine, "u", 3)
    assert not has_vocabulary(engine.store, "u")
    floor = engine.contexts._floor("How old is my dog Rex's puppy Biscuit?", "u",
                          lambda m: False, [], [])
    assert floor.known
    settings = engine.settings
    assert floor.floor > settings.min_similarity and floor.sure > settings.sure_similarity
    assert floor.recall > settings.recall_min_similarity


def test_the_request_does_not_teach_the_history_its_own_words(tmp_path: Path) -> None:
    # without the question's floor on answers, which a line with no age in it fails
    engine = Memd.open(tmp_path / "m", embedder="fake", recall_question_floor=0)
    history(engine, "u", MIN_SESSIONS)
    unrelated = "How old is my dog Rex's puppy Biscuit?"
    chat = engine.create_session("u")
    [asked] = engine.append(chat.id, "u", [{"role": "user", "content": unrelated}])
    # the proxy stores the turn before it builds the block: the turn's session is left out
    _, mems = engine.memory_candidates("u", unrelated, session=chat, exclude_session=True,
                                       sent_chains=())
    assert counted(mems) == []
    _, mems = engine.memory_candidates("u", unrelated, sent_chains=[asked.chain_hash or ""])
    assert counted(mems) == []
    # counted as the user's words, the stored question would let the block through
    _, mems = engine.memory_candidates("u", unrelated, sent_chains=())
    assert any("dog Rex" in c.text for c in counted(mems))
