"""The inspector's pages as a user waits for them: in headless chromium (Debian's, driven
by Playwright, as the browser tests do), from navigation start until the page says its
first data is shown (``<html data-loaded>``, with the ``memd-loaded:<page>`` performance
mark whose time this reads). The daemon's app runs on uvicorn in a thread of this
process, over bench_ui's store; each load is a fresh navigation (from ``about:blank``)
with the inspector's cookie, the first of each page left out as a warm-up.

Each open is also broken down on its timeline (ms since navigation start, medians over
the loads), from Navigation Timing, Resource Timing and the page's marks, so that memd's
share (serving the HTML, answering the reads) stands apart from the browser's (a new
document, the modules, the render):

- ``html_request``: the page's request leaves (the browser's navigation before it);
- ``html_done``: its HTML has arrived (memd served it);
- ``app_run``: the modules are fetched and evaluated (the ``memd-app`` mark);
- ``reads_start`` / ``reads_done``: the page's first reads go out / the last has arrived;
- ``loaded``: its first data is shown (``memd-loaded:<page>``).

``memd_ms`` sums memd's two parts (HTML request to arrival, and the reads' span): the
time the page waited on the daemon, loopback included.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
from pathlib import Path
from typing import Any

from bench.bench_proxy import serve

CHROMIUM = Path("/usr/bin/chromium")
PAGES = ("calls", "memories", "sessions", "usage", "health", "pause")


def available() -> bool:
    """Whether a browser run is possible here: chromium and Playwright's driver."""
    return CHROMIUM.exists() and importlib.util.find_spec("playwright") is not None


def _percentiles(laps: list[float]) -> dict[str, float]:
    laps = sorted(laps)
    return {"median_ms": round(statistics.median(laps), 1),
            "p95_ms": round(laps[max(0, math.ceil(len(laps) * 0.95) - 1)], 1)}


#: Switch to a page as its nav link does (the address's #fragment) and resolve with the
#: milliseconds until it marks its first data shown.
SWITCH = """(name) => new Promise((done) => {
  const t0 = performance.now();
  const seen = new MutationObserver(() => {
    if (document.documentElement.dataset.loaded === name) {
      seen.disconnect();
      done(performance.now() - t0);
    }
  });
  seen.observe(document.documentElement, { attributes: true });
  location.hash = name;
})"""


#: An open's timeline (ms since navigation start) from the entries the browser keeps.
TIMELINE = """(name) => {
  const nav = performance.getEntriesByType("navigation")[0];
  const at = (mark) => performance.getEntriesByName(mark)[0].startTime;
  const loaded = at(`memd-loaded:${name}`);
  const reads = performance.getEntriesByType("resource").filter(
    (r) => r.initiatorType === "fetch" && r.startTime < loaded);
  const first = reads.length ? Math.min(...reads.map((r) => r.startTime)) : loaded;
  const last = reads.length ? Math.max(...reads.map((r) => r.responseEnd)) : loaded;
  return { html_request: nav.requestStart, html_done: nav.responseEnd,
           app_run: at("memd-app"), reads_start: first, reads_done: last, loaded };
}"""

#: The timeline's points, in order.
POINTS = ("html_request", "html_done", "app_run", "reads_start", "reads_done", "loaded")


def _breakdown(timelines: list[dict[str, float]]) -> dict[str, float]:
    """Medians of each point of an open's timeline, and of memd's share of it."""
    out = {point: round(statistics.median(t[point] for t in timelines), 1)
           for point in POINTS}
    out["memd_ms"] = round(statistics.median(
        (t["html_done"] - t["html_request"]) + (t["reads_done"] - t["reads_start"])
        for t in timelines), 1)
    return out


def time_pages(app: Any, token: str, loads: int
               ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Each page's time to its first data shown (ms) over ``loads`` loads, median and
    p95: opened (a navigation to its address, timed from navigation start) and switched
    to (from another page, as its nav link does, timed from the click); and each open's
    timeline (:data:`TIMELINE`, medians)."""
    from playwright.sync_api import sync_playwright

    out: dict[str, dict[str, float]] = {}
    opens: dict[str, dict[str, float]] = {}
    with serve(app) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update"])
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.goto(f"{base}/ui?token={token}")  # the cookie, then /ui
            page.wait_for_selector("html[data-loaded]")
            for name in PAGES:
                laps, timelines = [], []
                for n in range(loads + 1):
                    page.goto("about:blank")
                    page.goto(f"{base}/ui#{name}")
                    page.wait_for_selector(f"html[data-loaded='{name}']", timeout=30_000)
                    ms = page.evaluate("(n) => performance.getEntriesByName(n)[0].startTime",
                                       f"memd-loaded:{name}")
                    if n:  # the first load of a page warms its reads
                        laps.append(float(ms))
                        timelines.append(page.evaluate(TIMELINE, name))
                out[f"open #{name}"] = _percentiles(laps)
                opens[name] = _breakdown(timelines)
            for name in PAGES:
                laps = []
                other = "pause" if name != "pause" else "calls"
                for n in range(loads + 1):
                    page.goto(f"{base}/ui#{other}")
                    page.wait_for_selector(f"html[data-loaded='{other}']", timeout=30_000)
                    ms = page.evaluate(SWITCH, name)
                    if n:
                        laps.append(float(ms))
                out[f"switch to #{name}"] = _percentiles(laps)
        finally:
            browser.close()
    return out, opens
