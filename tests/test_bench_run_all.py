"""``bench.run_all``'s targets table: each benchmark target judged on a run's
figures, misses included. (CI runs the whole harness with --quick.)"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

import bench.run_all


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    return bench.run_all


def _growth(*p50s: float) -> dict[str, Any]:
    return {str(size): {"compile": {"p50": p50}}
            for size, p50 in zip((1000, 10_000, 100_000), p50s, strict=True)}


def test_scale_targets_take_its_verdicts_and_judge_growth_against_the_size_ratio(
    run_all: ModuleType,
) -> None:
    result = {
        "verdicts": {"postgres": {"compile_team_p99_ms": [16.2, 15.0, False],
                                  "rss_mb": [282.1, 700.0, True]}},
        "backends": {"postgres": {"growth": _growth(4.0, 5.5, 10.0)},
                     "sqlite": {"growth": _growth(1.0, 9.0, 120.0)}},
    }
    rows = {r["target"]: r for r in run_all.scale_targets(result)}
    assert rows["postgres compile_team_p99"] == {
        "target": "postgres compile_team_p99", "measured": 16.2, "limit": "<= 15 ms",
        "met": False}
    assert rows["postgres rss"]["limit"] == "<= 700 MB" and rows["postgres rss"]["met"]
    pg = rows["postgres compile p50 growth 1000 -> 100000 memories"]
    assert pg["measured"] == "x2.5" and pg["met"]
    lite = rows["sqlite compile p50 growth 1000 -> 100000 memories"]
    assert lite["measured"] == "x120.0" and not lite["met"]  # worse than linear


def test_longmemeval_and_mem0_targets_say_which_are_missed(run_all: ModuleType) -> None:
    def level(any5: float, all5: float) -> dict[str, float]:
        return {"recall_any@5": any5, "recall_all@5": all5}

    lme = {"summary": {"memd": {"session": level(0.981, 0.899), "turn": level(0.90, 0.7)}},
           "below_baseline": ["turn ndcg_any@1: memd 0.500 < dense 0.510"]}
    met = {r["target"]: r["met"] for r in run_all.lme_targets(lme)}
    assert met == {
        "LongMemEval_S session recall_any@5": True,
        "LongMemEval_S session recall_all@5": False,
        "LongMemEval_S turn recall_any@5": True,
        "LongMemEval_S memd >= the better baseline at every k and metric": False,
    }
    mem0 = {"verdict": {"search_p50_speedup": 9.8, "recall_below_mem0_at": []}}
    rows = list(run_all.mem0_targets(mem0))
    assert [(r["measured"], r["met"]) for r in rows] == [("x9.8", False), ("none below", True)]


def test_markdown_lists_every_target_marks_the_misses_and_tells_the_drift(
    run_all: ModuleType,
) -> None:
    doc = {"targets": [
        {"target": "sqlite compile_p99", "measured": 4.6, "limit": "<= 15 ms", "met": True},
        {"target": "search p50 speed-up over mem0 (query embedding included)",
         "measured": "x9.8", "limit": ">= x10", "met": False},
    ], "machine": {"speed": {"python_loop_ms": 53.7, "numpy_knn_ms": 0.34}},
        "benchmarks": {"scale": {"speed_after": {"python_loop_ms": 98.1}},
                       "mem0": {"speed_after": {"python_loop_ms": 55.0}}}}
    table = run_all.markdown(doc).splitlines()
    assert table[2] == "| sqlite compile_p99 | 4.6 | <= 15 ms | met |"
    assert table[3] == ("| search p50 speed-up over mem0 (query embedding included) | x9.8 "
                        "| >= x10 | **missed** |")
    assert table[-1] == ("1 of 2 targets met; machine speed, Python loop ms (best of 5): "
                         "53.7 before, 98.1 after scale, 55.0 after mem0.")
    older = dict(doc, benchmarks={"scale": {}})  # an all.json from before speed_after
    assert run_all.markdown(older).splitlines()[-1].endswith("(best of 5): 53.7 before.")


def test_calibration_times_both_workloads(run_all: ModuleType) -> None:
    speed = run_all.calibrate()
    assert set(speed) == {"python_loop_ms", "numpy_knn_ms"}
    # a loop of a million steps takes milliseconds, not microseconds or minutes
    assert 1 < speed["python_loop_ms"] < 10_000 and 0 < speed["numpy_knn_ms"] < 1_000


def test_proxy_targets_judge_the_largest_agent_size_and_prefix_stability(
    run_all: ModuleType,
) -> None:
    def size(p50: float, memd: float, client: float, reused: float) -> dict[str, Any]:
        return {"added_ms": {"p50": p50}, "prefix_share_memd": memd,
                "prefix_share_client": client, "previous_reused_memd": reused}

    result = {"agent": {"10000": size(30.0, 0.90, 0.91, 1.0),
                        "100000": size(14.0, 0.96, 0.97, 0.80)}}
    rows = list(run_all.proxy_targets(result))
    assert [r["met"] for r in rows] == [True, True, False]
    assert rows[0]["target"].endswith("~100000 tokens") and rows[0]["measured"] == 14.0
    assert "~100000-token sessions" in rows[1]["target"]
    assert rows[1]["measured"] == ("0.960 (client's own 0.970; all sizes 0.930, "
                                   "client's own 0.940)")
    result["agent"]["100000"]["prefix_share_memd"] = 0.94
    assert [r["met"] for r in run_all.proxy_targets(result)] == [True, False, False]
    assert list(run_all.proxy_targets({})) == []  # a run without the agent replay


def test_the_tool_loop_step_is_judged_at_the_largest_size(run_all: ModuleType) -> None:
    def size(loop_p50: float, steps: int) -> dict[str, Any]:
        return {"added_ms": {"p50": 9.0}, "tool_loop_calls": steps,
                "tool_loop_added_ms": {"p50": loop_p50}, "tool_loop_cpu_ms": {"p50": 3.5},
                "prefix_share_memd": 0.99, "prefix_share_client": 0.99,
                "previous_reused_memd": 1.0}

    result = {"agent": {"10000": size(9.0, 40), "100000": size(4.8, 52)}}
    rows = list(run_all.proxy_targets(result))
    loop = rows[1]
    assert loop["target"].startswith("proxy added latency p50, tool-loop steps of "
                                     "~100000-token agent sessions (52 steps; CPU 3.5 ms)")
    assert loop["measured"] == 4.8 and loop["met"] is True
    result["agent"]["100000"]["tool_loop_added_ms"]["p50"] = 5.2
    assert list(run_all.proxy_targets(result))[1]["met"] is False
    result["agent"]["100000"]["tool_loop_calls"] = 0  # no such step: nothing judged
    assert all("tool-loop" not in r["target"] for r in run_all.proxy_targets(result))


def test_proxy_targets_judge_prefix_stability_by_tokens_when_measured(
    run_all: ModuleType,
) -> None:
    def size(memd: float, client: float, tokens_memd: float,
             tokens_client: float) -> dict[str, Any]:
        return {"added_ms": {"p50": 20.0}, "prefix_share_memd": memd,
                "prefix_share_client": client, "previous_reused_memd": 1.0,
                "prefix_tokens_memd": tokens_memd, "prefix_tokens_client": tokens_client}

    result = {"agent": {"10000": size(0.86, 0.87, 0.93, 0.94),
                        "100000": size(0.91, 0.92, 0.99, 0.99)}}
    rows = list(run_all.proxy_targets(result))
    assert [r["met"] for r in rows] == [False, False, True, True]
    assert "prompt tokens" in rows[2]["target"]
    assert rows[2]["measured"] == ("0.990 (client's own 0.990; all sizes 0.960, "
                                   "client's own 0.965)")


def test_door_targets_judge_each_door_and_the_recorded_replay(run_all: ModuleType) -> None:
    def door(p50: float) -> dict[str, Any]:
        return {"added_ms": {"p50": p50}, "cpu_added_ms": {"p50": 9.0},
                "last_request_tokens": [101000, 104000]}

    replay = {"turns": 3, "calls": 6, "prefix_share_min": 0.96,
              "cache_logged_every_call": True}
    result = {"doors": {"anthropic_messages": door(12.0), "openai_responses": door(16.0),
                        "claude_code_replay": replay}}
    rows = list(run_all.proxy_targets(result))  # no Chat Completions figures: doors only
    assert [r["met"] for r in rows] == [True, False, True, True]
    assert rows[0]["target"].startswith("Anthropic Messages door added latency")
    assert "~104000 tokens (CPU 9.0 ms)" in rows[1]["target"] and rows[1]["measured"] == 16.0
    replay.update(prefix_share_min=0.94, cache_logged_every_call=False)
    assert [r["met"] for r in run_all.proxy_targets(result)][2:] == [False, False]
    result["doors"]["codex_replay"] = {**replay, "prefix_share_min": 0.98,
                                       "cache_logged_every_call": True}
    rows = list(run_all.proxy_targets(result))
    assert [r["met"] for r in rows][4:] == [True, True]
    assert rows[4]["target"].startswith("recorded Codex session (3 turns, 6 calls)")


def test_the_ollama_door_is_judged_beside_the_others(run_all: ModuleType) -> None:
    result = {"doors": {"ollama_chat": {"added_ms": {"p50": 16.5},
                                        "cpu_added_ms": {"p50": 7.0},
                                        "last_request_tokens": [98000]}}}
    (row,) = run_all.proxy_targets(result)
    assert row["target"].startswith("Ollama /api/chat door added latency p50, requests "
                                    "of ~98000 tokens")
    assert row["measured"] == 16.5 and row["met"] is False


def test_recall_and_query_precision_targets(run_all: ModuleType) -> None:
    rows = list(run_all.recall_targets({"block_recall": {"1000": 0.8, "2000": 0.86},
                                        "search_recall_any_at_5": 0.93}))
    assert [r["met"] for r in rows] == [True, False]
    assert rows[1]["measured"] == "0.860 vs 0.930"
    rows = list(run_all.query_precision_targets({"quality": {"recall_any": {
        "float32": {"@5": 0.83}, "int8": {"@5": 0.825}}}}))
    assert [r["met"] for r in rows] == [True]
    rows = list(run_all.query_precision_targets({"quality": {"recall_any": {
        "float32": {"@5": 0.83}, "int8": {"@5": 0.81}}}}))
    assert [r["met"] for r in rows] == [False]


def test_precision_targets_judge_each_figure(run_all: ModuleType) -> None:
    result = {"unrelated_questions": 120, "false_injection": 0.05, "injected_items": 40,
              "line_precision": 0.55, "budget": 2000, "users": 12, "injected_recall": 0.9167,
              "memories": 200, "junk_rate": 0.01}
    rows = list(run_all.precision_targets(result))
    assert [r["met"] for r in rows] == [True, False, True, False]
    assert rows[0]["target"].startswith("false injection") and rows[0]["measured"] == 0.05
    assert rows[3]["limit"] == "<= 0"


def test_agents_targets_judge_junk_sessions_and_side_requests(run_all: ModuleType) -> None:
    clean = {"junk_rate": 0.0, "learnt": 2, "conversations": 8, "sessions": 8,
             "split_conversations": [], "side_requests": 2, "side_sessions": 0,
             "side_as_turns": 0}
    assert [r["met"] for r in run_all.agents_targets(clean)] == [True, True, True]
    dirty = {**clean, "junk_rate": 0.5, "sessions": 9, "split_conversations": ["cline run 1: 2"],
             "side_as_turns": 1}
    assert [r["met"] for r in run_all.agents_targets(dirty)] == [False, False, False]
    assert "agents" in run_all.JUDGES and "agents" in {b.name for b in run_all.BENCHES}


def test_helper_targets_judge_compaction_and_the_busy_chat_path(run_all: ModuleType) -> None:
    def result(ratio: float | None, idle: float, busy: float) -> dict[str, Any]:
        return {"extraction": {"turns_per_s": 0.3, "asked_turns_per_s": 0.15,
                               "helper_facts_per_100_turns": 40.0, "grounding_rate": 0.9,
                               "failed_turns": 2},
                "compaction": {"ratio_median": ratio, "compacted": 3,
                               "extractive_share": 0.5},
                "chat_with_worker_busy": {"idle_ms": {"p50": idle}, "busy_ms": {"p50": busy}}}

    rows = list(run_all.helper_targets(result(6.5, 10.0, 12.0)))
    assert [r["met"] for r in rows] == [True, True, True]
    assert rows[2]["measured"] == "12.0 vs 10.0 ms"
    rows = list(run_all.helper_targets(result(4.0, 10.0, 13.0)))
    assert [r["met"] for r in rows] == [True, False, False]
    assert [r["met"] for r in run_all.helper_targets(result(None, 10.0, 10.0))][1] is False


def test_watch_targets_judge_the_slowest_edit_of_each_kind(run_all: ModuleType) -> None:
    def kind(worst: float) -> dict[str, Any]:
        return {"n": 3, "p50_s": 0.1, "max_s": worst}

    rows = list(run_all.watch_targets({
        "target_s": 2.0, "config": kind(0.2),
        "notes": {"add": kind(0.3), "edit": kind(2.5), "delete": kind(0.1)}}))
    assert [r["met"] for r in rows] == [True, True, False, True]
    assert rows[2]["target"] == "notes file edit seen in the compiled context, slowest of 3"


def test_soak_targets_judge_rss_growth_and_failures(run_all: ModuleType) -> None:
    result = {"requests": 50_000, "concurrency": 50, "errors": {"HTTP 502": 2},
              "growth": {"window_requests": 10_000, "from_mb": 250.1, "to_mb": 256.0,
                         "percent": 2.36},
              "verdict": {"rss_growth_pct": [2.36, 2.0, False]}}
    growth, failed = run_all.soak_targets(result)
    assert growth["measured"] == "2.36 %" and growth["limit"] == "< 2 %"
    assert not growth["met"] and "250.1 -> 256.0 MB" in growth["target"]
    assert failed["measured"] == 2 and not failed["met"]
    assert "soak" in {b.name for b in run_all.BENCHES}


def test_import_targets_judge_searchability_and_idempotency(run_all: ModuleType) -> None:
    def backend(pending: int, again: int) -> dict[str, Any]:
        return {"turns": 989, "turns_per_s": 300.0, "pending_jobs_after": pending,
                "reimport": {"messages": again, "seconds": 0.1}}

    rows = list(run_all.import_targets({"backends": {"sqlite": backend(0, 0),
                                                     "postgres": backend(3, 2)}}))
    assert [r["met"] for r in rows] == [True, True, False, False]
    assert rows[2]["target"] == "import postgres: jobs left when 989 turns are imported"
    assert "import" in {b.name for b in run_all.BENCHES}


def test_virtual_targets_take_the_replay_verdicts(run_all: ModuleType) -> None:
    result = {"calls": 109, "window": 16384, "verdicts": {
        "prefix stability": [0.82, ">= 0.9", False], "retrieval": [0.98, ">= 0.9", True]}}
    stable, found = run_all.virtual_targets(result)
    assert stable["measured"] == 0.82 and not stable["met"]
    assert "109 calls, 16384-token window" in stable["target"] and found["met"]
    assert "virtual" in {b.name for b in run_all.BENCHES}


def test_ui_targets_judge_the_slowest_read(run_all: ModuleType) -> None:
    result = {"memories": 10000, "messages": 100000, "target_ms": 100.0, "reads": {
        "search": {"median_ms": 40.0, "p95_ms": 120.0},
        "calls list (100)": {"median_ms": 3.0, "p95_ms": 4.0}}}
    (row,) = run_all.ui_targets(result)
    assert (row["measured"], row["limit"], row["met"]) == (120.0, "< 100 ms", False)
    assert "slowest: search" in row["target"] and "10000 memories" in row["target"]
    assert "ui" in {b.name for b in run_all.BENCHES}
    result["pages_served"] = {"calls": {"median_ms": 4.0, "p95_ms": 5.3},
                              "health": {"median_ms": 9.0, "p95_ms": 101.0}}
    _, page = run_all.ui_targets(result)
    assert (page["measured"], page["met"]) == (101.0, False)
    assert "slowest: health" in page["target"]
