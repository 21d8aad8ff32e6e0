"""The web inspector in a real browser: Debian's chromium, driven by Playwright (its
driver only: no browser is downloaded), against a real ``memd serve`` in front of a
fake upstream.

Screenshots of each page at 1280x800 go to ``$MEMD_SCREENSHOTS``, else
``build/screenshots/`` (git-ignored; CI keeps them as artifacts).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from servers import FakeUpstream, free_port, open_memd, serve, user_with_key, wait_healthy
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("MEMD_SCREENSHOTS")
             or Path(__file__).resolve().parent.parent / "build" / "screenshots")
FACT = "The deploy server of project Falcon is falcon-prod-7"


@dataclass
class Daemon:
    base: str
    link: str  # the inspector link `memd serve` printed
    upstream: FakeUpstream
    env: dict[str, str]  # the environment it runs in (its data dir)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("inspector")
    upstream = FakeUpstream()
    with serve(upstream.app) as up:
        port = free_port()
        env = {**os.environ, "MEMD_DATA_DIR": str(tmp / "data"), "MEMD_EMBEDDER": "fake",
               "MEMD_UPSTREAM_URL": f"{up}/v1"}
        log_path = tmp / "serve.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port",
                                     str(port), "--no-log-file"],
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_healthy(port, proc)
                link = _printed_link(log_path)
                yield Daemon(f"http://127.0.0.1:{port}", link, upstream, env)
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=30)


def _printed_link(log_path: Path) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = re.search(r"inspector: (http://\S+/ui\?token=\S+)", log_path.read_text())
        if found:
            return found.group(1)
        time.sleep(0.1)
    raise AssertionError(f"memd serve printed no inspector link: {log_path.read_text()}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """chromium, headless; Playwright gives it a fresh profile directory of its own."""
    with sync_playwright() as p:
        found = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync"])
        yield found
        found.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())  # forget's confirmation
    failures: list[str] = []  # the pages' uncaught script errors
    opened.on("pageerror", lambda error: failures.append(str(error)))
    yield opened
    context.close()
    assert failures == []


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def chat(d: Daemon, text: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A proxied chat; returns the request the upstream received."""
    got = httpx.post(f"{d.base}/v1/chat/completions", timeout=30, headers=headers, json={
        "model": "fake-model", "messages": [{"role": "user", "content": text}]})
    assert got.status_code == 200, got.text
    return d.upstream.requests[-1]


def last_user(sent: dict[str, Any]) -> str:
    content: str = sent["messages"][-1]["content"]
    return content


def signed_in(page: Page, d: Daemon) -> Page:
    page.goto(d.link)
    return page


def test_without_the_token_the_inspector_is_refused(page: Page, daemon: Daemon) -> None:
    resp = page.goto(f"{daemon.base}/ui")
    assert resp is not None and resp.status == 401
    expect(page.locator("body")).to_contain_text("memd ui")
    wrong = page.goto(f"{daemon.base}/ui?token=not-the-token")
    assert wrong is not None and wrong.status == 401
    assert page.context.cookies() == []
    shot(page, "refused")


def test_the_token_becomes_a_strict_cookie_and_leaves_the_url(page: Page,
                                                               daemon: Daemon) -> None:
    signed_in(page, daemon)
    assert page.url == f"{daemon.base}/ui"
    [cookie] = page.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (
        "memd_ui", True, "Strict", "/")
    assert cookie["value"] == daemon.link.split("token=")[1]
    expect(page.locator("nav a.active")).to_have_text("Calls")
    # each page says when its first data is shown (what bench_ui times)
    expect(page.locator("html")).to_have_attribute("data-loaded", "calls")
    page.click("nav a[data-page=memories]")
    expect(page.locator("html")).to_have_attribute("data-loaded", "memories")
    expect(page.locator("main table, main .empty").first).to_be_visible()
    at = page.evaluate("performance.getEntriesByName('memd-loaded:memories')[0].startTime")
    assert at > 0


def test_a_proxied_chat_shows_in_calls_with_its_block_as_sent(page: Page,
                                                               daemon: Daemon) -> None:
    httpx.post(f"{daemon.base}/v1/memories", json={"text": FACT}).raise_for_status()
    sent = chat(daemon, "Which server does Falcon deploy to?")
    content = sent["messages"][-1]["content"]
    assert "falcon-prod-7" in content
    signed_in(page, daemon)
    call = httpx.get(f"{daemon.base}/v1/calls?limit=1").json()["data"][0]
    row = page.locator(f"tr[data-call='{call['id']}']")
    expect(row).to_be_visible()
    row.click()
    block = page.locator("#injected")
    expect(block).to_be_visible()
    shown = block.text_content() or ""
    assert shown.strip() and content.startswith(shown)  # the block, then the user's text
    expect(page.locator("#call-detail")).to_contain_text("falcon-prod-7")
    # live: new calls appear without reloading the page; a side request is marked
    chat(daemon, "And which server does Falcon use for staging?")
    chat(daemon, "Title this conversation", {"X-Memd-Memory": "off"})
    newest = httpx.get(f"{daemon.base}/v1/calls?limit=1").json()["data"][0]
    assert newest["report"]["mode"] == "side"
    fresh = page.locator(f"tr[data-call='{newest['id']}']")
    expect(fresh).to_be_visible(timeout=15000)
    expect(fresh.locator(".badge.side")).to_have_text("side")
    expect(row.locator(".badge.side")).to_have_count(0)
    shot(page, "calls")


def test_a_call_shows_the_near_misses_that_did_not_fit(page: Page, tmp_path: Path) -> None:
    from memd.server.app import create_app
    from memd.ui.token import ui_token

    upstream = FakeUpstream()
    engine = open_memd(tmp_path, embedder="fake", memory_max_tokens=80,
                       memory_unknown_window_tokens=80, upstream_url="http://upstream/v1")
    try:
        for w in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot"):
            engine.add(f"Python code formatting with tabs in {w}: {w}s {w}ed {w}ing", "local")
        engine.run_jobs()
        app = create_app(engine, engine.settings, run_jobs=False,
                         upstream_transport=httpx.ASGITransport(app=upstream.app))
        with serve(app) as base:
            httpx.post(f"{base}/v1/chat/completions", timeout=30, json={
                "model": "fake-model", "messages": [
                    {"role": "user", "content": "format the python code with tabs"}]}
                       ).raise_for_status()
            [call] = httpx.get(f"{base}/v1/calls").json()["data"]
            missed = call["report"]["near_misses"]
            assert missed and call["report"]["items"]
            page.goto(f"{base}/ui?token={ui_token(tmp_path)}")
            page.locator(f"tr[data-call='{call['id']}']").click()
            rows = page.locator("#near-misses tbody tr")
            expect(rows).to_have_count(len(missed))
            expect(rows.first).to_contain_text(missed[0]["text"])
            expect(rows.first).to_contain_text(f"{missed[0]['score']:.3f}")
            page.locator("#near-misses").scroll_into_view_if_needed()
            shot(page, "call-near-misses")
    finally:
        engine.close()


PAGES = ("calls", "memories", "sessions", "usage", "health", "pause")


def test_an_opened_page_reads_at_once_and_each_thing_once(page: Page,
                                                          daemon: Daemon) -> None:
    """The first screen's reads leave while the modules still load (boot.js starts them;
    the page takes those answers), and no address is asked for twice: a page whose
    reads drifted from boot.js's list would ask again."""
    signed_in(page, daemon)
    for name in PAGES:
        page.goto("about:blank")
        page.goto(f"{daemon.base}/ui#{name}")
        expect(page.locator("html")).to_have_attribute("data-loaded", name)
        reads = page.evaluate("""() => performance.getEntriesByType("resource")
          .filter((r) => r.initiatorType === "fetch").map((r) => [r.name, r.startTime])""")
        app_run = page.evaluate("performance.getEntriesByName('memd-app')[0].startTime")
        assert reads, name
        assert all(start < app_run for _, start in reads), (name, reads, app_run)
        first_screen = [url for url, _ in reads]
        assert len(set(first_screen)) == len(first_screen), (name, first_screen)


def test_a_long_list_shows_its_first_rows_then_all(page: Page, tmp_path: Path) -> None:
    from memd.server.app import create_app
    from memd.ui.token import ui_token

    engine = open_memd(tmp_path, embedder="fake")
    try:
        now = time.time()
        for n in range(80):
            engine.store.record_call(f"call-{n:03d}", "local", None, None, "model-x",
                                     now - n, {"mode": "transparent"}, 200)
        with serve(create_app(engine, engine.settings, run_jobs=False)) as base:
            page.goto(f"{base}/ui?token={ui_token(tmp_path)}")
            expect(page.locator("html")).to_have_attribute("data-loaded", "calls")
            rows = page.locator("tr[data-call]")
            expect(rows).to_have_count(80)  # the rows past the first screen follow
            expect(rows.first).to_have_attribute("data-call", "call-000")
            expect(rows.last).to_have_attribute("data-call", "call-079")
            rows.last.click()  # a late row opens its call as the first ones do
            expect(page.locator("#call-detail")).to_contain_text("call-079")
    finally:
        engine.close()


def _memories(page: Page, d: Daemon) -> None:
    signed_in(page, d)
    page.click("nav a[data-page=memories]")
    expect(page.locator("h1")).to_have_text("Memories & facts")


def test_filters_and_pin(page: Page, daemon: Daemon) -> None:
    for text in ("Lunch with the design team is on Thursdays",
                 "The staging database lives on db-stage-3"):
        httpx.post(f"{daemon.base}/v1/memories", json={"text": text}).raise_for_status()
    httpx.put(f"{daemon.base}/v1/facts", json={
        "category": "preference", "key": "editor", "value": "helix"}).raise_for_status()
    _memories(page, daemon)
    expect(page.locator("tr", has_text="db-stage-3")).to_have_count(1)
    page.select_option("select[aria-label=kind]", "fact")
    expect(page.locator("tr", has_text="editor: helix")).to_have_count(1)
    expect(page.locator("tr", has_text="db-stage-3")).to_have_count(0)
    page.select_option("select[aria-label=kind]", "")
    row = page.locator("tr", has_text="db-stage-3")
    row.get_by_role("button", name="Pin").click()
    expect(row.locator(".badge", has_text="pinned")).to_be_visible()
    [pinned] = [m for m in httpx.get(f"{daemon.base}/v1/memories").json()["memories"]
                if "db-stage-3" in m["text"]]
    assert (pinned["importance"], pinned["tier"]) == (1.0, 3)
    shot(page, "memories")


def test_search_edit_and_forget_change_the_next_block(page: Page, daemon: Daemon) -> None:
    httpx.post(f"{daemon.base}/v1/memories", json={"text": FACT}).raise_for_status()
    _memories(page, daemon)
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))
    page.fill("input[type=search]", "Falcon deploy server")
    page.click("button[type=submit]")
    row = page.locator("tr", has_text="falcon-prod-7").first
    expect(row).to_be_visible()
    shot(page, "search")
    row.get_by_role("button", name="Edit").click()
    page.locator("textarea").fill("The deploy server of project Falcon is falcon-prod-9")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("tr", has_text="falcon-prod-9").first).to_be_visible()
    content = last_user(chat(daemon, "Which deploy server does project Falcon use now?"))
    assert "falcon-prod-9" in content and "falcon-prod-7" not in content
    page.locator("tr", has_text="falcon-prod-9").first.get_by_role(
        "button", name="Forget").click()
    expect(page.locator("tr", has_text="falcon-prod-9")).to_have_count(0)
    # said before it went: the memory itself, read from the API's preview of the forget
    assert "This removes:" in asked[0] and 'memory "The deploy server' in asked[0]
    assert "cached memory blocks" in asked[0]
    content = last_user(chat(daemon, "Which deploy server does project Falcon use today?"))
    assert "falcon-prod" not in content


def test_forget_lists_the_messages_it_prunes_before_it_goes(page: Page,
                                                            daemon: Daemon) -> None:
    said = "My name is Zorblax and I fly the Quasar rocket every week"
    chat(daemon, said)
    deadline = time.monotonic() + 30  # the daemon's job runner extracts the fact
    while not [f for f in httpx.get(f"{daemon.base}/v1/facts").json()["facts"]
               if f["value"] == "Zorblax"]:
        assert time.monotonic() < deadline, "no fact extracted"
        time.sleep(0.2)
    _memories(page, daemon)
    asked: list[str] = []
    page.on("dialog", lambda dialog: asked.append(dialog.message))
    page.select_option("select[aria-label=kind]", "fact")
    row = page.locator("tr", has_text="name: Zorblax")
    row.get_by_role("button", name="Forget").click()
    expect(row).to_have_count(0)
    assert 'fact identity · name = "Zorblax"' in asked[0]
    assert 'user message in session' in asked[0] and said in asked[0]
    assert [f for f in httpx.get(f"{daemon.base}/v1/facts").json()["facts"]
            if f["value"] == "Zorblax"] == []


def test_jobs_health_and_the_later_pages(page: Page, daemon: Daemon) -> None:
    signed_in(page, daemon)
    page.click("nav a[data-page=health]")
    expect(page.locator("h1")).to_have_text("Jobs & health")
    expect(page.locator("main")).to_contain_text("Daemon healthy")
    expect(page.locator("main")).to_contain_text("SQLite")
    # the daemon's first tick runs every sweep that is due: each shows with its jobs
    ran = {r["task"]: r for r in httpx.get(f"{daemon.base}/v1/sweeps").json()["data"]}
    assert "expiry" in ran
    sweeps = page.locator("#sweeps")
    expect(sweeps.locator("tr", has_text="expiry")).to_have_count(1, timeout=15000)
    expect(sweeps.locator("tr", has_text="expiry")).to_contain_text("1 done")
    expect(sweeps.locator("th", has_text="Took")).to_be_visible()
    shot(page, "health")


def test_sessions_show_a_chat_and_erase_a_message(page: Page, daemon: Daemon) -> None:
    chat(daemon, "My favourite editor is Helix")
    session = httpx.get(f"{daemon.base}/v1/sessions?limit=1").json()["data"][0]
    signed_in(page, daemon)
    page.click("nav a[data-page=sessions]")
    expect(page.locator("h1")).to_have_text("Sessions")
    expect(page.locator("main table")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("null")
    shot(page, "sessions")
    page.locator("main tbody tr").first.click()
    said = page.locator(".message", has=page.locator(".badge.user"),
                        has_text="My favourite editor is Helix")
    expect(said).to_be_visible()
    shot(page, "session")
    said.locator("button", has_text="Erase").click()
    expect(said).to_have_count(0)
    left = httpx.get(f"{daemon.base}/v1/sessions/{session['id']}/messages").json()["messages"]
    assert [m for m in left if m["role"] == "user" and "Helix" in str(m["content"])] == []


def test_usage_shows_the_chats_tokens(page: Page, daemon: Daemon) -> None:
    chat(daemon, "How many tokens is this?")
    total = httpx.get(f"{daemon.base}/v1/usage").json()["total"]["total_tokens"]
    assert total > 0
    signed_in(page, daemon)
    page.click("nav a[data-page=usage]")
    expect(page.locator("main .totals")).to_contain_text(f"{total:,} tokens")
    expect(page.locator("main")).to_contain_text("fake-model")
    shot(page, "usage")


def test_pause_stops_learning_and_resume_restarts_it(page: Page, daemon: Daemon) -> None:
    signed_in(page, daemon)
    page.click("nav a[data-page=pause]")
    page.click("#pause-toggle")
    expect(page.locator("#pause-state")).to_have_text("Learning is paused everywhere.")
    shot(page, "pause")
    before = httpx.get(f"{daemon.base}/v1/sessions?limit=100").json()["data"]
    chat(daemon, "While paused: my cat is called Miso")
    assert httpx.get(f"{daemon.base}/v1/sessions?limit=100").json()["data"] == before
    page.click("#pause-toggle")
    expect(page.locator("#pause-state")).to_have_text("memd is learning from your chats.")
    chat(daemon, "After resuming: my dog is called Pixel")
    after = httpx.get(f"{daemon.base}/v1/sessions?limit=100").json()["data"]
    assert len(after) == len(before) + 1


def test_memd_ui_prints_the_link(daemon: Daemon) -> None:
    printed = subprocess.run([sys.executable, "-m", "memd.cli", "ui", "--no-open"],
                             env=daemon.env, capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == daemon.link


@pytest.fixture
def foreign_site() -> Iterator[str]:
    """Another origin (another port of localhost) with a page that tries to make memd
    write: with the cookie (``credentials: include``) and as a plain form post."""

    async def page_(request: Any) -> HTMLResponse:
        target = request.query_params["target"]
        return HTMLResponse(f"""<!doctype html><body>
<form id=f method=post action="{target}/v1/memories" enctype="text/plain">
<input name='{{"text":"planted by a form","x":"' value='"}}'></form>
<script>
fetch("{target}/v1/memories", {{method: "POST", credentials: "include", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: JSON.stringify({{text: "planted by fetch"}})}})
  .finally(() => {{ document.title = "sent"; }});
</script></body>""")

    with serve(Starlette(routes=[Route("/", page_)])) as base:
        yield base.replace("127.0.0.1", "localhost")


def test_a_page_from_another_origin_cannot_make_the_inspector_write(
        page: Page, daemon: Daemon, foreign_site: str) -> None:
    signed_in(page, daemon)  # the browser holds the inspector's cookie
    page.goto(f"{foreign_site}/?target={daemon.base}")
    expect(page).to_have_title("sent")
    with page.expect_navigation():
        page.evaluate("document.getElementById('f').submit()")
    assert "cross_site_request" in (page.text_content("body") or "")
    texts = [m["text"] for m in
             httpx.get(f"{daemon.base}/v1/memories").json()["memories"]]
    assert not [t for t in texts if "planted" in t]


def test_team_mode_pages_act_as_the_keys_user(page: Page, tmp_path: Path) -> None:
    from memd.server.app import create_app

    engine = open_memd(tmp_path, auth=True, embedder="fake")
    try:
        alice = user_with_key(engine, "alice")
        user_with_key(engine, "bob")
        engine.add("Alice keeps her notes in Obsidian", "alice")
        engine.add("Bob's locker code is 4312", "bob")
        with serve(create_app(engine, engine.settings, run_jobs=False)) as base:
            refused = page.goto(f"{base}/ui")
            assert refused is not None and refused.status == 401
            page.goto(f"{base}/ui?token={alice}")
            page.click("nav a[data-page=memories]")
            expect(page.locator("tr", has_text="Obsidian")).to_have_count(1)
            expect(page.locator("main")).not_to_contain_text("locker")
            page.fill("input[type=search]", "locker code")
            page.click("button[type=submit]")
            expect(page.locator("th", has_text="Score")).to_be_visible()  # searched
            expect(page.locator("main")).not_to_contain_text("locker")
    finally:
        engine.close()
