"""mem0's side of ``bench.mem0_compare``: runs with the mem0 venv's python, never memd's.

It speaks the same line protocol as memd's worker in ``bench.mem0_compare`` (one JSON
request per stdin line, one JSON reply per stdout line; ops ``setup``, ``add``,
``search``, ``embed``, ``stats``, ``quit``) and times each mem0 call itself, so the pipe
is not in the figures. Library output goes to stderr: stdout carries only replies.

mem0 is configured fully local: the HuggingFace (sentence-transformers) embedder on the
local all-MiniLM-L6-v2 directory, its default vector store (Qdrant in local mode, in a
temporary directory), its SQLite history in the same directory, telemetry off
(``MEM0_TELEMETRY=False``, set by the parent before this process starts, because mem0
reads it at import), ``HF_HUB_OFFLINE=1``, and memories added with ``infer=False``, so
the LLM is never called. mem0 builds an LLM client at construction all the same; it gets
a placeholder key and a loopback base URL that nothing listens on. Every socket connect
to a non-loopback address is refused and recorded (``stats`` reports them), so a network
call would show in the results instead of going out.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import time
from typing import Any

_BLOCKED: list[str] = []
_real_connect = socket.socket.connect


def _guarded_connect(self: socket.socket, address: Any) -> None:
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and not (
        str(host).startswith("127.") or host in ("::1", "localhost")
    ):
        _BLOCKED.append(str(host))
        raise OSError(f"mem0_driver: network access to {host} refused")
    _real_connect(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign,assignment]


class Driver:
    def __init__(self) -> None:
        self.memory: Any = None

    def setup(self, req: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        from importlib.metadata import version

        from mem0 import Memory

        directory = req["dir"]
        config = {
            "embedder": {"provider": "huggingface", "config": {
                "model": req["model_path"], "embedding_dims": 384,
                "model_kwargs": {"device": "cpu"}}},
            "vector_store": {"provider": "qdrant", "config": {
                "collection_name": "bench", "embedding_model_dims": 384,
                "path": os.path.join(directory, "qdrant"), "on_disk": False}},
            "llm": {"provider": "openai", "config": {
                "api_key": "unused-infer-false", "openai_base_url": "http://127.0.0.1:9/v1"}},
            "history_db_path": os.path.join(directory, "history.db"),
        }
        self.memory = Memory.from_config(config)
        versions = {d: version(d) for d in ("mem0ai", "qdrant-client", "sentence-transformers",
                                            "torch", "transformers")}
        import torch

        return {"load_s": time.perf_counter() - t0, "versions": versions,
                "torch_threads": torch.get_num_threads()}

    def add(self, req: dict[str, Any]) -> dict[str, Any]:
        ms = []
        for item in req["items"]:
            t0 = time.perf_counter()
            self.memory.add(item["text"], user_id=item["user"], infer=False,
                            metadata={"hs": item["sid"], "turn": item["turn"]})
            ms.append((time.perf_counter() - t0) * 1000)
        return {"ms": ms}

    def search(self, req: dict[str, Any]) -> dict[str, Any]:
        out = []
        for q in req["queries"]:
            t0 = time.perf_counter()
            # threshold 0: no cut, like memd (mem0's default 0.1 could only lower recall)
            res = self.memory.search(q["text"], top_k=req["k"], filters={"user_id": q["user"]},
                                     threshold=0.0)
            ms = (time.perf_counter() - t0) * 1000
            ranked = [[r["metadata"]["hs"], r["metadata"]["turn"]] for r in res["results"]]
            out.append({"ms": ms, "ranked": ranked})
        return {"results": out}

    def embed(self, req: dict[str, Any]) -> dict[str, Any]:
        model = self.memory.embedding_model
        return {"vectors": [list(map(float, model.embed(t, "search"))) for t in req["texts"]]}

    def stats(self, req: dict[str, Any]) -> dict[str, Any]:
        return {"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "blocked_connections": _BLOCKED}


def main() -> int:
    # Replies go to the original stdout; anything a library prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    driver = Driver()
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "quit":
            break
        reply = getattr(driver, op)(req)
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
