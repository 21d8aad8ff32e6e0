"""An import learns what appending the same turns live learns: the batched write and
embedding of :func:`memd.imports.import_conversations` (several conversations a
transaction, their texts embedded in one call before their jobs run) store the same
messages, vectors, memories and facts, at the same times, as one append per turn with
the jobs run after each, on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pg import open_engine

from memd.engine.memory import Memd
from memd.imports import Conversation, Turn, import_conversations
from memd.imports.write import follow_clock, session_id_for
from memd.types import MemoryFilter

USER = "sam"
T0 = 1_750_000_000.0
DAY = 86_400.0

CONVERSATIONS = [
    Conversation("fixture", "c1", (
        Turn("user", "I live in Lisbon and I work as a marine biologist.", T0),
        Turn("assistant", "Lisbon is a lovely city for marine work.", T0 + 5),
        Turn("user", "My dog is called Pixel and she is a border collie.", T0 + 60),
        Turn("assistant", "Pixel sounds like a clever dog.", T0 + 65),
    ), client="fixture", workspace="reef"),
    Conversation("fixture", "c2", (
        Turn("user", "I prefer tabs over spaces in every Python project.", T0 + DAY),
        Turn("assistant", "Noted: tabs.", T0 + DAY + 3),
        Turn("user", "Remember that my sister Ana is visiting in March.", T0 + DAY + 90),
    ), client="fixture"),
    Conversation("fixture", "c3", (
        Turn("user", "I moved from Lisbon to Porto last week.", T0 + 9 * DAY),
        Turn("assistant", "Porto it is.", T0 + 9 * DAY + 4),
    ), client="fixture", workspace="reef"),
]
QUERIES = ["where does the user live", "dog name", "tabs or spaces", "sister visiting"]


def appended(engine: Memd) -> None:
    """The conversations as live traffic: one append per turn at its time, jobs run."""
    clock = follow_clock(engine)
    for conv in CONVERSATIONS:
        sid = session_id_for(USER, conv.source, conv.key)
        with clock.at(conv.first_at):
            engine.create_session(USER, workspace=conv.workspace, session_id=sid,
                                  metadata={"client": conv.client,
                                            "imported_from": conv.source})
        for turn in conv.turns:
            with clock.at(turn.at):
                engine.append(sid, USER, [{"role": turn.role, "content": turn.text}])
                while engine.jobs.run_due():
                    pass


def learnt(engine: Memd) -> dict[str, Any]:
    memories = sorted((m.text, m.tier.value, m.workspace, m.created_at, m.is_active)
                      for m in engine.store.list_memories(USER, MemoryFilter()))
    facts = sorted((f.category, f.key, f.value) for f in engine.facts(USER))
    # the hits with their scores (hits of one score come in id order: ids differ)
    found = {q: sorted((h.kind, h.text, round(h.score, 6))
                       for h in engine.search(q, USER, k=5)) for q in QUERIES}
    messages = {s.id: [(m.role, m.content, m.created_at)
                       for m in engine.messages(s.id, USER)]
                for s in engine.store.list_sessions(USER)}
    return {"memories": memories, "facts": facts, "search": found, "messages": messages,
            "pending": engine.store.pending_jobs()}


def test_an_import_learns_what_live_appends_learn(backend: str, tmp_path: Path) -> None:
    with open_engine(backend, tmp_path / "live") as live:
        appended(live)
        want = learnt(live)
    with open_engine(backend, tmp_path / "imported") as engine:
        counts = import_conversations(engine, USER, CONVERSATIONS, run_jobs=True)
        got = learnt(engine)
    assert counts.messages == sum(len(c.turns) for c in CONVERSATIONS)
    assert want["memories"] and want["facts"]  # the fixture teaches something
    assert any(hits for hits in want["search"].values())
    assert got == want
