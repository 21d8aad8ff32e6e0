"""The messages' second retrieval round (memd.engine.retrieval.rounds): a remark that
names only what the best hit names beyond the question rises right after that hit."""

from __future__ import annotations

from pathlib import Path

import memd
from memd.types import Hit

SEED = "Tomasz is the lead on Lumen now, he runs the whole thing."
SECOND = "The Lumen launch has to be live before the audit in May."
QUESTION = "What deadline does the thing Tomasz runs have?"


def ranked(tmp_path: Path, on: bool) -> list[Hit]:
    with memd.open(tmp_path / ("on" if on else "off"), embedder="fake",
                   search_second_round=on) as m:
        first = m.create_session("u")
        m.append(first.id, "u", [{"role": "user", "content": SEED}])
        # remarks closer to the question's words than the second hop is
        fillers = [{"role": "user", "content": f"the deadline for chore {i} is what it is, "
                                               f"whatever runs has to run"}
                   for i in range(15)]
        m.append(m.create_session("u").id, "u", fillers)
        m.append(m.create_session("u").id, "u", [{"role": "user", "content": SECOND}])
        while m.run_jobs():
            pass
        return m.search(QUESTION, "u", k=10, kinds=["message"])


def test_second_hop_follows_its_seed(tmp_path: Path) -> None:
    hits = ranked(tmp_path, on=True)
    texts = [h.text for h in hits]
    assert texts[0] == SEED and SECOND in texts[1:3]
    second = hits[texts.index(SECOND)]
    assert second.breakdown["second_round"] > 0
    assert second.score < hits[0].score  # never above the hit that seeded it


def test_without_the_round_the_second_hop_stays_low(tmp_path: Path) -> None:
    hits = ranked(tmp_path, on=False)
    assert hits[0].text == SEED
    assert SECOND not in [h.text for h in hits[:5]]
    assert all("second_round" not in h.breakdown for h in hits)
