"""The inspector's pages as a user waits for them: in headless chromium (Debian's, driven
by Playwright, as the browser tests do), from navigation start until the page says its
first data is shown (``<html data-loaded>``, with the ``memd-loaded:<page>`` performance
mark whose time this reads). The daemon's app runs on uvicorn in a thread of this
process, over bench_ui's store; each load is a fresh navigation (from ``about:blank``)
with the inspector's cookie, the first of each page left out as a warm-up.
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


def time_pages(app: Any, token: str, loads: int) -> dict[str, dict[str, float]]:
    """Each page's time to its first data shown (ms) over ``loads`` loads, median and
    p95: opened (a navigation to its address, timed from navigation start) and switched
    to (from another page, as its nav link does, timed from the click)."""
    from playwright.sync_api import sync_playwright

    out = {}
    with serve(app) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update"])
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.goto(f"{base}/ui?token={token}")  # the cookie, then /ui
            page.wait_for_selector("html[data-loaded]")
            for name in PAGES:
                laps = []
                for n in range(loads + 1):
                    page.goto("about:blank")
                    page.goto(f"{base}/ui#{name}")
                    page.wait_for_selector(f"html[data-loaded='{name}']", timeout=30_000)
                    ms = page.evaluate("(n) => performance.getEntriesByName(n)[0].startTime",
                                       f"memd-loaded:{name}")
                    if n:  # the first load of a page warms its reads
                        laps.append(float(ms))
                out[f"open #{name}"] = _percentiles(laps)
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
    return out
