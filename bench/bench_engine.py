"""Engine latency benchmark: context compile and append-turn for one user among many.

    .venv/bin/python -m bench.bench_engine                 # 10k memories, 100k messages
    .venv/bin/python -m bench.bench_engine --quick         # small, for CI smoke runs

Builds a fresh SQLite store in a temp dir: the measured user gets ``--memories`` memories
and ``--messages`` messages (in sessions of ``--session-len``), and ``--others`` other
users get a tenth of that each. Compile is measured without the query embedding (query
vectors are computed and cached before timing, as the engine's query LRU does for a
repeated query); everything else (facts, KNN, FTS, scoring, packing, the access-stats job
write) is inside the timing. As in the daemon, objects made during set-up are frozen out of
the garbage collector (``gc.freeze()``) and the first queries (which load the user's vector
cache) are not timed. Prints p50/p95/p99 in milliseconds. Not a test: it asserts
nothing and prints figures.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import memd
from bench.output import emit
from memd.engine.learning.write import content_hash
from memd.models.tokens import count_text
from memd.types import Memory, NewMessage

TECH = (
    "deploy kubernetes docker python rust tabs spaces editor vim emacs postgres sqlite "
    "redis cache latency budget token memory context prompt model llama server client "
    "test pytest fixture benchmark build release branch merge review commit lint format"
).split()
SYLLABLES = "ka ri to ne mu sa lo vi de pa fu ge ho ji ku ma no ru se ta yo zu bi".split()


STOPWORDS = ("the of and to a in is it you that he was for on are with as i his they be "
             "at one have this from or had by what but some we can out other were all "
             "there when up use your how said an each she which do their if will way about "
             "many then them would like so these her see him has more could go come did my "
             "no most who over know than call first may down been now find any new").split()


def _vocabulary(size: int = 5000) -> tuple[list[str], list[float]]:
    """A Zipf-distributed vocabulary (weight 1/rank), as in natural text, so full-text
    matches are as selective as on real conversations: the top ranks are English
    function words (as in real text), then pseudo-words with the tech words among them."""
    rng = random.Random(1)
    words = set(TECH)
    while len(words) < size - len(STOPWORDS):
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    content = sorted(words)
    rng.shuffle(content)
    ordered = list(STOPWORDS) + content
    cum, total = [], 0.0
    for rank in range(1, len(ordered) + 1):
        total += 1.0 / rank
        cum.append(total)
    return ordered, cum


VOCAB, CUM = _vocabulary()


def sentence(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choices(VOCAB, cum_weights=CUM, k=n)).capitalize() + "."


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def populate(m: memd.engine.memory.Memd, user: str, n_mem: int, n_msg: int, session_len: int,
             rng: random.Random) -> list[str]:
    texts = [sentence(rng) for _ in range(n_mem)]
    vecs = m.embedder.inner.embed(texts)
    now = time.time()
    with m.store.transaction():
        for text, vec in zip(texts, vecs, strict=True):
            m.store.insert_memory(Memory(
                id=uuid.uuid4().hex, user_id=user, text=text, content_hash=content_hash(text),
                token_count=count_text(text), created_at=now - rng.random() * 1e7,
                updated_at=now, access_count=rng.randint(0, 30),
                importance=rng.random(), confidence=rng.random(),
            ), vec)
    sessions = []
    for start in range(0, n_msg, session_len):
        s = m.create_session(user)
        sessions.append(s.id)
        batch = [NewMessage("user" if i % 2 == 0 else "assistant", sentence(rng, 30))
                 for i in range(min(session_len, n_msg - start))]
        m.store.append_messages(user, s.id, batch, [40] * len(batch), [None] * len(batch), now)
    return sessions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--others", type=int, default=9)
    ap.add_argument("--session-len", type=int, default=500)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for CI")
    ap.add_argument("--out", "--json", type=Path,
                    help="also write the figures to this JSON file")
    args = ap.parse_args()
    if args.quick:
        args.memories, args.messages, args.others, args.iterations = 300, 2000, 2, 30
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        m = memd.open(Path(tmp), embedder="fake")
        t0 = time.perf_counter()
        for i in range(args.others):
            populate(m, f"other{i}", args.memories // 10, args.messages // 10,
                     args.session_len, rng)
        sessions = populate(m, "target", args.memories, args.messages, args.session_len, rng)
        print(f"populated in {time.perf_counter() - t0:.1f} s: target has {args.memories} "
              f"memories, {args.messages} messages; {args.others} other users", file=sys.stderr)
        queries = [sentence(rng, 8) for _ in range(50)]
        for q in queries:
            m.embedder.embed_query(q)  # warm the query LRU: timing excludes embedding
        gc.collect()
        gc.freeze()  # as `memd serve` does after start-up: no GC walks over the setup
        for i in range(20):  # steady state: the first query loads the user's vector cache
            m.context("target", session_id=sessions[i % len(sessions)], query=queries[i % 50])
        compile_ms, append_ms = [], []
        for i in range(args.iterations):
            sid = sessions[i % len(sessions)]
            t = time.perf_counter()
            m.context("target", session_id=sid, query=queries[i % len(queries)])
            compile_ms.append((time.perf_counter() - t) * 1000)
        for i in range(args.iterations):
            sid = sessions[i % len(sessions)]
            msg = [{"role": "user", "content": sentence(rng, 20)}]
            t = time.perf_counter()
            m.append(sid, "target", msg)
            append_ms.append((time.perf_counter() - t) * 1000)
        m.close()
    result = {
        "memories": args.memories, "messages": args.messages, "other_users": args.others,
        "compile_ms": {p: round(pct(compile_ms, q), 2)
                       for p, q in (("p50", 50), ("p95", 95), ("p99", 99))},
        "append_ms": {p: round(pct(append_ms, q), 2)
                      for p, q in (("p50", 50), ("p95", 95), ("p99", 99))},
        "compile_mean_ms": round(statistics.fmean(compile_ms), 2),
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
