"""mem0_compare's memd side: ``python -m bench.mem0_memd`` under memd's python, one JSON
request a line on stdin, one reply a line on stdout (the protocol of
``bench.mem0_driver``, mem0's side). Each call times itself, so the pipe is not in the
figures.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as memd sets it, before numpy loads

from bench.longmemeval import SimClock  # noqa: E402

SOURCE = "longmemeval"  # the import source memd's conversations are stored under


class MemdWorker:
    """memd's side of the protocol, see ``bench.mem0_driver``."""

    def __init__(self) -> None:
        self.clock = SimClock()
        self.engine: Any = None
        self.turns: dict[str, tuple[str, int]] = {}  # message id: haystack session, turn
        self._exact_model: Any = None

    def setup(self, req: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        from importlib.metadata import version

        import memd

        # Queries on the daemon's default (the int8 copy) or, with --memd-queries
        # float32, on the exact model as mem0's: the same query vectors on both sides.
        self.engine = memd.open(Path(req["dir"]), embedder=req["embedder"], clock=self.clock,
                                max_text_chars=req["max_text_chars"],
                                query_precision=req["query_precision"])
        self.engine.embedder.inner.embed(["load the model"])  # mem0 loads at construction
        gc.collect()
        gc.freeze()  # as `memd serve` does after start-up
        versions = {d: version(d) for d in ("memd", "onnxruntime", "numpy")}
        return {"load_s": time.perf_counter() - t0, "versions": versions}

    def add(self, req: dict[str, Any]) -> dict[str, Any]:
        """The items (one user's haystack sessions) through the import path, as
        ``memd import-history`` stores a history: one conversation per haystack
        session, its turns at the session's date, jobs run, so every turn is embedded
        and extracted, searchable, when the import returns. Each turn is timed as its
        share of the import. The passages of the turns (which refine how a found turn
        ranks, memd.engine.retrieval.passages) are embedded next by their jobs, before this
        returns, so every search sees them; their time is reported apart."""
        from memd.imports import Conversation, Turn, import_conversations
        from memd.imports.write import session_id_for

        engine = self.engine
        by_session: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for item in req["items"]:
            by_session.setdefault((item["user"], item["sid"]), []).append(item)
        by_user: dict[str, list[Conversation]] = {}
        for (user, sid), items in by_session.items():
            turns = tuple(Turn("user", it["text"], it["at"]) for it in items)
            by_user.setdefault(user, []).append(
                Conversation(SOURCE, sid, turns, client=SOURCE, created_at=items[0]["at"]))
        self.clock.at = None  # the import's clock follows the turns' times
        t0 = time.perf_counter()
        for user, convs in by_user.items():
            import_conversations(engine, user, convs, run_jobs=True, passages_later=True)
        took_ms = (time.perf_counter() - t0) * 1000
        t1 = time.perf_counter()
        while engine.jobs.run_due():  # the passages, before any search (not timed)
            pass
        passages_ms = (time.perf_counter() - t1) * 1000
        for (user, sid), items in by_session.items():  # which message is which turn
            stored = engine.messages(session_id_for(user, SOURCE, sid), user)
            kept = [it for it in items if it["text"].strip()]  # an empty turn is skipped
            for item, message in zip(kept, stored[-len(kept):], strict=True):
                self.turns[message.id] = (sid, item["turn"])
        n = len(req["items"])
        return {"ms": [took_ms / n] * n, "passages_ms": passages_ms}

    def search(self, req: dict[str, Any]) -> dict[str, Any]:
        out = []
        for q in req["queries"]:
            self.clock.at = q["now"]
            t0 = time.perf_counter()
            hits = self.engine.search(q["text"], q["user"], k=req["k"], kinds=["message"])
            ms = (time.perf_counter() - t0) * 1000
            out.append({"ms": ms, "ranked": [list(self.turns[h.id]) for h in hits]})
        return {"results": out}

    def embed(self, req: dict[str, Any]) -> dict[str, Any]:
        # vectors: the exact model's (the weights mem0 has too); queries: the very
        # vectors search used (from memd's query LRU when searched)
        embedder = self.engine.embedder
        return {"vectors": self._exact().embed(req["texts"]).tolist(),
                "queries": [embedder.embed_query(t).tolist() for t in req["texts"]]}

    def _exact(self) -> Any:
        """The exact model: the engine's own when it stores texts on it, else one loaded
        for the check alone (memd's stored texts run on a quantized copy by default)."""
        inner = self.engine.embedder.inner
        if getattr(inner, "document_precision", "float32") == "float32":
            return inner
        if self._exact_model is None:
            from memd.models.onnx_embedder import OnnxMiniLMEmbedder

            self._exact_model = OnnxMiniLMEmbedder(inner.model_path, cache_dir=inner.cache_dir,
                                                   document_precision="float32")
        return self._exact_model

    def stats(self, req: dict[str, Any]) -> dict[str, Any]:
        import resource

        return {"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "blocked_connections": []}


def serve_memd() -> int:
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints go to stderr
    worker = MemdWorker()
    try:
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "quit":
                break
            proto.write(json.dumps(getattr(worker, req["op"])(req)) + "\n")
            proto.flush()
    finally:
        if worker.engine is not None:
            worker.engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve_memd())
