"""Interleaved A/B of two memd revisions on bench_scale's PostgreSQL dataset.

A shared virtual machine's speed can drift by up to 2x within an hour, so two benchmark
runs taken one after the other compare the hour as much as the code. Here both revisions
run at once, in two processes over the same dataset, and take turns in 2-second slots: A
compiles (or appends) in the even slots while B sleeps, B in the odd ones. Each prints its p50, p90
and p99 over all its slots.

    .venv/bin/python -m bench.ab HEAD~1                       # HEAD~1 against this checkout
    .venv/bin/python -m bench.ab HEAD~1 --what append --slots 20
    .venv/bin/python -m bench.ab HEAD~1 --backend sqlite
    .venv/bin/python -m bench.ab HEAD~1 --what tool-loop      # the proxy's tool-loop step
    .venv/bin/python -m bench.ab HEAD~1 --what tool-loop --cpu  # ... the CPU it costs memd
    .venv/bin/python -m bench.ab HEAD~1 --what tool-loop --stream  # ... streamed answers

The old revision is checked out into a temporary git worktree (its ``memd.backends`` and
``memd.sql`` linked in, as an installed package maps them) and runs with this checkout's
SQL migrations, so that it can open a dataset the new revision has migrated. Both sides run
this checkout's ``bench`` package (``python -m bench.ab``), each with its own ``memd``. The
dataset must exist (run ``python -m bench.bench_scale`` once). ``--what append`` appends to
a session of a scratch user, not the target's, so the timed phases of later runs see the
same target data (except with ``--team``: row-level security lets a request write only its
own user's rows, so team-mode appends go to a new session of the target).

``--what tool-loop`` needs no dataset: each side replays agent sessions like
``bench_proxy``'s (``--size``, ~100k tokens; a new seed at each replay) through its own
memd (SQLite in a temporary directory, 200 memories, the fake embedder) and fake upstream
on loopback ports, memd's jobs run between the steps, and times the latency memd adds to
a tool-loop step (one with no new user words) against the same upstream called directly,
as ``bench_proxy``'s ``tool_loop_added_ms`` does. With ``--cpu``, each side times the CPU
time the step costs memd instead (the process's CPU time through memd less directly): on
a machine that other work keeps busy the latency follows the scheduler more than the
code, while the CPU time does not. With ``--stream`` the agents ask for streamed answers,
as most agent CLIs do, and a step ends with its stream's end.

On SQLite (``--backend sqlite``, compiles only) the two processes share one database
file, and the compile that closes an access-statistics window writes its job, so one
side's writes would wait on the other's lock: both sides leave the access jobs out (the
compiles are measured without that write, ~0.2 ms once a second).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SLOT = 2.0  # seconds


def engine_layout_aliases() -> None:
    """Older revisions kept the engine's modules flat (``memd/engine/recall.py``), while
    this checkout's bench names them by subpackage (``memd.engine.retrieval.recall``):
    where only the flat module exists, the subpackage's name is made an alias of it."""
    import importlib
    import importlib.util
    import types

    import memd.engine

    for group in sorted((ROOT / "memd" / "engine").iterdir()):
        package = f"memd.engine.{group.name}"
        if not (group / "__init__.py").is_file() or importlib.util.find_spec(package):
            continue
        alias = types.ModuleType(package)
        sys.modules[package] = alias
        setattr(memd.engine, group.name, alias)
        for path in group.iterdir():
            name = path.stem
            if name.startswith("__") or importlib.util.find_spec(f"memd.engine.{name}") is None:
                continue
            module = importlib.import_module(f"memd.engine.{name}")
            sys.modules[f"{package}.{name}"] = module
            setattr(alias, name, module)


def worker(args: argparse.Namespace) -> None:
    """One side: set up and warm up, then run in slots ``args.slot``, +2, +4..."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    engine_layout_aliases()
    import gc

    import numpy as np

    with ExitStack() as stack:
        op = (_tool_loop if args.what == "tool-loop" else _store_op)(args, stack)
        gc.collect()
        gc.freeze()  # as `memd serve` does after start-up
        first = args.start
        times: list[float] = []
        i = 0
        for k in range(args.slots):
            slot = first + 2 * k + args.slot
            while time.time() < slot * SLOT:
                time.sleep(0.005)
            while time.time() < (slot + 0.9) * SLOT:
                ms = op(i)
                if ms is not None:
                    times.append(ms)
                i += 1
    what = (f"{args.what}{' (team)' if args.team else ''}{' streamed' if args.stream else ''}"
            f"{' CPU' if args.cpu else ''}")
    print(f"{args.label}: {what}, n {len(times)}: p50 "
          f"{np.percentile(times, 50):.2f} p90 {np.percentile(times, 90):.2f} p99 "
          f"{np.percentile(times, 99):.2f} ms", flush=True)


def _store_op(args: argparse.Namespace, stack: ExitStack) -> Callable[[int], float | None]:
    """A compile or an append on the dataset, timed in ms; the dataset opened, each of
    the target's sessions visited once."""
    import bench.scale_data as sd
    import memd
    from bench.bench_engine import sentence
    from memd.auth import acting_as
    from memd.models.embedder import FakeEmbedder

    spec = sd.Spec()
    base = Path(args.data_dir).expanduser()
    if args.backend == "sqlite":
        m = memd.open(base / f"sqlite-{spec.key()}", embedder=FakeEmbedder())
        # Both sides read the one file: the access jobs, a compile's one write, are left
        # out on both, so that neither waits on the other's write lock.
        m.jobs.enqueue_aside = lambda *_args: None  # type: ignore[method-assign]
    else:
        cluster = sd.PgCluster(base / "pg" / "pgdata", sd.PG_SETTINGS)
        m = memd.open(base / "pg" / "app", db=cluster.dsn(f"scale_{spec.key()}_256_256_512"),
                      embedder=FakeEmbedder(), pg_partitions=(256, 256, 512))
    stack.callback(m.close)
    rng = random.Random(3)
    sessions = [s.id for s in m.store.list_sessions(sd.TARGET, limit=1000)]
    queries = [sentence(rng, 8) for _ in range(50)]
    for q in queries:
        m.embedder.embed_query(q)
    m.store.warm_vectors(sd.TARGET)  # what `memd serve` loads for its user at start
    writer = sd.TARGET if args.team else "ab-scratch"
    scratch = m.create_session(writer).id if args.what == "append" else ""

    def op(i: int) -> float:
        t = time.perf_counter()
        with acting_as(sd.TARGET if args.team else None):
            if args.what == "append":
                m.append(scratch, writer, [{"role": "user", "content": sentence(rng, 20)}])
            else:
                m.context(sd.TARGET, session_id=sessions[i % len(sessions)],
                          query=queries[i % 50])
        return (time.perf_counter() - t) * 1000

    for i in range(len(sessions)):  # every session visited once: steady state
        op(i)
    return op


def _tool_loop(args: argparse.Namespace, stack: ExitStack) -> Callable[[int], float | None]:
    """bench_proxy's agent sessions replayed through memd on loopback (SQLite in a
    temporary directory, the fake embedder, 200 memories): the latency memd adds to a
    tool-loop step, in ms (None for the other steps); after 150 steps to warm up."""
    from dataclasses import replace

    import httpx

    import memd
    from bench.bench_proxy import TOPICS, ToolLoopReplay, serve
    from memd.config import load_settings
    from memd.server.app import create_app
    from tests.agent_traffic import ScriptedUpstream

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="memd-ab-loop-")))
    upstream = ScriptedUpstream()
    up = stack.enter_context(serve(upstream.app))
    settings = replace(load_settings(data_dir=tmp), upstream_url=f"{up}/v1",
                       embedder="fake")
    engine = memd.open(settings=settings)
    stack.callback(engine.close)
    rng = random.Random(3)
    for i in range(200):
        engine.add(f"For {rng.choice(TOPICS)} I prefer option {i} with setting "
                   f"{rng.choice(TOPICS)}-{rng.randint(1, 999)}", "local")
    app = create_app(engine, settings, run_jobs=False)
    base = stack.enter_context(serve(app))
    http = stack.enter_context(httpx.Client(timeout=120))
    # an older checkout's app may have no writes after its answers (memd.server.later)
    replay = ToolLoopReplay(engine, base, up, upstream, http, args.size,
                            getattr(app.state, "later", None), stream=args.stream)
    for _ in range(150):
        replay.step()
    if args.cpu:
        return lambda _i: (replay.step(), replay.cpu_added)[1]
    return lambda _i: replay.step()


def checkout(rev: str, into: Path) -> Path:
    """``rev`` as a worktree under ``into``, laid out as the installed package is."""
    tree = into / "a"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree),
                    rev], check=True)
    # Its side imports memd from the tree and bench from this checkout (the tree comes
    # first on its path): the tree's own bench, whatever its layout, must not shadow ours.
    shutil.rmtree(tree / "bench", ignore_errors=True)
    if (tree / "backends").is_dir():  # older trees kept the backends beside memd/
        (tree / "memd" / "backends").symlink_to(tree / "backends")
    sql = tree / "memd" / "sql"
    if sql.is_dir() and not sql.is_symlink():
        shutil.rmtree(sql)
    if sql.is_symlink():
        sql.unlink()
    sql.symlink_to(ROOT / "memd" / "sql")  # this checkout's migrations
    return tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev", help="the revision to compare this checkout with (A)")
    ap.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres",
                    help="sqlite: compiles only, without their access jobs (see above)")
    ap.add_argument("--what", choices=("compile", "append", "tool-loop"), default="compile")
    ap.add_argument("--size", type=int, default=100_000,
                    help="tool-loop: the agent sessions' last request, in tokens")
    ap.add_argument("--cpu", action="store_true",
                    help="tool-loop: the CPU time a step costs memd, not its latency")
    ap.add_argument("--stream", action="store_true",
                    help="tool-loop: the agents ask for streamed answers")
    ap.add_argument("--slots", type=int, default=30, help="slots per side (2 s each)")
    ap.add_argument("--team", action="store_true",
                    help="act as the target user (team mode: row-level security)")
    ap.add_argument("--data-dir", default="~/.cache/memd-bench")
    ap.add_argument("--slot", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend == "sqlite" and (args.what == "append" or args.team):
        ap.error("--backend sqlite compares compiles only, outside team mode")
    if (args.cpu or args.stream) and args.what != "tool-loop":
        ap.error("--cpu and --stream time tool-loop steps only")
    if args.slot is not None:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="memd-ab-") as tmp:
        tree = checkout(args.rev, Path(tmp))
        try:
            # Both sides open the dataset and warm up (~10 s) before the first slot; the
            # tool loop's 150 steps of warm-up take 20 s to over a minute on a busy machine.
            start = int(time.time() / SLOT) + (60 if args.what == "tool-loop" else 15)
            data_dir = Path(args.data_dir).expanduser().resolve()  # the sides run in tmp
            common = [sys.executable, "-m", "bench.ab", args.rev, "--backend", args.backend,
                      "--what", args.what, "--slots", str(args.slots),
                      "--size", str(args.size), *(["--cpu"] if args.cpu else []),
                      *(["--stream"] if args.stream else []),
                      "--data-dir", str(data_dir), "--start", str(start),
                      *(["--team"] if args.team else [])]
            sides = [
                subprocess.Popen([*common, "--slot", "0", "--label", f"A {args.rev}"],
                                 env={**os.environ,
                                      "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])},
                                 cwd=tmp),
                subprocess.Popen([*common, "--slot", "1", "--label", "B this checkout"],
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp),
            ]
            codes = [p.wait() for p in sides]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tree)], check=False)
    if any(codes):
        sys.exit(f"a side failed (exit codes {codes})")


if __name__ == "__main__":
    main()
