"""Maintenance sweeps driven by a fake clock, on real SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from clock import Clock

import memd
from memd.engine.background import maintenance as mt
from memd.engine.memory import Memd
from memd.types import Scope, SessionStatus, Tier

HOUR = 3600.0
DAY = 24 * HOUR
T0 = 1_700_000_000.0



@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def m(tmp_path: Path, clock: Clock) -> Iterator[Memd]:
    with memd.open(tmp_path / "d", clock=clock) as engine:
        yield engine


def test_expiry_sweep_deactivates_and_expires_sessions(m: Memd, clock: Clock) -> None:
    short = m.add("temporary note", "alice", tier="L1", expires_at=T0 + HOUR).memory
    keep = m.add("durable note", "alice").memory
    s = m.create_session("alice")
    assert mt.expiry_sweep(m.store, T0 + 0.5 * HOUR) == {"memories": 0, "sessions": 0}
    assert mt.expiry_sweep(m.store, T0 + 2 * DAY) == {"memories": 1, "sessions": 1}
    assert not m.get(short.id, "alice").is_active and m.get(keep.id, "alice").is_active
    assert m.session(s.id, "alice").status == SessionStatus.EXPIRED


def test_end_session_clears_working_memory(m: Memd) -> None:
    s = m.create_session("alice")
    m.add("scratch: trying approach B", "alice", tier="L0", scope="local", session_id=s.id)
    durable = m.add("the repo uses poetry", "alice", session_id=s.id).memory
    assert mt.end_session(m.store, "alice", s.id, T0) == 1
    assert [x.id for x in m.list("alice", include_inactive=True)] == [durable.id]
    assert m.session(s.id, "alice").status == SessionStatus.CLOSED


def test_promotion_follows_the_utility_formula(m: Memd, clock: Clock) -> None:
    mem = m.add("prefers pytest fixtures", "alice", tier="L1", scope="local",
                session_id=m.create_session("alice").id).memory
    assert mt.promotion_sweep(m.store, T0 + HOUR) == 0  # one access: below min_access
    m.store.record_access("alice", [(mem.id, 0.9), (mem.id, 0.8), (mem.id, 0.9)], T0)
    got = m.get(mem.id, "alice")
    expected = (got.relevance_accumulator / 4) * 2.321928 / (1 + 0.01 * 1.0)
    assert mt.utility(got, 0.01, T0 + HOUR) == pytest.approx(expected, rel=1e-4)
    assert mt.promotion_sweep(m.store, T0 + HOUR) == 1
    up = m.get(mem.id, "alice")
    assert up.tier == Tier.EPISODIC and up.scope == Scope.GLOBAL and up.is_validated
    assert up.expires_at == pytest.approx(T0 + HOUR + 90 * DAY)


def test_old_low_utility_is_not_promoted(m: Memd) -> None:
    mem = m.add("a passing remark", "alice", tier="L1").memory
    m.store.record_access("alice", [(mem.id, 0.2)] * 3, T0)
    # utility = 0.15 * log2(5) / (1 + 0.01 * 1000 h) is far below 0.3
    assert mt.promotion_sweep(m.store, T0 + 1000 * HOUR) == 0
    assert m.get(mem.id, "alice").tier == Tier.SESSION


def test_demotion_of_idle_memories(m: Memd) -> None:
    l3 = m.add("old semantic fact", "alice").memory
    l2 = m.add("old episode", "alice", tier="L2").memory
    fresh_now = T0 + 10 * DAY
    assert mt.demotion_sweep(m.store, fresh_now) == {"demoted": 0, "expired": 0}
    later = T0 + 200 * DAY  # 1 access over 4800 h: activity 2e-4 < 1e-3
    assert mt.demotion_sweep(m.store, later) == {"demoted": 1, "expired": 1}
    assert m.get(l3.id, "alice").tier == Tier.EPISODIC
    assert not m.get(l2.id, "alice").is_active


def test_decay_then_prune(m: Memd) -> None:
    mem = m.add("an unimportant aside", "alice", importance=0.15).memory
    other = m.add("an important rule", "alice", importance=0.9).memory
    assert mt.decay_sweep(m.store, T0 + 3 * DAY) == 0  # accessed recently
    assert mt.decay_sweep(m.store, T0 + 8 * DAY) == 2
    assert m.get(mem.id, "alice").importance == pytest.approx(0.10)
    assert m.get(other.id, "alice").importance == pytest.approx(0.85)
    mt.decay_sweep(m.store, T0 + 9 * DAY)  # 0.10 is not > 0.1: only the other decays
    assert m.get(mem.id, "alice").importance == pytest.approx(0.10)
    m.store.update_memory("alice", mem.id, importance=0.05)
    assert mt.prune_sweep(m.store, T0 + 10 * DAY) == 0  # idle < 30 days
    assert mt.prune_sweep(m.store, T0 + 31 * DAY) == 1
    assert [x.id for x in m.list("alice", include_inactive=True)] == [other.id]
