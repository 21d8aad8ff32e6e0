"""The web inspector's reads on a large store: how long each API read behind its pages
takes (and the pages themselves), on SQLite with 10,000 memories and 100,000 messages of
one user (bench.scale_data's dataset) plus the calls the proxy recorded.

    .venv/bin/python -m bench.bench_ui            # 10k memories, 100k messages, 2000 calls
    .venv/bin/python -m bench.bench_ui --quick    # CI: 1k memories, 10k messages
    .venv/bin/python -m bench.bench_ui --no-browser   # the API reads only

Where chromium and Playwright are installed, each page is also loaded in headless
chromium and timed from navigation start until its first data is shown
(bench.bench_ui_browser).

The calls list reads only what the proxy records (``calls`` rows); the inspector adds
nothing to the proxy's path, so nothing of it is timed here. Requests go through the
daemon's ASGI app in process (Starlette's test client): the figure is the server's work,
not a socket's. As in ``memd serve``, the objects made at start-up are frozen out of the
garbage collector; each read's first call (a cold cache: a user's first search loads
their vectors) is reported apart (``first_ms``) and left out of its median and p95.

Target: each page served (its HTML plus the reads of its first screen, summed) and every
read under 100 ms at p95; the browser's whole open is a figure beside it (bench/README.md
says why).
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import bench_ui_browser
from bench.output import emit
from bench.scale_data import TARGET, Spec, build_sqlite

RESULTS = Path(__file__).parent / "results"
TARGET_MS = 100.0


def _report(n: int) -> dict[str, Any]:
    """A recorded call's report of the usual size: a block of a few lines."""
    items = [{"section": "memory", "kind": "memory", "id": f"m{n}-{i}", "tokens": 20,
              "score": 0.5, "text": f"remembered line {i} of call {n}"} for i in range(6)]
    block = "<memory source=\"memd\">\n" + "\n".join(f"- {i['text']}" for i in items) + \
        "\n</memory>\n\n"
    return {"mode": "transparent", "placement": "user", "reason": None,
            "room": {"window": 128000, "request": 4000, "reserve": 4096},
            "tokens": {"request": 4000, "memory": 120, "total": 4120},
            "injected": block, "blocks": [{"at": 1, "tokens": 120, "text": block}],
            "items": items, "window": {"tokens": 128000, "source": "builtin", "detail": ""}}


def _open(path: Path, calls: int) -> Any:
    import memd
    from memd.config import load_settings

    settings = replace(load_settings(data_dir=path), db=str(path / "memd.db"),
                       embedder="fake", default_user=TARGET)
    engine = memd.open(settings=settings)
    if not engine.calls(TARGET, limit=1):
        now = time.time()
        with engine.store.transaction():
            for n in range(calls):
                engine.store.record_call(f"call-{n:08d}", TARGET, None, None, "model-x",
                                         now - n, _report(n), 200)
    return engine


#: The reads behind each page's first screen, as its module makes them (bench's names).
PAGE_READS = {
    "calls": ("calls list (100)",),
    "memories": ("memories list (200)", "facts"),
    "sessions": ("sessions (50)",),
    "usage": ("usage per day", "usage per model", "usage per client", "usage per workspace"),
    "health": ("health", "status", "jobs pending", "jobs dead", "sweeps"),
    "pause": ("pause",),
}


def _reads() -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Every read the pages make (and the page itself): name -> method, path, kwargs."""
    usage = {f"usage per {g}": ("GET", f"/v1/usage?group_by={g}", {})
             for g in ("day", "model", "client", "workspace")}
    return {
        "page /ui": ("GET", "/ui", {}),
        "page app.js": ("GET", "/ui/static/app.js", {}),
        "calls list (100)": ("GET", "/v1/calls?limit=100", {}),
        "memories list (200)": ("GET", "/v1/memories?limit=200", {}),
        "facts": ("GET", "/v1/facts", {}),
        "search": ("POST", "/v1/search",
                   {"json": {"query": "the system and the model", "k": 50}}),
        "sessions (50)": ("GET", "/v1/sessions?limit=50", {}),
        **usage,
        "status": ("GET", "/v1/status", {}),
        "jobs pending": ("GET", "/v1/jobs?state=pending", {}),
        "jobs dead": ("GET", "/v1/jobs?state=dead", {}),
        "sweeps": ("GET", "/v1/sweeps?limit=20", {}),
        "health": ("GET", "/health", {}),
        "pause": ("GET", "/v1/pause", {}),
    }


def _laps(client: Any, method: str, path: str, reps: int, **kwargs: Any) -> list[float]:
    """``reps + 1`` timings of one request (ms), the first (a cold cache's) first."""
    laps = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        resp = client.request(method, path, **kwargs)
        laps.append((time.perf_counter() - start) * 1000)
        assert resp.status_code < 400, (path, resp.status_code, resp.text[:200])
    return laps


def _summary(laps: list[float]) -> dict[str, float]:
    laps = sorted(laps)
    return {"median_ms": round(statistics.median(laps), 2),
            "p95_ms": round(laps[max(0, math.ceil(len(laps) * 0.95) - 1)], 2)}


def _served(laps: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each page as memd serves it when opened: its HTML plus its first screen's reads,
    summed per repetition (the browser makes them at once; the sum is the server's whole
    work for the page, an upper bound on its wait)."""
    html = laps["page /ui"][1:]
    return {page: _summary([sum(one) for one in zip(html, *(laps[r][1:] for r in reads),
                                                     strict=True)])
            for page, reads in PAGE_READS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI's small sizes")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--loads", type=int, default=20, help="browser loads of each page")
    ap.add_argument("--browser", action=argparse.BooleanOptionalAction,
                    default=bench_ui_browser.available(),
                    help="time the pages in headless chromium (default: where it exists)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from fastapi.testclient import TestClient

    from memd.server.app import create_app
    from memd.ui.token import ui_token

    memories, messages, calls = (1_000, 10_000, 200) if args.quick else (10_000, 100_000, 2_000)
    spec = Spec(users=1, memories=memories, messages=messages, other_memories=0,
                other_messages=0, growth=())
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) if args.quick else RESULTS / f"ui-data-{spec.key()}"
        build_sqlite(path, spec)
        engine = _open(path, calls)
        app = create_app(engine, engine.settings, run_jobs=False)
        with TestClient(app, base_url="http://127.0.0.1:8787") as client:
            client.get(f"/ui?token={ui_token(path)}")  # the cookie, as a browser holds it
            gc.collect()
            gc.freeze()  # as `memd serve` does after start-up: no GC walks over the setup
            laps = {name: _laps(client, method, url, args.reps, **kw)
                    for name, (method, url, kw) in _reads().items()}
            figures = {name: {**_summary(lap[1:]), "first_ms": round(lap[0], 2)}
                       for name, lap in laps.items()}
            served = _served(laps)
        pages: dict[str, dict[str, float]] = {}
        if args.browser:
            loads = min(args.loads, 5) if args.quick else args.loads
            pages, opens = bench_ui_browser.time_pages(app, ui_token(path), loads)
        engine.close()
    worst = max(f["p95_ms"] for f in figures.values())
    slowest_served = max(f["p95_ms"] for f in served.values())
    result: dict[str, Any] = {
        "memories": memories, "messages": messages, "calls": calls, "reps": args.reps,
        "target_ms": TARGET_MS, "worst_p95_ms": worst, "within_target": worst < TARGET_MS,
        "reads": figures, "pages_served": served, "slowest_served_p95_ms": slowest_served,
        "served_within_target": slowest_served < TARGET_MS}
    if pages:
        slowest = {how: max(f["p95_ms"] for name, f in pages.items() if name.startswith(how))
                   for how in ("open", "switch")}
        result.update(pages=pages, open_timeline=opens, slowest_page_p95_ms=slowest,
                      pages_within_target={how: ms < TARGET_MS for how, ms in slowest.items()})
    emit(result, args.out)


if __name__ == "__main__":
    main()
