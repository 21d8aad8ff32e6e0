"""Deterministic maintenance: each sweep is a plain function of (store, now), so the
scheduler (memd.engine.background.schedule) runs it as a durable job, one user at a time
(``user_id``; None sweeps every user at once, as :func:`run_all` does), and a test
drives it with a fake clock.

Why each rule is what it is: docs/design.md, "Maintenance".

- :func:`expiry_sweep`: deactivate memories past ``expires_at``, mark
  sessions past theirs expired.
- :func:`end_session`: clear a session's L0 working memory and close it.
- :func:`promotion_sweep`: utility
  ``U = (R/a) · log2(1 + a) / (1 + λ_k · Δt_hours)``; L1→L2 (λ 0.01, θ 0.3, ≥ 3 accesses)
  and L2→L3 (λ 0.001, θ 0.5, ≥ 10). Promoted memories become global and validated; L2
  gets a 90-day expiry, L3 none. Procedural knowledge is recognised by provenance alone:
  a procedural-provenance memory (instruction/preference) promotes from L2 to L4
  instead of L3.
- :func:`demotion_sweep`: activity ``D = a / Δt_since_last_access_hours``;
  an L3/L4 memory under φ (1e-3 per hour: one access in ~6 weeks) drops to L2 with a
  fresh 90-day expiry; an L2 memory under φ expires (deactivated, not deleted). L0 and L1
  are left to their TTLs. Memories younger than 30 days are exempt: a statement the user
  just made has had no time to be accessed.
- :func:`decay_sweep`: importance −= rate for memories not accessed
  in 7 days whose importance is above 0.1.
- :func:`prune_sweep`: delete (truly forget) memories with
  importance < 0.1 not accessed for 30 days.
- :func:`retention_sweep`: delete the messages of sessions whose newest message is
  older than ``retention_days`` (memories stay: they are what the user keeps).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from memd.backends.base import MemoryStore, MessageStore, Store
from memd.types import Memory, Provenance, Scope, SessionStatus, Tier

log = logging.getLogger(__name__)

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True, slots=True)
class Transition:
    source: Tier
    target: Tier
    lam: float
    theta: float
    min_access: int


PROMOTIONS = (
    Transition(Tier.SESSION, Tier.EPISODIC, 0.01, 0.3, 3),
    Transition(Tier.EPISODIC, Tier.SEMANTIC, 0.001, 0.5, 10),
)
PROCEDURAL = (Provenance.INSTRUCTION, Provenance.PREFERENCE)
ACTIVITY_FLOOR = 1e-3
L2_TTL = 90 * DAY
EXEMPT_AGE = 30 * DAY


def utility(m: Memory, lam: float, now: float) -> float:
    """The promotion utility: mean relevance, weighted by accesses, discounted by age."""
    a = m.access_count
    if a <= 0:
        return 0.0
    mean_relevance = m.relevance_accumulator / a
    hours = max(0.0, (now - m.created_at) / HOUR)
    return mean_relevance * math.log2(1 + a) / (1 + lam * hours)


def activity(m: Memory, now: float) -> float:
    """Activity, the demotion signal: accesses per hour since the last access."""
    hours = max(1.0, (now - (m.last_accessed_at or m.created_at)) / HOUR)
    return m.access_count / hours


def expiry_sweep(store: Store, now: float) -> dict[str, int]:
    return {"memories": store.expire_memories(now), "sessions": store.expire_sessions(now)}


def end_session(store: Store, user_id: str, session_id: str, now: float) -> int:
    """Close a session and delete its L0 working memory; returns how many were removed."""
    with store.transaction():
        removed = store.delete_session_working_memory(user_id, session_id)
        store.update_session(user_id, session_id, status=SessionStatus.CLOSED, updated_at=now)
    return removed


def _active(store: MemoryStore, user_id: str | None) -> list[Memory]:
    return [m for m in store.iter_memories(user_id)
            if m.is_active and m.superseded_by is None]


def promotion_sweep(store: Store, now: float, user_id: str | None = None) -> int:
    promoted = 0
    with store.transaction():
        for m in _active(store, user_id):
            for t in PROMOTIONS:
                if m.tier != t.source or m.access_count < t.min_access:
                    continue
                if utility(m, t.lam, now) <= t.theta:
                    continue
                target = t.target
                if target == Tier.SEMANTIC and m.provenance in PROCEDURAL:
                    target = Tier.PROCEDURAL
                store.update_memory(
                    m.user_id, m.id, tier=target, scope=Scope.GLOBAL, is_validated=True,
                    expires_at=now + L2_TTL if target == Tier.EPISODIC else None,
                    updated_at=now,
                )
                promoted += 1
    return promoted


def demotion_sweep(store: Store, now: float, user_id: str | None = None) -> dict[str, int]:
    demoted = expired = 0
    with store.transaction():
        for m in _active(store, user_id):
            if m.tier < Tier.EPISODIC or now - m.created_at < EXEMPT_AGE:
                continue
            if activity(m, now) >= ACTIVITY_FLOOR:
                continue
            if m.tier == Tier.EPISODIC:
                store.update_memory(m.user_id, m.id, is_active=False, updated_at=now)
                expired += 1
            else:
                store.update_memory(m.user_id, m.id, tier=Tier.EPISODIC,
                                    expires_at=now + L2_TTL, updated_at=now)
                demoted += 1
    return {"demoted": demoted, "expired": expired}


def decay_sweep(store: Store, now: float, rate: float = 0.05,
                user_id: str | None = None) -> int:
    decayed = 0
    with store.transaction():
        for m in _active(store, user_id):
            idle = now - (m.last_accessed_at or m.created_at)
            if idle > 7 * DAY and m.importance > 0.1:
                store.update_memory(m.user_id, m.id, importance=max(m.importance - rate, 0.0),
                                    updated_at=now)
                decayed += 1
    return decayed


def prune_sweep(store: Store, now: float, user_id: str | None = None) -> int:
    pruned = 0
    with store.transaction():
        for m in list(store.iter_memories(user_id)):
            idle = now - (m.last_accessed_at or m.created_at)
            if m.importance < 0.1 and idle > 30 * DAY:
                store.delete_memory(m.user_id, m.id)
                pruned += 1
    return pruned


def retention_sweep(store: MessageStore, now: float, days: float, user_id: str) -> dict[str, int]:
    """Delete the messages (with their vectors and full-text rows) of ``user_id``'s
    sessions whose newest message is more than ``days`` old; logs the counts, never any
    content. ``days`` of 0 or less keeps everything."""
    if days <= 0:
        return {"messages": 0, "sessions": 0}
    messages, sessions = store.delete_inactive_messages(user_id, now - days * DAY)
    if messages or sessions:
        log.info("retention: deleted %d messages of %d sessions inactive for %g days",
                 messages, sessions, days)
    return {"messages": messages, "sessions": sessions}


def run_all(store: Store, now: float) -> dict[str, object]:
    """Every sweep once, in a sensible order (what the scheduler runs)."""
    return {
        "expiry": expiry_sweep(store, now),
        "promoted": promotion_sweep(store, now),
        "demotion": demotion_sweep(store, now),
        "decayed": decay_sweep(store, now),
        "pruned": prune_sweep(store, now),
    }
