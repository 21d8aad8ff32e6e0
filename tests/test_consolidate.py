"""Consolidation (memd.engine.background.consolidate): five or more alike episodic memories become
one pattern memory that supersedes them; fewer stay as they are; the pattern's
importance follows the episodes' outcomes; a helper's pattern is kept only when the
episodes ground it. The store is exercised on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memd
from memd.engine.background import compact, consolidate
from memd.errors import ModelError
from memd.types import Memory, MemoryFilter, Tier
from tests.scripted_helper import ScriptedHelper

DISHES = [("Diwali sweets", 340), ("mango lassi", 290), ("paneer tikka", 280),
          ("masala chai", 310), ("gulab jamun", 330), ("aloo paratha", 300)]
NEWS = "Suggested a news post on the election results; it got 95 views from readers."


def episode(dish: str, views: int) -> str:
    return (f"Suggested a recipe post for the food blog readers this week, about {dish}, "
            f"and the recipe post got {views} views.")


def add_episodes(m: memd.Memd, n: int) -> list[str]:
    ids = [m.add(episode(*d), "alice", tier=Tier.EPISODIC).memory.id for d in DISHES[:n]]
    m.add(NEWS, "alice", tier=Tier.EPISODIC)
    return ids


def patterns(m: memd.Memd) -> list[Memory]:
    return m.store.list_memories("alice", MemoryFilter(tags=(consolidate.TAG,)))


@pytest.fixture
def m(backend: str, tmp_path: Path) -> Iterator[memd.Memd]:
    import pg

    engine = pg.open_engine(backend, tmp_path / "d")
    yield engine
    engine.close()


def run(m: memd.Memd, helper: ScriptedHelper | None = None) -> list[Memory]:
    return consolidate.consolidate_user(m.store, m.embedder, helper, "alice", m.now())


def test_five_alike_episodes_become_one_pattern_that_supersedes_them(m: memd.Memd) -> None:
    ids = add_episodes(m, 5)
    [pattern] = run(m)
    assert (pattern.tier, pattern.tags) == (Tier.SEMANTIC, (consolidate.TAG,))
    assert pattern.metadata["episodes"] == ids and pattern.metadata["count"] == 5
    assert pattern.metadata["extractive"] is True
    assert pattern.text in [episode(*d) for d in DISHES[:5]]
    for mid in ids:
        kept = m.store.get_memory("alice", mid)
        assert kept is not None and kept.superseded_by == pattern.id  # stored, replaced
    [news] = [x for x in m.store.list_memories("alice", MemoryFilter(tiers=(Tier.EPISODIC,)))
              if x.superseded_by is None]
    assert news.text == NEWS
    found = m.search("recipe post views", "alice", kinds=["memory"])
    assert [h.id for h in found][:1] == [pattern.id]
    assert not set(ids) & {h.id for h in found}  # the pattern stands in for them
    assert run(m) == [] and len(patterns(m)) == 1  # a second run folds nothing again


def test_four_alike_episodes_stay_as_they_are(m: memd.Memd) -> None:
    add_episodes(m, 4)
    assert run(m) == []
    assert patterns(m) == []


@pytest.mark.parametrize(("used", "boost"), [(0, 0.0), (2, 0.0), (3, 0.1)])
def test_importance_follows_the_episodes_outcomes(m: memd.Memd, used: int,
                                                  boost: float) -> None:
    ids = add_episodes(m, 5)
    m.store.record_access("alice", [(mid, 0.8) for mid in ids[:used]], m.now())
    [pattern] = run(m)
    # the episodes' highest importance, raised when most of them were used in a context
    assert pattern.importance == pytest.approx(0.5 + boost)


def test_a_grounded_helper_pattern_is_kept() -> None:
    group = consolidate.Group(tuple(_memories()), _memories()[0])
    helper = ScriptedHelper(pattern="Recipe posts got 280 to 340 views.")
    made = consolidate.pattern_text(helper, group)
    assert made == consolidate.PatternText("Recipe posts got 280 to 340 views.", False)


@pytest.mark.parametrize(("answer", "reason"), [
    ("", "empty"),
    ("News posts on Substack got 9000 views.", "ungrounded"),
    (ModelError("down"), "model_error"),
])
def test_a_rejected_helper_pattern_is_the_central_episode(answer: str | Exception,
                                                          reason: str) -> None:
    episodes = _memories()
    group = consolidate.Group(tuple(episodes), episodes[2])
    made = consolidate.pattern_text(ScriptedHelper(pattern=answer), group)
    assert made == consolidate.PatternText(episodes[2].text, True, reason)


def _memories() -> list[Memory]:
    return [Memory(id=f"e{i}", user_id="alice", text=episode(*d), content_hash=str(i),
                   token_count=25, created_at=float(i), updated_at=float(i),
                   tier=Tier.EPISODIC) for i, d in enumerate(DISHES[:5])]


def test_a_compaction_queues_consolidation(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake", compact_every_turns=20) as m:
        sid = m.create_session("alice").id
        for i in range(20):
            m.append(sid, "alice", [{"role": "user", "content": f"Step {i} of the plan."},
                                    {"role": "assistant", "content": "Done."}])
        claimed = m.store.claim_jobs(m.now(), 100)
        [job] = [j for j in claimed if j.kind == compact.JOB]
        m.jobs.handlers[compact.JOB](job)
        kinds = [q.job.kind for q in m.jobs.listed("pending")]
        assert consolidate.JOB in kinds
