"""A thing said in passing inside a long message about something else is recalled for
its passage, shown around that passage, and erased with the message."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import memd
from memd.engine.learning.erase import cache_keys
from memd.engine.retrieval.passages import SPAN_CHARS, _passages_of, passages
from memd.engine.retrieval.recall import RECALL_CHARS, around
from memd.engine.retrieval.relevance import content_words, related
from memd.models.embedder import text_hash

RENOVATION = [
    "We are planning to renovate the kitchen this spring and I want the work done in stages.",
    "The cabinets are oak and about twenty years old, so we will probably replace them.",
    "My partner prefers a light grey countertop while I lean towards a dark stone one.",
    "The contractor quoted six weeks for the demolition, the plumbing and the tiling.",
    "By the way, I just canceled my Forbes magazine subscription because I never read it.",
    "We also need to decide where the new dishwasher goes and whether to move the sink.",
    "Budget is tight, so any cheaper alternatives for the backsplash would be welcome.",
    "Can you suggest an order of work that keeps the kitchen usable for most of the time?",
]
LONG = " ".join(RENOVATION)
QUESTION = "Which magazine subscription did I cancel?"


def settle(engine: memd.Memd) -> None:
    while engine.run_jobs():
        pass


def test_passages_are_the_statements_of_a_longer_message() -> None:
    assert passages("My cat is called Miso.") == []  # one passage: its own vector is enough
    got = passages(LONG)
    assert got[4] == RENOVATION[4]
    assert RENOVATION[-1] not in got  # a question says nothing about the user
    short = passages("Thanks! By the way, I moved to Lisbon in May. Can you help me?")
    assert short == []  # "Thanks!" joins the next sentence; the question is one passage
    joined = passages("Thanks! By the way, I moved to Lisbon in May.\nI also bought a bike "
                      "for the commute to the office.")
    assert joined == ["Thanks! By the way, I moved to Lisbon in May.",
                      "I also bought a bike for the commute to the office."]


def test_the_kept_passages_are_the_texts_own() -> None:
    """What search keeps of a text's passages (keyed by the part of it that is cut) is
    what :func:`passages` gives, for a text longer than that part too."""
    huge = " ".join(RENOVATION * (SPAN_CHARS // len(LONG) + 2))
    assert len(huge) > SPAN_CHARS
    for text in (LONG, huge, "My cat is called Miso.", "  " + LONG + "\n"):
        assert list(_passages_of(text)) == passages(text)
        assert list(_passages_of(text)) == passages(text)  # kept: the same again
    assert passages(huge) and passages(huge) != passages(LONG)


def test_around_shows_the_passage_of_a_long_text() -> None:
    assert around("short text", "short", 100) == "short text"
    longer = " ".join(RENOVATION[:4] * 2 + [RENOVATION[4]] + RENOVATION[5:] * 2)
    shown = around(longer, RENOVATION[4], RECALL_CHARS)
    assert RENOVATION[4] in shown and len(shown) <= RECALL_CHARS + 8
    assert shown.startswith("... ") and shown.endswith(" ...")
    assert RENOVATION[0] not in shown
    # near the end, the window ends with the text
    assert around(LONG, RENOVATION[-2], RECALL_CHARS).endswith(RENOVATION[-1])


def test_a_thing_said_in_passing_is_recalled_for_its_passage(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="minilm-onnx") as engine:
        said = engine.create_session("alice")
        engine.append(said.id, "alice", [{"role": "user", "content": LONG},
                                         {"role": "assistant", "content": "Sure, here is a plan."}])
        settle(engine)
        # the message as a whole is not about the question: only its passage is
        qvec = engine.embedder.embed_query(QUESTION)
        whole = float(np.dot(engine.embedder.embed([LONG])[0], qvec))
        assert not related(whole, content_words(QUESTION), LONG, 0.3, 0.5)

        _, mems = engine.memory_candidates("alice", QUESTION, sent_chains=())
        [recalled] = [c for c in mems if c.kind == "recall"]
        assert RENOVATION[4] in recalled.text
        assert RENOVATION[0] not in recalled.text  # the part around the passage, not the head
        assert recalled.similarity > whole

        _, unrelated = engine.memory_candidates("alice", "How do I reset my router password?",
                                                sent_chains=())
        assert not [c for c in unrelated if c.kind == "recall"]


def test_erasing_a_message_erases_its_passages(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d") as engine:
        s = engine.create_session("alice")
        engine.append(s.id, "alice", [{"role": "user", "content": LONG}])
        settle(engine)
        keys = set(cache_keys(engine.store, "alice", s.id))
        assert {text_hash(p) for p in passages(LONG)} <= keys
        cached = engine.embedder.cached(passages(LONG))
        assert all(v is not None for v in cached)  # the embedding job stored them
        engine.erase_session("alice", s.id)
        assert engine.embedder.cached(passages(LONG)) == [None] * len(passages(LONG))


def test_the_clients_text_is_never_a_passage() -> None:
    typed = ("The staging host is staging.rocket.internal. We deploy with argo on Fridays "
             "after the freeze ends.")
    wrapped = ("<environment_details>\nVisible files: deploy.cfg, app.py. Current time is "
               "noon, and the working directory holds forty files.\n</environment_details>\n"
               + typed)
    assert passages(wrapped) == passages(typed) != []
