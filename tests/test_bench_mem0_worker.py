"""mem0_compare's memd side: a user's haystack sessions go through the import path, are
searchable when ``add`` returns, and every hit maps back to its haystack turn."""

from __future__ import annotations

from pathlib import Path

from bench.mem0_compare import Item, by_user
from bench.mem0_memd import MemdWorker

T0 = 1_700_000_000.0


def test_memd_worker_imports_histories_and_maps_hits_to_turns(tmp_path: Path) -> None:
    items = [Item("q-1", "s-a", 0, "I adopted a cat named Miso last spring.", T0),
             Item("q-1", "s-a", 1, "   ", T0),  # an empty turn: not stored
             Item("q-1", "s-a", 2, "My commute is forty minutes by train.", T0),
             Item("q-1", "s-b", 0, "I am learning to play the cello.", T0 + 86_400),
             Item("q-2", "s-a", 0, "Another user's turn about a cat named Miso.", T0)]
    assert [len(h) for h in by_user([items[:3], items[3:4], items[4:]])] == [2, 1]
    worker = MemdWorker()
    worker.setup({"dir": str(tmp_path), "embedder": "fake", "max_text_chars": 100_000,
                  "query_precision": "int8"})
    try:
        reply = worker.add({"items": [it.wire() for it in items]})
        assert len(reply["ms"]) == len(items) and all(ms > 0 for ms in reply["ms"])
        assert worker.engine.store.pending_jobs() == 0  # searchable on return
        found = worker.search({"k": 10, "queries": [
            {"user": "q-1", "text": "cat named Miso", "now": T0 + 2 * 86_400}]})
        ranked = found["results"][0]["ranked"]
        assert sorted(map(tuple, ranked)) == [("s-a", 0), ("s-a", 2), ("s-b", 0)]
        assert ranked[0] == ["s-a", 0]  # the fake embedder still ranks shared words first
        # the stored texts' model and the search's query vectors, one of each per text
        vectors = worker.embed({"texts": ["cat named Miso", "the cello"]})
        assert len(vectors["vectors"]) == len(vectors["queries"]) == 2
        assert vectors["queries"][0] == worker.engine.embedder.embed_query(
            "cat named Miso").tolist()
    finally:
        worker.engine.close()
