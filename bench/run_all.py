"""Every benchmark in one run, and memd's benchmark targets judged on that run's figures.

    nice -n 19 .venv/bin/python -m bench.run_all      # all of them: bench/results/all.json
    .venv/bin/python -m bench.run_all --quick         # CI: every harness at tiny sizes

Runs, each in a process of its own (``python -m bench.<name>`` from the repo root) and one
after the other (so none disturbs another's figures): ``bench_scale`` (SQLite and
PostgreSQL at 100 users, 1.1M memories: builds its datasets into ``~/.cache/memd-bench``
on the first run), ``bench_proxy`` (proxy overhead), ``longmemeval --interleave`` (all 418
evaluable questions of LongMemEval_S with the BM25 and dense baselines; MiniLM vectors are
cached by text in ``~/.cache/memd-bench/embeddings.sqlite``: hours cold, minutes warm) and
``mem0_compare`` (creates mem0's venv on its first run), ``bench_recall`` (the evidence in
the memory block the model gets), ``bench_precision`` (what else the block holds, and
whether an unrelated question gets one) and ``bench_query_precision`` (the int8 query
model against the float one), ``bench_agents`` (what memd learns from the recorded
traffic of four agent CLIs, and their sessions), ``bench_sanitizer`` (what redacting
secrets adds to a turn); longmemeval, mem0_compare and the recall and both precision
runs on it read LongMemEval_S from
``$MEMD_BENCH_LONGMEMEVAL`` (bench/README.md says where to get it), as does
``bench_helper`` (the llama.cpp helper model: LLM extraction, compaction, the chat path
while the job worker runs it), ``bench_watch`` (how soon a running daemon sees an edit of
its config file or notes folder), ``bench_footprint`` (the user's install in a fresh
venv: its size, the daemon's RSS and first requests), ``bench_soak`` (the daemon's RSS
through 50,000 concurrent streaming chats) and ``bench_virtual`` (context virtualization
on the replayed agent session), ``bench_generalize`` (retrieval per question kind on
a generated team's weeks, dev part, beside BM25 and dense) and ``bench_message_vectors``
(a large history's message vector search on SQLite). Each writes its JSON
(and PNG plots) into ``--dir``; then ``all.json`` there holds the machine, every script's
figures and the targets table: each benchmark target (bench/README.md) with what this run
measured and whether it is met. ``--only`` runs some of them (the table then judges
only theirs); ``--markdown ALL_JSON`` prints an earlier run's targets table for the
README. With ``--quick`` everything goes to a temporary directory and nothing is
judged: tiny sizes say nothing about the targets.

Exits non-zero only when a script fails: a missed target is a figure, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# As memd and every script here run NumPy (before it loads): one BLAS thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: Benchmark targets that are not in a script's own verdicts.
LME_TARGETS = (("session", "recall_any@5", 0.98), ("session", "recall_all@5", 0.90),
               ("turn", "recall_any@5", 0.88))
MEM0_SPEEDUP = 10.0
#: Injected recall: the share of questions whose evidence reaches the 2,000-token block,
#: and how far it may stay below search's turn recall_any@5 on the same questions.
RECALL_IN_BLOCK = 0.85
RECALL_BELOW_SEARCH = 0.05
#: Memory precision (bench_precision): unrelated questions that get any item, items of
#: the users' own blocks from an answering session, evidence in the block, memories not
#: grounded in the user's words.
FALSE_INJECTION = 0.10
LINE_PRECISION = 0.6
JUNK_RATE = 0.0
#: The int8 query model may lose at most this much of the float model's recall_any@5.
QUERY_RECALL_LOSS = 0.01
#: The sanitizer's p99 per call: a 2 KB turn, a 100 KB tool result.
SANITIZE_TURN_MS = 1.0
SANITIZE_RESULT_MS = 10.0
#: Compaction: a summary at most this fraction of its window (the median over sessions).
COMPACTION_RATIO = 5.0
#: The chat path with the job worker running the helper: p50 at most this much slower.
BUSY_SLOWDOWN = 1.25


@dataclass(frozen=True)
class Bench:
    name: str
    module: str  # bench.<module>, run as ``python -m``
    args: tuple[str, ...]  # a full run's
    quick: tuple[str, ...]  # CI's
    out_flag: str = "--out"

    def command(self, out: Path, quick: bool) -> list[str]:
        cmd = [sys.executable, "-m", f"bench.{self.module}",
               *(self.quick if quick else self.args)]
        cmd += [self.out_flag, str(out)]
        if self.name == "longmemeval":  # its plot is asked for, the others write theirs
            cmd += ["--plot", str(out.with_suffix(".png"))]
        return cmd


BENCHES = (
    Bench("scale", "bench_scale", (), ("--quick",)),
    Bench("proxy", "bench_proxy", (), ("--quick", "--embedder", "fake")),
    Bench("longmemeval", "longmemeval", ("--interleave",), ("--quick",)),
    Bench("mem0", "mem0_compare", (), ("--quick",)),
    Bench("recall", "bench_recall", (), ("--quick",)),
    Bench("precision", "bench_precision", (), ("--quick",)),
    Bench("query_precision", "bench_query_precision", (), ("--quick",)),
    Bench("agents", "bench_agents", (), ("--quick",)),
    Bench("sanitizer", "bench_sanitizer", (), ("--quick",)),
    Bench("helper", "bench_helper", (), ("--quick",)),
    Bench("watch", "bench_watch", (), ("--quick",)),
    Bench("footprint", "bench_footprint", (), ("--quick",)),
    Bench("soak", "bench_soak", (), ("--quick",)),
    Bench("import", "bench_import", (), ("--quick",)),
    Bench("virtual", "bench_virtual", (), ("--quick",)),
    Bench("ui", "bench_ui", (), ("--quick",)),
    Bench("generalize", "bench_generalize", (), ("--quick", "--embedder", "fake")),
    Bench("message_vectors", "bench_message_vectors", (), ("--quick",)),
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(bench: Bench, out: Path, quick: bool) -> dict[str, Any]:
    """Run one benchmark from the repo root (``out`` absolute); its JSON result, with the
    command and the wall time."""
    cmd = bench.command(out, quick)
    shown = " ".join(["python", *cmd[1:]])
    log(f"{bench.name}: {shown}")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = round(time.perf_counter() - t0, 1)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"{bench.name} failed (exit {done.returncode}) after {wall} s")
    speed = calibrate()
    log(f"{bench.name}: done in {wall} s; machine speed after it: {speed}")
    return {"command": shown, "wall_s": wall, "speed_after": speed,
            "result": json.loads(out.read_text("utf-8"))}


def _row(target: str, measured: float | str, limit: str, met: bool) -> dict[str, Any]:
    return {"target": target, "measured": measured, "limit": limit, "met": met}


def scale_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """bench_scale's own verdicts (compile and append p99, RSS), and sub-linear growth:
    compile p50 at the largest growth user over the smallest, against their size ratio."""
    for backend, verdicts in r["verdicts"].items():
        for key, (value, limit, met) in verdicts.items():
            unit = "MB" if key.endswith("_mb") else "ms"
            yield _row(f"{backend} {key.removesuffix('_ms').removesuffix('_mb')}",
                       value, f"<= {limit:g} {unit}", bool(met))
    for backend, res in r["backends"].items():
        growth = res.get("growth") or {}
        if len(growth) < 2:
            continue
        sizes = sorted(growth, key=int)
        small, large = growth[sizes[0]]["compile"]["p50"], growth[sizes[-1]]["compile"]["p50"]
        times, size_ratio = large / small, int(sizes[-1]) / int(sizes[0])
        yield _row(f"{backend} compile p50 growth {sizes[0]} -> {sizes[-1]} memories",
                   f"x{times:.1f}", f"< x{size_ratio:g} (sub-linear)", times < size_ratio)


def lme_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    summary = r["summary"]
    for level, key, limit in LME_TARGETS:
        got = summary["memd"][level][key]
        yield _row(f"LongMemEval_S {level} {key}", round(got, 3), f">= {limit}", got >= limit)
    below = r["below_baseline"]
    yield _row("LongMemEval_S memd >= the better baseline at every k and metric",
               f"{len(below)} cells below", "0 cells below", not below)


def mem0_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    v = r["verdict"]
    yield _row("search p50 speed-up over mem0 (query embedding included)",
               f"x{v['search_p50_speedup']}", f">= x{MEM0_SPEEDUP:g}",
               v["search_p50_speedup"] >= MEM0_SPEEDUP)
    if "ingest_ratio" in v:
        yield _row("ingest until searchable over mem0's turns/s (import path)",
                   f"x{v['ingest_ratio']}", f">= x{v['ingest_target']:g}", v["ingest_ok"])
    yield _row("recall_any@k >= mem0's at every k",
               ", ".join(v["recall_below_mem0_at"]) or "none below", "none below",
               not v["recall_below_mem0_at"])


PROXY_ADDED_P50_MS = 15.0
TOOL_LOOP_ADDED_P50_MS = 5.0  # a step that brings no new user words: nothing retrieved
PREFIX_SHARE = 0.95


def proxy_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The Chat Completions door's (below) and the other doors' (:func:`door_targets`).

    Chat Completions: the replayed agent sessions of the largest size (requests of ~100k
    tokens, where a cache miss costs most): memd's added latency, and how much of each
    request is the previous one's prefix. Beside it the client's own figure, the most any
    proxy could keep (every new message lowers it), and the mean over all sizes: in short
    sessions one file read is a large part of every request, so no proxy reaches the
    target there."""
    agent = r.get("agent") or {}
    if agent:
        yield from agent_targets(agent)
    yield from door_targets(r.get("doors") or {})


def agent_targets(agent: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The Chat Completions door's figures of :func:`proxy_targets`."""
    size = max(agent, key=int)
    largest = agent[size]
    p50 = largest["added_ms"]["p50"]
    yield _row(f"proxy added latency p50, agent requests of ~{size} tokens", p50,
               f"<= {PROXY_ADDED_P50_MS:g} ms", p50 <= PROXY_ADDED_P50_MS)
    loop = largest.get("tool_loop_added_ms")
    if loop and largest.get("tool_loop_calls"):
        cpu = (largest.get("tool_loop_cpu_ms") or {}).get("p50")
        yield _row(f"proxy added latency p50, tool-loop steps of ~{size}-token agent "
                   f"sessions ({largest['tool_loop_calls']} steps; CPU {cpu} ms)",
                   loop["p50"], f"<= {TOOL_LOOP_ADDED_P50_MS:g} ms",
                   loop["p50"] <= TOOL_LOOP_ADDED_P50_MS)
    for name, memd_key, client_key in (
        ("share of each request that is the previous one's prefix",
         "prefix_share_memd", "prefix_share_client"),
        ("share of the session's prompt tokens that are the previous request's prefix",
         "prefix_tokens_memd", "prefix_tokens_client"),
    ):
        if memd_key not in largest:
            continue
        got = largest[memd_key]
        every = sum(a[memd_key] for a in agent.values()) / len(agent)
        ceiling = sum(a[client_key] for a in agent.values()) / len(agent)
        breaks = largest.get("prefix_breaks_memd")
        why = ("" if breaks is None else f"; steps memd breaks earlier than the client: "
               f"{breaks['block']} by its block, {breaks['rewritten']} by a rewrite")
        yield _row(f"prompt-prefix stability, ~{size}-token sessions: {name}",
                   f"{got:.3f} (client's own {largest[client_key]:.3f}; all sizes "
                   f"{every:.3f}, client's own {ceiling:.3f}{why})", f">= {PREFIX_SHARE}",
                   got >= PREFIX_SHARE)
    reused = [a["previous_reused_memd"] for a in agent.values()]
    kept = sum(reused) / len(reused)
    yield _row("prompt cache kept: share of each request that the next one starts with",
               round(kept, 3), f">= {PREFIX_SHARE}", kept >= PREFIX_SHARE)


DOOR_NAMES = {"anthropic_messages": "Anthropic Messages",
              "openai_responses": "OpenAI Responses", "ollama_chat": "Ollama /api/chat"}


def door_targets(doors: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The Anthropic Messages, OpenAI Responses and Ollama doors, measured in the same run
    as the Chat Completions door: the latency each adds to sessions of Claude Code-,
    Codex- and Continue-shaped requests (~100k tokens), and the prompt-prefix stability
    of the recorded Claude Code and Codex sessions replayed through memd, with the cache
    read logged per call."""
    for key, name in DOOR_NAMES.items():
        if key not in doors:
            continue
        d = doors[key]
        p50 = d["added_ms"]["p50"]
        yield _row(f"{name} door added latency p50, requests of "
                   f"~{max(d['last_request_tokens'])} tokens "
                   f"(CPU {d['cpu_added_ms']['p50']} ms)", p50,
                   f"<= {PROXY_ADDED_P50_MS:g} ms", p50 <= PROXY_ADDED_P50_MS)
    for key, client in (("claude_code_replay", "Claude Code"), ("codex_replay", "Codex")):
        replay = doors.get(key)
        if not replay:
            continue
        low = replay["prefix_share_min"]
        yield _row(f"recorded {client} session ({replay['turns']} turns, {replay['calls']} "
                   f"calls): each call's share that is the previous call's prefix, lowest",
                   low, f">= {PREFIX_SHARE}", low >= PREFIX_SHARE)
        yield _row(f"recorded {client} session: the cache read logged per call",
                   str(replay["cache_logged_every_call"]).lower(), "true",
                   bool(replay["cache_logged_every_call"]))


def recall_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The evidence in the memory block the model gets, against search's recall."""
    got = r["block_recall"]["2000"]
    search = r["search_recall_any_at_5"]
    yield _row("injected recall: evidence in the 2,000-token memory block (LongMemEval_S)",
               f"{got:.3f} (1,000 tokens: {r['block_recall']['1000']:.3f})",
               f">= {RECALL_IN_BLOCK}", got >= RECALL_IN_BLOCK)
    yield _row("injected recall at 2,000 tokens against search turn recall_any@5",
               f"{got:.3f} vs {search:.3f}", f">= search - {RECALL_BELOW_SEARCH}",
               got >= search - RECALL_BELOW_SEARCH)


def precision_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """What the memory block holds: nothing for an unrelated question, what answers for
    the user's own, the evidence still there, and no memory the user did not say."""
    n = r["unrelated_questions"]
    yield _row(f"false injection: unrelated questions given any memory ({n}, LongMemEval_S)",
               r["false_injection"], f"<= {FALSE_INJECTION}",
               r["false_injection"] <= FALSE_INJECTION)
    yield _row(f"line precision: injected items from the answering sessions "
               f"({r['injected_items']} items)", r["line_precision"], f">= {LINE_PRECISION}",
               r["line_precision"] >= LINE_PRECISION)
    yield _row(f"injected recall at {r['budget']} tokens, precision run ({r['users']} users)",
               r["injected_recall"], f">= {RECALL_IN_BLOCK}",
               r["injected_recall"] >= RECALL_IN_BLOCK)
    yield _row(f"junk rate: memories not grounded in user-typed text ({r['memories']})",
               r["junk_rate"], f"<= {JUNK_RATE:g}", r["junk_rate"] <= JUNK_RATE)


def agents_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The recorded agent corpus: nothing learnt that the user did not type, one session
    per conversation, none for a side request."""
    yield _row(f"agent corpus junk rate: memories and facts not grounded in user-typed "
               f"text ({r['learnt']})", r["junk_rate"], f"<= {JUNK_RATE:g}",
               r["junk_rate"] <= JUNK_RATE)
    yield _row(f"agent corpus sessions for {r['conversations']} conversations",
               r["sessions"], f"= {r['conversations']}",
               r["sessions"] == r["conversations"] and not r["split_conversations"])
    yield _row(f"agent corpus sessions made by side requests ({r['side_requests']})",
               r["side_sessions"] + r["side_as_turns"], "= 0",
               r["side_sessions"] + r["side_as_turns"] == 0)


def query_precision_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The int8 query model keeps the float model's recall."""
    recall = r["quality"]["recall_any"]
    exact, quick = recall["float32"]["@5"], recall["int8"]["@5"]
    yield _row("int8 query model: turn recall_any@5 (dense, LongMemEval_S)",
               f"{quick:.3f} vs float {exact:.3f}", f">= float - {QUERY_RECALL_LOSS}",
               quick >= exact - QUERY_RECALL_LOSS)


def sanitizer_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """What redacting secrets (and personal data) adds to storing a turn: one sanitize
    call, p99, for a 2 KB turn and a 100 KB tool result (source code, a log)."""
    for mode in ("secrets", "secrets+pii"):
        for name, what, limit in (("prose_2kb", "2 KB turn", SANITIZE_TURN_MS),
                                  ("code_100kb", "100 KB source file", SANITIZE_RESULT_MS),
                                  ("log_100kb", "100 KB log", SANITIZE_RESULT_MS)):
            p99 = r[mode][name]["p99_ms"]
            yield _row(f"sanitizer ({mode}) p99 per call, {what} "
                       f"({r[mode][name]['mb_per_s']} MB/s)", p99, f"<= {limit} ms",
                       p99 <= limit)


def helper_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The helper model's figures: compaction's ratio, and the chat path's latency with
    the job worker busy against idle (the same run); extraction's figures are shown."""
    ex, comp, chat = r["extraction"], r["compaction"], r["chat_with_worker_busy"]
    yield _row(f"LLM extraction: {ex['turns_per_s']} turns/s ({ex['asked_turns_per_s']} "
               f"asked/s), {ex['helper_facts_per_100_turns']} facts per 100 turns, "
               f"grounding rate {ex['grounding_rate']}", ex["failed_turns"],
               "failed turns, shown", True)
    ratio = comp["ratio_median"]
    yield _row(f"compaction ratio, median of {comp['compacted']} sessions "
               f"(extractive share {comp['extractive_share']})", ratio,
               f">= {COMPACTION_RATIO:g}", ratio is not None and ratio >= COMPACTION_RATIO)
    idle, busy = chat["idle_ms"]["p50"], chat["busy_ms"]["p50"]
    yield _row("chat p50 with the helper running in the job worker, against idle",
               f"{busy} vs {idle} ms", f"<= x{BUSY_SLOWDOWN:g}",
               busy <= idle * BUSY_SLOWDOWN)


def watch_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The slowest of the runs' edits of each kind, seen by the running daemon."""
    limit = r["target_s"]
    kinds = [("config file edit applied (search scores)", r["config"])]
    kinds += [(f"notes file {k} seen in the compiled context", v)
              for k, v in r["notes"].items()]
    for what, figures in kinds:
        yield _row(f"{what}, slowest of {figures['n']}", figures["max_s"],
                   f"<= {limit:g} s", figures["max_s"] <= limit)


def footprint_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The user's install (``./install.sh``, no torch) and the daemon started from it."""
    names = {"venv_mb": ("the user's venv (./install.sh)", "MB"),
             "rss_mb": ("daemon RSS after the first search", "MB"),
             "first_request_s": ("first request (a memory stored), empty cache", "s"),
             "first_search_s": ("first search, empty cache", "s")}
    for key, (value, limit, met) in r["verdicts"].items():
        what, unit = names[key]
        yield _row(what, value, f"<= {limit:g} {unit}", bool(met))
    yield _row("torch importable in the user's venv", str(r["torch_importable"]).lower(),
               "false", not r["torch_importable"])


def soak_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The daemon's RSS levels off under a long run of concurrent streaming chats, and
    none of them fails."""
    growth, limit, met = r["verdict"]["rss_growth_pct"]
    g = r["growth"]
    yield _row(f"daemon RSS growth over the last {g['window_requests']:,} of "
               f"{r['requests']:,} streaming chats ({r['concurrency']} at once; "
               f"{g['from_mb']} -> {g['to_mb']} MB)", f"{growth} %", f"< {limit:g} %",
               bool(met))
    failed = sum(r["errors"].values())
    yield _row(f"failed requests of the soak's {r['requests']:,}", failed, "= 0", not failed)


def import_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Per backend: the history is searchable when the import returns (no job left), and
    importing it again adds nothing. Its turns per second are figures, in the JSON."""
    for backend, res in r["backends"].items():
        pending = res["pending_jobs_after"]
        yield _row(f"import {backend}: jobs left when {res['turns']} turns are imported",
                   pending, "0", pending == 0)
        again = res["reimport"]["messages"]
        yield _row(f"import {backend}: messages a second import of the same history adds",
                   again, "0", again == 0)


def virtual_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Context virtualization on the replayed agent session: bench_virtual's verdicts."""
    for name, (value, limit, met) in r["verdicts"].items():
        yield _row(f"virtualized replay ({r['calls']} calls, {r['window']}-token window): "
                   f"{name}", value, limit, bool(met))


def ui_targets(r: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The web inspector: the slowest p95 of the reads behind its pages, and of a page
    served whole (its HTML and its first screen's reads)."""
    slowest = max(r["reads"], key=lambda name: r["reads"][name]["p95_ms"])
    worst = r["reads"][slowest]["p95_ms"]
    yield _row(f"inspector read p95 ({r['memories']} memories, {r['messages']} messages; "
               f"slowest: {slowest})", worst, f"< {r['target_ms']:g} ms",
               worst < r["target_ms"])
    served = r.get("pages_served")
    if served:
        page = max(served, key=lambda name: served[name]["p95_ms"])
        worst = served[page]["p95_ms"]
        yield _row(f"inspector page served p95 (HTML and its reads; slowest: {page})",
                   worst, f"< {r['target_ms']:g} ms", worst < r["target_ms"])


JUDGES: dict[str, Callable[[Mapping[str, Any]], Iterator[dict[str, Any]]]] = {
    "scale": scale_targets, "longmemeval": lme_targets, "mem0": mem0_targets,
    "proxy": proxy_targets, "recall": recall_targets, "precision": precision_targets,
    "query_precision": query_precision_targets, "agents": agents_targets,
    "sanitizer": sanitizer_targets,
    "helper": helper_targets, "watch": watch_targets, "footprint": footprint_targets,
    "soak": soak_targets, "import": import_targets, "virtual": virtual_targets,
    "ui": ui_targets,
}


def calibrate() -> dict[str, float]:
    """The machine's speed on two fixed workloads, best of 5 (ms): a pure-Python loop and
    a NumPy float32 matrix-vector product of the compile's KNN size (10,000 x 384, one
    BLAS thread as memd runs it). Machines of one kind differ by up to 2.7x on the same
    compile; these say which kind of draw a run had, so runs can be compared."""
    import numpy as np

    def best(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return round(min(times) * 1e3, 2)

    mat = np.random.default_rng(0).standard_normal((10_000, 384), dtype=np.float32)
    vec = mat[0].copy()
    return {
        "python_loop_ms": best(lambda: sum(i * i for i in range(1_000_000))),
        "numpy_knn_ms": round(best(lambda: [mat @ vec for _ in range(10)]) / 10, 3),
    }


def drift(doc: Mapping[str, Any]) -> str:
    """The machine's speed through a run: the calibration's Python loop (ms, best of 5)
    before the first benchmark and after each one. A shared machine's speed can halve within
    an hour, and a run's wall-time verdicts follow it; a run whose loop time moved is a
    run of two machines."""
    steps = [f"{doc['machine']['speed']['python_loop_ms']} before"]
    steps += [f"{b['speed_after']['python_loop_ms']} after {name}"
              for name, b in doc["benchmarks"].items() if "speed_after" in b]
    return "machine speed, Python loop ms (best of 5): " + ", ".join(steps)


def markdown(doc: Mapping[str, Any]) -> str:
    """The targets table of an all.json as Markdown, for the README."""
    lines = ["| target | measured | limit | verdict |", "| --- | --- | --- | --- |"]
    lines += [f"| {t['target']} | {t['measured']} | {t['limit']} | "
              f"{'met' if t['met'] else '**missed**'} |" for t in doc["targets"]]
    met = sum(t["met"] for t in doc["targets"])
    return ("\n".join(lines) + f"\n\n{met} of {len(doc['targets'])} targets met; "
            f"{drift(doc)}.\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="every harness at tiny sizes, in a temp dir, nothing judged (CI)")
    ap.add_argument("--only", action="append", choices=[b.name for b in BENCHES],
                    help="run this benchmark (repeatable; default: all)")
    ap.add_argument("--dir", type=Path, default=HERE / "results",
                    help="where each result and all.json go (default bench/results/)")
    ap.add_argument("--markdown", type=Path, metavar="ALL_JSON",
                    help="run nothing: print the targets table of this all.json as Markdown")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text("utf-8"))), end="")
        return 0
    chosen = [b for b in BENCHES if not args.only or b.name in args.only]
    with tempfile.TemporaryDirectory(prefix="memd-bench-") as tmp:
        where = (Path(tmp) if args.quick else args.dir).resolve()  # the scripts run in ROOT
        where.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC).isoformat(timespec="seconds")
        t0 = time.perf_counter()
        speed = calibrate()
        log(f"machine speed: {speed}")
        results = {b.name: run(b, where / f"{b.name}.json", args.quick) for b in chosen}
        targets = [] if args.quick else [
            row for name, res in results.items() if name in JUDGES
            for row in JUDGES[name](res["result"])
        ]
        out = {
            "started": started, "wall_s": round(time.perf_counter() - t0, 1),
            "quick": args.quick,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform(), "speed": speed},
            "targets": targets, "benchmarks": results,
        }
        (where / "all.json").write_text(json.dumps(out, indent=1) + "\n", "utf-8")
        log(f"wrote {where / 'all.json'}")
    if targets:
        width = max(len(t["target"]) for t in targets)
        print(f"\ntargets, one run started {started}:")
        for t in targets:
            print(f"  {t['target']:<{width}}  {t['measured']!s:>16}  {t['limit']:<26} "
                  f"{'met' if t['met'] else 'MISSED'}")
        print(f"{sum(t['met'] for t in targets)} of {len(targets)} met; {drift(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
