"""The messages' second retrieval round (memd.engine.retrieval.rounds): a remark that
names only what the best hit names beyond the question rises right after that hit."""

from __future__ import annotations

from pathlib import Path

import pg

from memd.engine.retrieval.rounds import kin_terms
from memd.types import Hit

SEED = "Tomasz is the lead on Lumen now, he runs the whole thing."
SECOND = "The Lumen launch has to be live before the audit in May."
QUESTION = "What deadline does the thing Tomasz runs have?"


def searched(backend: str, data_dir: Path, question: str, sessions: list[list[str]],
             **settings: bool | int) -> list[Hit]:
    """The message hits for ``question`` over one session per list of user turns."""
    with pg.open_engine(backend, data_dir, **settings) as m:
        for turns in sessions:
            m.append(m.create_session("u").id, "u",
                     [{"role": "user", "content": t} for t in turns])
        while m.run_jobs():
            pass
        return m.search(question, "u", k=10, kinds=["message"])


def ranked(backend: str, tmp_path: Path, on: bool) -> list[Hit]:
    # remarks that share a word with the question, so they outrank the second hop
    fillers = [f"chore {i} runs" for i in range(15)]
    return searched(backend, tmp_path / str(on), QUESTION, [[SEED], fillers, [SECOND]],
                    search_second_round=on)


def test_second_hop_follows_its_seed(backend: str, tmp_path: Path) -> None:
    hits = ranked(backend, tmp_path, on=True)
    texts = [h.text for h in hits]
    assert texts[0] == SEED and SECOND in texts[1:3]
    second = hits[texts.index(SECOND)]
    assert second.breakdown["second_round"] > 0
    assert second.score < hits[0].score  # never above the hit that seeded it


def test_without_the_round_the_second_hop_stays_low(backend: str, tmp_path: Path) -> None:
    hits = ranked(backend, tmp_path, on=False)
    assert hits[0].text == SEED
    assert SECOND not in [h.text for h in hits[:3]]
    assert all("second_round" not in h.breakdown for h in hits)


RUST = "Would the others be comfortable if I wrote the new parser in Rust?"
KIN = "Most of us came from Python and JavaScript, nobody has shipped systems code."


def kin_ranked(backend: str, tmp_path: Path, on: bool) -> list[Hit]:
    """The hits for the Rust question, among its own turn and remarks that share a word
    with it (closer to it than the kin remark by the fake embedder's cosine)."""
    fillers = [f"others {i} came by" for i in range(8)]
    return searched(backend, tmp_path / str(on), RUST, [[RUST], fillers, [KIN]],
                    search_expand_kinds=on, search_second_round=False)


def test_kin_terms_of_the_question() -> None:
    kin = kin_terms(RUST)
    assert {"python", "javascript", "go"} <= set(kin) and "rust" not in kin
    assert kin_terms("What did we settle on after the outage?") == []


def test_a_language_question_finds_the_other_languages(backend: str, tmp_path: Path,
                                                       ) -> None:
    hits = kin_ranked(backend, tmp_path, on=True)
    on = [h.text for h in hits]
    off = [h.text for h in kin_ranked(backend, tmp_path, on=False)]
    assert on[0] == RUST  # the best direct hit stays first
    assert hits[on.index(KIN)].breakdown["second_round"] > 0
    assert on.index(KIN) < off.index(KIN)
