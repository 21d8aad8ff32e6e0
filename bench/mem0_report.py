"""mem0_compare's report: the table printed, the verdict against the targets, the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.longmemeval import KS

SIDES = ("memd", "mem0")

def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"memd": "#2b7bba", "mem0": "#e6852b"}
    fig, (lat, rec) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.38
    for j, s in enumerate(SIDES):
        vals = [result[s]["search"][f"p{p}_ms"] for p in (50, 95, 99)]
        bars = lat.bar(np.arange(3) + (j - 0.5) * width, vals, width, label=s, color=colors[s])
        lat.bar_label(bars, fmt="%.1f", fontsize=8)
        rvals = [result[s]["recall_any"][f"@{k}"] for k in KS]
        bars = rec.bar(np.arange(len(KS)) + (j - 0.5) * width, rvals, width, label=s,
                       color=colors[s])
        rec.bar_label(bars, fmt="%.2f", fontsize=8)
    lat.set_xticks(np.arange(3), ["p50", "p95", "p99"])
    lat.set_ylabel("ms (query embedding included)")
    lat.set_title(f"search latency, {result['memd']['search']['n']} queries")
    lat.legend()
    rec.set_xticks(np.arange(len(KS)), [f"@{k}" for k in KS])
    rec.set_ylim(0, 1.2)
    rec.set_title(f"turn recall_any@k, {result['config']['eval_queries']} questions")
    rec.legend(loc="upper center", ncol=2)
    cfg = result["config"]
    fig.suptitle(f"memd vs mem0 {result['versions']['mem0']['mem0ai']} (infer=False), "
                 f"LongMemEval_S, {cfg['turns']} user turns, {cfg['questions']} users, "
                 "all-MiniLM-L6-v2", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    def trio(s: str, part: str) -> str:
        d = result[s][part]
        return f"{d['p50_ms']:.1f} / {d['p95_ms']:.1f} / {d['p99_ms']:.1f}"

    rows: list[tuple[str, dict[str, str]]] = [
        ("add p50 / p95 / p99 ms", {s: trio(s, "add") for s in SIDES}),
        ("add throughput turns/s", {s: f"{result[s]['add']['turns_per_s']:.1f}" for s in SIDES}),
        ("search p50 / p95 / p99 ms", {s: trio(s, "search") for s in SIDES}),
    ]
    rows += [(f"turn recall_any@{k}", {s: f"{result[s]['recall_any'][f'@{k}']:.3f}"
                                       for s in SIDES}) for k in KS]
    for label, key in (("RSS after warm-up MB", "after_warmup"),
                       ("RSS after ingest MB", "after_ingest"),
                       ("RSS after search MB", "after_search")):
        rows.append((label, {s: f"{result[s]['rss_mb'][key]:.0f}" for s in SIDES}))
    rows.append(("peak RSS MB", {s: f"{result[s]['peak_rss_mb']:.0f}" for s in SIDES}))
    lines = [f"{'':<27}{'memd':>22}{'mem0':>22}"]
    lines += [f"{name:<27}{v['memd']:>22}{v['mem0']:>22}" for name, v in rows]
    return "\n".join(lines)


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    speedup = result["mem0"]["search"]["p50_ms"] / result["memd"]["search"]["p50_ms"]
    below = [f"@{k}" for k in KS if result["memd"]["recall_any"][f"@{k}"] + 1e-9
             < result["mem0"]["recall_any"][f"@{k}"]]
    ingest = result["memd"]["add"]["turns_per_s"] / result["mem0"]["add"]["turns_per_s"]
    passages = result["memd"]["add"].get("turns_per_s_with_passages")
    return {"ingest_ratio": round(ingest, 2), "ingest_target": 5, "ingest_ok": ingest >= 5,
            "ingest_ratio_with_passages": None if passages is None else round(
                passages / result["mem0"]["add"]["turns_per_s"], 2),
            "search_p50_speedup": round(speedup, 1), "speedup_target": 10,
            "speedup_ok": speedup >= 10, "recall_below_mem0_at": below,
            "recall_ok": not below}

