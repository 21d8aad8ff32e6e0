"""The hop by words (memd.engine.retrieval.hops): a remark that shares with the best
user turn only what that turn says beyond the question takes a reserved place right after
the first round's top user turns, which keep theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_search_second_round import searched as search_turns

from memd.config import load_settings
from memd.config_tables import hop_seeds
from memd.engine.retrieval.hops import beyond, hop_of
from memd.errors import InvalidInput
from memd.types import Hit

SEED = "The board meeting is on the 14th of March."
SECOND = "Kemi needs the revenue slides finished before the board sees them."
QUESTION = "What has to be ready by March 14th?"
# remarks that share a word with the question, so that they outrank the second hop
FILLERS = [f"chore {i} is ready" for i in range(15)]


def searched(backend: str, data_dir: Path, sessions: list[list[str]], hop: int) -> list[Hit]:
    """The message hits for the question over one session per list of user turns."""
    return search_turns(backend, data_dir, QUESTION, sessions, search_second_hop=hop)


def test_the_words_beyond_the_question() -> None:
    assert beyond(SEED, QUESTION).split() == ["board", "meeting"]
    assert beyond("Ready by March 14th.", QUESTION) == ""


def test_the_hop_takes_the_place_after_the_top_user_turns(backend: str, tmp_path: Path,
                                                          ) -> None:
    sessions = [[SEED], FILLERS, [SECOND]]
    off = searched(backend, tmp_path / "off", sessions, hop=0)
    on = searched(backend, tmp_path / "on", sessions, hop=1)
    assert on[0].text == SEED
    assert SECOND not in [h.text for h in off[:6]]
    # the first five user turns keep their places and scores; the hop comes next
    # (the fillers tie, so which of them comes first differs between the two stores)
    assert [h.score for h in on[:5]] == pytest.approx([h.score for h in off[:5]])
    assert SECOND not in [h.text for h in on[:5]]
    assert on[5].text == SECOND and on[5].score < on[4].score
    assert "second_hop" in on[5].breakdown
    assert all("second_hop" not in h.breakdown for h in off)
    # what the hop displaced follows it, moved down in the same order
    assert [h.score for h in on] == sorted((h.score for h in on), reverse=True)
    assert len({h.text for h in on}) == len(on) == 10


def test_no_hop_within_the_seeds_session(backend: str, tmp_path: Path) -> None:
    hits = searched(backend, tmp_path, [[SEED, SECOND], FILLERS], hop=1)
    assert all("second_hop" not in h.breakdown for h in hits)


def test_the_setting_reads_a_count_or_a_switch() -> None:
    assert [hop_seeds(v) for v in (0, 2, "3", "true", "off", True)] == [0, 2, 3, 1, 0, 1]
    for bad in (4, -1, "some", 1.5):
        with pytest.raises(InvalidInput):
            hop_seeds(bad)
    assert load_settings(None, search_second_hop="2").search_second_hop == 2
    with pytest.raises(InvalidInput):
        load_settings(None, search_second_hop="many")
    assert hop_of(0) is None and hop_of(2) is not None and hop_of(2).seeds == 2


def test_the_hop_reads_the_seeds_passage_nearest_the_question(backend: str, tmp_path: Path,
                                                              ) -> None:
    # the seed's other sentence would lead to the bike remark, whose words it shares more
    seed = "My bike has a flat tyre again, bike shop tyre. " + SEED
    bike = "The bike shop fixed the flat tyre on my bike."
    hits = searched(backend, tmp_path, [[seed], FILLERS, [SECOND], [bike]], hop=1)
    hop = [h.text for h in hits if "second_hop" in h.breakdown and h.breakdown["second_hop"] > 0]
    assert hits[0].text == seed and hop == [SECOND]
