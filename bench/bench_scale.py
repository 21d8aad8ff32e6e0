"""Scale benchmark: memd on SQLite and on PostgreSQL with many users, memories and messages.

    nice -n 19 .venv/bin/python -m bench.bench_scale               # full (datasets cached)
    .venv/bin/python -m bench.bench_scale --quick                  # tiny, both backends, CI

Dataset (``bench.scale_data``, built once per spec under ``--data-dir``, default
~/.cache/memd-bench/): ``--users`` users; the measured user ``target`` has ``--memories``
memories and ``--messages`` messages (sessions of 500), every other user
``--other-memories`` and ``--other-messages``; one more user per growth size
(``--growth``, memories per user) has that many memories. PostgreSQL uses the production
partition layout (``--partitions``, default 256,256,512) on an embedded server whose data
directory persists beside the SQLite file.

Measured per backend, each timed phase after a warm-up, through memd's public API:

* compile (``Memd.context``) for the target: first the first visit of each of the
  target's sessions in this process (``compile_first_visit``: its history is read from
  the file, or from disk where the OS has dropped the file's pages, which a small VM
  does within a minute); then, every session visited once, as in a daemon that has
  served them (their histories in the process's cache, checked against each session's
  history state, memd.engine.conversation.history), without the query embedding (query vectors
  cached first, as the engine's query LRU does for a repeated query) and with it (every
  query new, so the real MiniLM ONNX model runs each time);
* search (``Memd.search``, default kinds) the same two ways;
* append-turn latency (``Memd.append``, one user message), then the proxy's turn:
  append a user message (untimed) and compile that session (``compile_after_append``:
  the compile reads the new turn only, the rest of the history is the process's cache);
* on PostgreSQL, compile and append again in team mode (``compile_team``,
  ``append_team``): acting as the target, as an authenticated request does, so every
  read and write runs as the role ``memd_app`` under row-level security;
* the growth curve: compile and search (embedding cached) for the growth users;
* ingestion throughput into a new user: ``add`` (memories/s) and ``append`` + the
  background jobs that embed the messages (messages/s), with the fake embedder and, on
  a smaller sample, the real ONNX MiniLM;
* RSS of a fresh process (psutil) that opened the store with MiniLM loaded and served the
  target's compiles and searches.

"With the query embedding": the store's vectors come from the fake embedder (a 1M-memory
dataset embedded with MiniLM would take hours on 2 cores), so the measured embedder runs
the real ONNX MiniLM on each query text (its real cost) and hands the engine the fake
vector of that text (neighbours consistent with the data). Load averages
(``os.getloadavg``) are recorded around every phase. Writes ``--out`` (JSON) and a PNG
growth plot beside it. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

# memd runs numpy's BLAS on one thread (memd/__init__.py), which only works if it is set
# before numpy loads: two spinning OpenBLAS threads double the CPU time of a KNN and
# slow it on a busy 2-core machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import bench.scale_data as sd  # noqa: E402
import memd  # noqa: E402
from bench.bench_engine import pct, sentence  # noqa: E402
from memd.auth import acting_as
from memd.engine.memory import Memd
from memd.models.embedder import FakeEmbedder
from memd.types import MemoryFilter

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "scale.json"
TARGETS = {"compile_p99_ms": 15.0, "append_p99_ms": 5.0, "rss_mb": 700.0}
WARM_PROCESS = 10  # compiles of a fresh process before its first-visit phase


class RealCostEmbedder:
    """The fake embedder's vectors (consistent with the dataset) at MiniLM's real cost:
    every call runs the ONNX MiniLM model on the same texts first."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.fake = FakeEmbedder()
        self.name = self.fake.name
        self.dim = self.fake.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.real.embed(texts)
        return self.fake.embed(texts)


def onnx_embedder() -> Any:
    from memd.registry import embedder_class

    real = embedder_class("minilm-onnx")(None)
    real.embed(["warm up the session"])
    return real


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def stats(ms: list[float]) -> dict[str, float]:
    return {"p50": round(pct(ms, 50), 2), "p95": round(pct(ms, 95), 2),
            "p99": round(pct(ms, 99), 2), "mean": round(float(np.mean(ms)), 2), "n": len(ms)}


def timed(fn: Callable[[int], Any], n: int, warm: int = 10,
          setup: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Run ``fn(i)`` ``warm`` times untimed, then ``n`` times timed; figures in ms. Wall
    time, and this process's CPU time (all threads; a PostgreSQL server's is not in it),
    which a busy machine disturbs less. ``setup(i)``, if given, runs untimed before each
    ``fn(i)``."""
    for i in range(warm):
        if setup is not None:
            setup(-1 - i)
        fn(-1 - i)
    before = load()
    ms, cpu = [], []
    for i in range(n):
        if setup is not None:
            setup(i)
        t, c = time.perf_counter(), time.process_time()
        fn(i)
        ms.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return {**stats(ms), "cpu_p50": round(pct(cpu, 50), 2), "cpu_p99": round(pct(cpu, 99), 2),
            "load_before": before, "load_after": load()}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- datasets and stores ------------------------------------------------------------------
class Backend:
    """Where one backend's dataset lives and how to open memd over it."""

    def __init__(self, name: str, args: argparse.Namespace, spec: sd.Spec) -> None:
        self.name = name
        self.spec = spec
        self.args = args
        self.cluster: sd.PgCluster | None = None
        self.dsn = ""
        key = spec.key()
        if name == "sqlite":
            self.path = args.data_dir / f"sqlite-{key}"
        else:
            p = args.partitions
            self.path = args.data_dir / "pg"
            self.dbname = f"scale_{key}_{p[0]}_{p[1]}_{p[2]}"

    def build(self) -> dict[str, Any]:
        t = time.perf_counter()
        if self.name == "sqlite":
            doc = sd.build_sqlite(self.path, self.spec)
        else:
            doc = sd.build_postgres(self.path, self.spec, self.dbname, self.args.partitions)
            self.cluster = sd.PgCluster(self.path / "pgdata", sd.PG_SETTINGS)
            self.dsn = self.cluster.dsn(self.dbname)
            with self.cluster.admin() as conn:
                # psycopg prepares a statement after 5 runs; PostgreSQL's generic plan for
                # it then locks every partition (512 x 4 history leaves and their
                # indexes) and runs out of lock table ("out of shared memory"). Custom
                # plans prune to the user's partition at planning time.
                conn.execute(f'ALTER DATABASE "{self.dbname}" SET plan_cache_mode '
                             f"= {self.args.plan_cache_mode}")
            doc = dict(doc, settled=self.settle())
        doc = dict(doc, reused=time.perf_counter() - t < 30)
        return doc

    def settle(self) -> dict[str, Any]:
        """VACUUM (ANALYZE) the tables earlier runs left dead rows or unanalyzed changes
        in. Otherwise autovacuum, woken by the server's start, cleans up after the last
        run's writes (its access stats, ingestion and jobs) beside the timed phases; a
        daemon's autovacuum keeps up with its writes between requests instead."""
        import psycopg

        t = time.perf_counter()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables "
                "WHERE n_dead_tup > 0 OR n_mod_since_analyze > 0").fetchall()]
            for table in tables:
                conn.execute(f"VACUUM (ANALYZE) {table}")
        log(f"{self.name}: settled {len(tables)} tables in {time.perf_counter() - t:.0f} s")
        return {"tables": len(tables), "seconds": round(time.perf_counter() - t, 1)}

    def open(self, embedder: Any) -> Memd:
        if self.name == "sqlite":
            return memd.open(self.path, embedder=embedder)
        return memd.open(self.path / "app", db=self.dsn, embedder=embedder,
                         pg_partitions=self.args.partitions)

    def probe_args(self) -> list[str]:
        return ["--probe-db", str(self.path.resolve()) if self.name == "sqlite" else self.dsn]

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


# -- phases -------------------------------------------------------------------------------
def sessions_of(m: Memd, user: str) -> list[str]:
    return [s.id for s in m.store.list_sessions(user, limit=1000)]


def latency_phases(m: Memd, args: argparse.Namespace, rng: random.Random,
                   team: bool) -> dict[str, Any]:
    """Compile, search and append for the target user; with ``team`` (PostgreSQL) in team
    mode too, under row-level security."""
    out: dict[str, Any] = {}
    user = sd.TARGET
    sessions = sessions_of(m, user)
    queries = [sentence(rng, 8) for _ in range(50)]
    fresh = iter([f"{sentence(rng, 8)} {i}" for i in range(10 * args.iterations)])
    n = args.iterations

    def compile_cached(i: int) -> None:
        m.context(user, session_id=sessions[i % len(sessions)], query=queries[i % 50])

    def compile_fresh(i: int) -> None:
        m.context(user, session_id=sessions[i % len(sessions)], query=next(fresh))

    def search_cached(i: int) -> None:
        m.search(queries[i % 50], user, k=10)

    def search_fresh(i: int) -> None:
        m.search(next(fresh), user, k=10)

    def first_visit(i: int) -> None:  # i < 0 is the warm-up: the first session
        m.context(user, session_id=sessions[max(0, i + 1) % len(sessions)],
                  query=queries[i % 50])

    for q in queries:  # into the query LRU: the cached phases exclude the embedding
        m.embedder.embed_query(q)
    # The first session is the warm-up: the process's one-time loads are not a session's
    # first visit. Those are the user's vectors and the tokenizer, and on PostgreSQL each
    # pooled connection's first statements (a new server process's catalog caches, the
    # prepared statements' generic plans): the first few compiles of a process are slow
    # whatever the session, so the warm-up compiles the first session WARM_PROCESS times.
    # Before it, what `memd serve` loads for its user at start (Store.warm_vectors: the
    # vectors, and on SQLite a long history's full-text index), as a daemon has.
    m.store.warm_vectors(user)
    visits = max(1, len(sessions) - 1)
    out["compile_first_visit"] = timed(first_visit, visits, warm=WARM_PROCESS)
    log(f"  compile_first_visit ({visits} sessions): p50 "
        f"{out['compile_first_visit']['p50']} p99 {out['compile_first_visit']['p99']} ms")
    for name, fn in (("compile", compile_cached), ("compile_with_embedding", compile_fresh),
                     ("search", search_cached), ("search_with_embedding", search_fresh)):
        for q in queries:
            m.embedder.embed_query(q)
        out[name] = timed(fn, n, warm=20)
        log(f"  {name}: p50 {out[name]['p50']} p99 {out[name]['p99']} ms "
            f"(cpu p50 {out[name]['cpu_p50']} p99 {out[name]['cpu_p99']})")
    append_sid = m.create_session(user).id

    def append(i: int) -> None:
        m.append(append_sid, user, [{"role": "user", "content": sentence(rng, 20)}])

    out["append"] = timed(append, n, warm=10)
    log(f"  append: p50 {out['append']['p50']} p99 {out['append']['p99']} ms")

    def compile_appended(i: int) -> None:  # the proxy's turn: append, then compile
        m.context(user, session_id=append_sid, query=queries[i % 50])

    # The compile after each append reads only the new turn (memd.engine.conversation.history).
    out["compile_after_append"] = timed(compile_appended, n, warm=10, setup=append)
    log(f"  compile_after_append: p50 {out['compile_after_append']['p50']} p99 "
        f"{out['compile_after_append']['p99']} ms")
    if team:
        m.store.check_row_security()

        def team_compile(i: int) -> None:
            with acting_as(user):
                compile_cached(i)

        def team_append(i: int) -> None:
            with acting_as(user):
                append(i)

        for name, fn in (("compile_team", team_compile), ("append_team", team_append)):
            out[name] = timed(fn, n, warm=20)
            log(f"  {name}: p50 {out[name]['p50']} p99 {out[name]['p99']} ms "
                f"(cpu p50 {out[name]['cpu_p50']} p99 {out[name]['cpu_p99']})")
    return out


def growth_phase(m: Memd, spec: sd.Spec, args: argparse.Namespace,
                 rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    queries = [sentence(rng, 8) for _ in range(50)]
    for q in queries:
        m.embedder.embed_query(q)
    n = max(20, args.iterations * 2 // 3)
    for size in spec.growth:
        user = sd.growth_user(size)
        sessions = sessions_of(m, user)

        def compile_(i: int, user: str = user, sessions: list[str] = sessions) -> None:
            m.context(user, session_id=sessions[i % len(sessions)], query=queries[i % 50])

        def search_(i: int, user: str = user) -> None:
            m.search(queries[i % 50], user, k=10)

        row = {"compile": timed(compile_, n, warm=20), "search": timed(search_, n, warm=10)}
        out[str(size)] = row
        log(f"  growth {size}: compile p50 {row['compile']['p50']} p99 "
            f"{row['compile']['p99']}, search p50 {row['search']['p50']} p99 "
            f"{row['search']['p99']} ms")
    return out


def tidy(m: Memd, spec: sd.Spec, built_at: float) -> int:
    """Erase what a run added to the target: the sessions that are not the dataset's (the
    one appended to) with what derives from them, and the memories made after the dataset
    was built (the background jobs' summaries of those sessions). Every run then measures
    the same data. The store's erasure, not ``Memd.erase_session``, which then scrubs the
    files (a VACUUM of the whole dataset). Returns how many sessions and memories went."""
    dataset = {sid for sid, _ in sd.user_sessions(spec, sd.TARGET, spec.messages)}
    extra = [sid for sid in sessions_of(m, sd.TARGET) if sid not in dataset]
    m.jobs.flush()
    for sid in extra:
        m.store.erase_session(sd.TARGET, sid)
    every = MemoryFilter(include_inactive=True, include_superseded=True, include_expired=True)
    made = [mem.id for mem in m.store.list_memories(sd.TARGET, every, limit=1000)
            if mem.created_at > built_at]
    for mid in made:
        m.store.delete_memory(sd.TARGET, mid)
    return len(extra) + len(made)


def ingest_phase(m: Memd, n_mem: int, n_msg: int, label: str) -> dict[str, Any]:
    """Throughput into a new user through the public API (erased before and after)."""
    rng = random.Random(time.time_ns())  # new texts each run: no embedding-cache hits
    user = f"ingest_{label}"
    m.store.erase_user(user)  # as in tidy: no scrub of the files
    texts = [sentence(rng) for _ in range(n_mem)]
    before = load()
    t = time.perf_counter()
    for text in texts:
        m.add(text, user)
    add_s = time.perf_counter() - t
    sid = m.create_session(user).id
    turns = [[{"role": "user", "content": sentence(rng, 20)},
              {"role": "assistant", "content": sentence(rng, 30)}] for _ in range(n_msg // 2)]
    t = time.perf_counter()
    for turn in turns:
        m.append(sid, user, turn)
    append_s = time.perf_counter() - t
    t = time.perf_counter()
    while m.run_jobs(1000):
        pass
    jobs_s = time.perf_counter() - t
    n_msgs = 2 * len(turns)
    m.jobs.flush()
    m.store.erase_user(user)
    return {
        "memories": n_mem, "memories_per_s": round(n_mem / add_s, 1),
        "messages": n_msgs, "append_messages_per_s": round(n_msgs / append_s, 1),
        "jobs_seconds": round(jobs_s, 2),
        "messages_per_s_with_jobs": round(n_msgs / (append_s + jobs_s), 1),
        "load_before": before, "load_after": load(),
    }


def rss_probe(args: argparse.Namespace) -> int:
    """In a fresh process: open the store with MiniLM (ONNX) and serve the target; print
    RSS in MB as JSON. With ``--probe-growth``, also load the largest growth user."""
    import psutil

    proc = psutil.Process()
    rss: dict[str, float] = {"start": proc.memory_info().rss / 2**20}
    db = args.probe_db
    if db.startswith("postgresql://"):
        m = memd.open(Path(tempfile.mkdtemp()), db=db, embedder="minilm-onnx")
    else:
        m = memd.open(Path(db), embedder="minilm-onnx")
    with contextlib.suppress(ImportError):  # the daemon's web stack, as `memd serve` has
        importlib.import_module("memd.server.app")
    rss["opened"] = proc.memory_info().rss / 2**20
    rng = random.Random(3)
    sessions = sessions_of(m, sd.TARGET)
    for i in range(30):
        m.context(sd.TARGET, session_id=sessions[i % len(sessions)], query=sentence(rng, 8))
        m.search(sentence(rng, 8), sd.TARGET, k=10)
    gc.collect()
    rss["served_target"] = proc.memory_info().rss / 2**20
    if args.probe_growth:
        user = sd.growth_user(args.probe_growth)
        for _ in range(5):
            m.search(sentence(rng, 8), user, k=10)
        gc.collect()
        rss[f"also_served_{user}"] = proc.memory_info().rss / 2**20
    m.close()
    print(json.dumps({k: round(v, 1) for k, v in rss.items()}))
    return 0


def run_probe(backend: Backend, growth: int) -> dict[str, Any]:
    cmd = [sys.executable, "-W", "ignore", "-m", "bench.bench_scale", "--rss-probe",
           *backend.probe_args(), "--probe-growth", str(growth)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    if res.returncode != 0:
        return {"error": res.stderr[-2000:]}
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def run_backend(name: str, args: argparse.Namespace, spec: sd.Spec,
                real: Any) -> dict[str, Any]:
    backend = Backend(name, args, spec)
    log(f"{name}: dataset")
    result: dict[str, Any] = {"dataset": backend.build()}
    try:
        rng = random.Random(11)
        m = backend.open(RealCostEmbedder(real))
        built_at = result["dataset"]["built_at"]
        if erased := tidy(m, spec, built_at):
            log(f"{name}: erased {erased} sessions and memories an earlier run left")
            if backend.cluster is not None:
                result["dataset"]["settled_again"] = backend.settle()
        gc.collect()
        gc.freeze()  # as `memd serve` does after start-up
        log(f"{name}: target latencies")
        result.update(latency_phases(m, args, rng, team=name == "postgres"))
        log(f"{name}: growth curve")
        result["growth"] = growth_phase(m, spec, args, rng)
        while m.run_jobs(1000):  # what the daemon would have done meanwhile (untimed)
            pass
        tidy(m, spec, built_at)  # the appended session: the next run starts from the same dataset
        m.close()
        gc.unfreeze()
        log(f"{name}: ingestion")
        with backend.open(FakeEmbedder()) as fake_m:
            result["ingest_fake"] = ingest_phase(fake_m, args.ingest_memories,
                                                 args.ingest_messages, "fake")
        with backend.open(real) as real_m:
            result["ingest_minilm"] = ingest_phase(real_m, args.ingest_real,
                                                   args.ingest_real * 2, "minilm")
        log(f"{name}: RSS probe")
        result["rss_mb"] = run_probe(backend, max(spec.growth))
    finally:
        backend.close()
    return result


def query_embedding(real: Any, n: int, rng: random.Random) -> dict[str, Any]:
    texts = [f"{sentence(rng, 8)} {i}" for i in range(n + 10)]
    it = iter(texts)
    return timed(lambda i: real.embed([next(it)]), n, warm=10)


# -- output -------------------------------------------------------------------------------
def verdicts(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, dict[str, list[Any]]] = {}
    for name, r in results["backends"].items():
        out[name] = {}
        for phase, target in (("compile", "compile_p99_ms"), ("compile_team", "compile_p99_ms"),
                              ("compile_after_append", "compile_p99_ms"),
                              ("compile_first_visit", "compile_p99_ms"),
                              ("append", "append_p99_ms"), ("append_team", "append_p99_ms")):
            if phase in r:  # the team phases: PostgreSQL only
                p99 = r[phase]["p99"]
                out[name][f"{phase}_p99_ms"] = [p99, TARGETS[target], p99 <= TARGETS[target]]
        rss = r.get("rss_mb", {}).get("served_target")
        if rss is not None:
            out[name]["rss_mb"] = [rss, TARGETS["rss_mb"], rss <= TARGETS["rss_mb"]]
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    styles = {"sqlite": "tab:blue", "postgres": "tab:orange"}
    for ax, metric in zip(axes, ("compile", "search"), strict=True):
        for name, r in results["backends"].items():
            sizes = sorted(int(s) for s in r["growth"])
            for p, dash in (("p50", "-"), ("p99", "--")):
                ys = [r["growth"][str(s)][metric][p] for s in sizes]
                ax.plot(sizes, ys, dash, marker="o", color=styles.get(name),
                        label=f"{name} {metric} {p}")
        ax.set_xscale("log")
        ax.set_xlabel("memories per user")
        ax.set_ylabel("ms")
        ax.set_title(f"{metric} latency (query embedding cached)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"memd growth curve ({results['machine']['cpus']} CPUs, load "
                 f"{results['load_start'][0]}-{results['load_end'][0]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, both backends, for CI")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--other-memories", type=int, default=10_000)
    ap.add_argument("--other-messages", type=int, default=1_000)
    ap.add_argument("--growth", default="1000,10000,100000",
                    help="memories per user of the growth-curve users")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--ingest-memories", type=int, default=1000)
    ap.add_argument("--ingest-messages", type=int, default=2000)
    ap.add_argument("--ingest-real", type=int, default=200,
                    help="memories (and twice as many messages) ingested with MiniLM")
    ap.add_argument("--partitions", default="256,256,512",
                    help="PostgreSQL hash partitions: sessions, memories, messages")
    ap.add_argument("--plan-cache-mode", default="force_custom_plan",
                    help="PostgreSQL plan_cache_mode set on the benchmark database "
                         "('auto' fails with the production partition layout)")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="persistent datasets (default ~/.cache/memd-bench; "
                         "a temp dir with --quick)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON results (default {DEFAULT_OUT.relative_to(ROOT)}; "
                         "a temp file with --quick); the plot is written beside it. "
                         "With --backends naming one backend, the other's figures already "
                         "in the file (same spec) are kept")
    ap.add_argument("--rss-probe", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-db", default="", help=argparse.SUPPRESS)
    ap.add_argument("--probe-growth", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_probe:
        return rss_probe(args)
    tmp = None
    if args.quick:
        args.users, args.memories, args.messages = 3, 300, 1000
        args.other_memories, args.other_messages, args.growth = 100, 200, "100,300,1000"
        args.iterations, args.ingest_memories, args.ingest_messages = 20, 30, 60
        args.ingest_real = 10
        if args.partitions == "256,256,512":
            args.partitions = "4,4,4"
        tmp = tempfile.TemporaryDirectory(prefix="memd-bench-scale-")
        args.data_dir = args.data_dir or Path(tmp.name)
        args.out = args.out or Path(tmp.name) / "scale.json"
    args.data_dir = args.data_dir or Path.home() / ".cache" / "memd-bench"
    args.out = args.out or DEFAULT_OUT
    args.partitions = tuple(int(p) for p in args.partitions.split(","))
    spec = sd.Spec(
        users=args.users, memories=args.memories, messages=args.messages,
        other_memories=args.other_memories, other_messages=args.other_messages,
        growth=tuple(int(g) for g in args.growth.split(",")),
        growth_messages=min(1000, args.messages),
    )
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "nice": os.nice(0)},
        "spec": {**asdict(spec), "pg_partitions": list(args.partitions),
                 "iterations": args.iterations},
        "targets": TARGETS, "load_start": load(), "backends": {},
    }
    if args.out.exists() and not args.quick:  # keep the other backends' latest figures
        old = json.loads(args.out.read_text())
        if old.get("spec") == json.loads(json.dumps(results["spec"])):
            results["backends"] = {k: v for k, v in old.get("backends", {}).items()
                                   if k not in args.backends.split(",")}
    t0 = time.perf_counter()
    real = onnx_embedder()
    results["query_embedding_ms"] = query_embedding(real, args.iterations,
                                                    random.Random(5))
    for name in args.backends.split(","):
        started, load_before = time.strftime("%Y-%m-%d %H:%M:%S"), load()
        results["backends"][name] = {"started": started, "load_start": load_before,
                                     **run_backend(name, args, spec, real),
                                     "load_end": load()}
    results["load_end"] = load()
    results["verdicts"] = verdicts(results)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    png = args.out.with_name(args.out.stem + "_growth.png")
    plot(results, png)
    print(json.dumps({"verdicts": results["verdicts"], "out": str(args.out),
                      "plot": str(png)}, indent=2))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
