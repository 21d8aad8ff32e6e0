"""Live config: a running ``memd serve`` applies edits of its config file, keeps its
settings on an invalid file and says so, and reports keys that need a restart.

Each check polls until the change is visible, failing after a generous deadline; how
soon a change applies (the target is 2 s) is measured by bench/bench_watch.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from ollama_upstream import FakeOllama
from servers import FakeUpstream, free_port, poll, serve, wait_healthy

from memd.server.watch import LIVE_KEYS, shown

MEMD = [sys.executable, "-m", "memd.cli"]

# every weight but importance off: a hit's score is then its importance
IMPORTANCE_ONLY = """
[weights]
similarity = 0.0
keyword = 0.0
freshness = 0.0
access = 0.0
authority = 0.0
importance = 1.0
entity = 0.0
"""



def write(path: Path, text: str) -> None:
    """Write as an editor saves: a temporary file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Daemon:
    def __init__(self, base: str, log: Path) -> None:
        self.base = base
        self.log = log

    def search(self, query: str) -> list[dict[str, Any]]:
        r = httpx.post(f"{self.base}/v1/search", json={"query": query})
        assert r.status_code == 200, r.text
        hits: list[dict[str, Any]] = r.json()["hits"]
        return hits

    def logged(self, text: str) -> bool:
        return text in self.log.read_text()

    def config(self) -> dict[str, Any]:
        status: dict[str, Any] = httpx.get(f"{self.base}/health").json()["config"]
        return status


@pytest.fixture
def upstreams() -> Iterator[tuple[tuple[str, FakeUpstream], tuple[str, FakeUpstream]]]:
    first, second = FakeUpstream(), FakeUpstream()
    with serve(first.app) as a, serve(second.app) as b:
        yield (a, first), (b, second)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return tmp_path / "config" / "memd.toml"


@contextmanager
def start(tmp_path: Path, config: Path | None, text: str = "") -> Iterator[Daemon]:
    """``memd serve`` with ``text`` in its config file ``config`` (None: the default
    path, in the user config dir, with no file there)."""
    env = dict(os.environ)
    if config is not None:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(text)
        env["MEMD_CONFIG"] = str(config)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*MEMD, "serve", "--port", str(port), "--no-log-file"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_healthy(port, proc)
            yield Daemon(f"http://127.0.0.1:{port}", log)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)


def test_weights_edit_changes_search_within_2s_and_an_invalid_edit_changes_nothing(
    tmp_path: Path, config: Path,
) -> None:
    with start(tmp_path, config, "min_similarity = 0.3\n") as daemon:
        r = httpx.post(f"{daemon.base}/v1/memories",
                       json={"text": "the deploy key lives in the vault", "importance": 0.7})
        assert r.status_code in (200, 201), r.text
        hit = daemon.search("deploy key")[0]
        assert hit["score"] != pytest.approx(0.7) and hit["breakdown"]["keyword"] > 0

        write(config, "min_similarity = 0.3\n" + IMPORTANCE_ONLY)
        poll(lambda: daemon.search("deploy key")[0]["score"] == pytest.approx(0.7),
                     "new weights in /v1/search")
        assert daemon.logged("config: weights ")
        assert "weights" in daemon.config()["applied"]

        # invalid TOML: logged with the reason, the settings stay
        write(config, "min_similarity = [oops\n" + IMPORTANCE_ONLY)
        poll(lambda: daemon.config()["error"] is not None, "the error in /health")
        assert daemon.logged("keeping the current settings")
        assert "memd.toml" in daemon.config()["error"]
        assert daemon.search("deploy key")[0]["score"] == pytest.approx(0.7)
        # a valid file but a bad value: the same
        write(config, "min_similarity = 0.3\nmemory_placement = 'nowhere'\n")
        poll(lambda: daemon.logged("memory_placement must be one of"), "the bad value logged")
        assert daemon.search("deploy key")[0]["score"] == pytest.approx(0.7)

        # back to the defaults: the change applies again and the error is cleared
        write(config, "min_similarity = 0.3\n")
        poll(lambda: daemon.search("deploy key")[0]["breakdown"]["keyword"] > 0,
             "default weights again")
        assert daemon.config()["error"] is None


def test_a_config_file_created_while_the_daemon_runs_applies(tmp_path: Path) -> None:
    with start(tmp_path, None) as daemon:
        r = httpx.post(f"{daemon.base}/v1/memories",
                       json={"text": "the deploy key lives in the vault", "importance": 0.7})
        assert r.status_code in (200, 201), r.text
        assert daemon.search("deploy key")[0]["score"] != pytest.approx(0.7)
        # the hermetic environment points the user config dir into tmp_path
        created = tmp_path / "xdg-config" / "memd" / "config.toml"
        assert daemon.config()["file"] == str(created)
        write(created, IMPORTANCE_ONLY)
        poll(lambda: daemon.search("deploy key")[0]["score"] == pytest.approx(0.7),
                     "the new file's weights in /v1/search")


def test_restart_only_key_is_reported_and_not_applied(tmp_path: Path, config: Path) -> None:
    with start(tmp_path, config, "job_interval = 0.5\n") as daemon:
        write(config, "job_interval = 0.5\nmax_body_bytes = 1000\n")
        poll(lambda: daemon.logged("max_body_bytes 67108864 -> 1000 (needs a restart)"),
             "restart-only key logged")
        assert daemon.config()["needs_restart"] == ["max_body_bytes"]
        # still the old limit
        r = httpx.post(f"{daemon.base}/v1/search", json={"query": "x" * 2000})
        assert r.status_code == 200
        write(config, "job_interval = 0.5\n")
        poll(lambda: daemon.config()["needs_restart"] == [], "nothing pending again")


def test_upstream_url_edit_redirects_the_next_call(
    tmp_path: Path, config: Path,
    upstreams: tuple[tuple[str, FakeUpstream], tuple[str, FakeUpstream]],
) -> None:
    (a, first), (b, second) = upstreams
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    with start(tmp_path, config,
                        f'upstream_url = "{a}/v1"\nupstream_api_key = "sk-first-key"\n') as daemon:
        assert httpx.post(f"{daemon.base}/v1/chat/completions", json=body).status_code == 200
        assert len(first.requests) == 1
        assert first.headers[0]["authorization"] == "Bearer sk-first-key"

        write(config, f'upstream_url = "{b}/v1"\nupstream_api_key = "sk-second-key"\n')

        def moved() -> bool:
            r = httpx.post(f"{daemon.base}/v1/chat/completions", json=body)
            return r.status_code == 200 and len(second.requests) > 0

        poll(moved, "calls go to the second upstream")
        assert second.headers[-1]["authorization"] == "Bearer sk-second-key"
        text = daemon.log.read_text()
        assert "config: upstream_url" in text and "(applied)" in text
        assert "sk-first-key" not in text and "sk-second-key" not in text


def test_upstream_ollama_url_edit_redirects_the_next_call(tmp_path: Path, config: Path) -> None:
    first, second = FakeOllama(), FakeOllama()
    with serve(first.app) as a, serve(second.app) as b, \
            start(tmp_path, config, f'upstream_ollama_url = "{a}"\n') as daemon:
        assert httpx.get(f"{daemon.base}/api/tags").status_code == 200
        assert first.paths == ["/api/tags"]
        write(config, f'upstream_ollama_url = "{b}"\n')
        poll(lambda: httpx.get(f"{daemon.base}/api/tags").status_code == 200
             and bool(second.paths), "calls go to the second Ollama server")
        assert "config: upstream_ollama_url" in daemon.log.read_text()


def test_env_and_flags_still_win_over_the_file(
    tmp_path: Path, config: Path,
    upstreams: tuple[tuple[str, FakeUpstream], tuple[str, FakeUpstream]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (a, first), (b, second) = upstreams
    monkeypatch.setenv("MEMD_UPSTREAM_URL", f"{a}/v1")
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    with start(tmp_path, config, "min_similarity = 0.3\n") as daemon:
        write(config, f'min_similarity = 0.5\nupstream_url = "{b}/v1"\n')
        poll(lambda: daemon.logged("config: min_similarity 0.3 -> 0.5 (applied)"),
             "the live key applied")
        assert httpx.post(f"{daemon.base}/v1/chat/completions", json=body).status_code == 200
        assert len(first.requests) == 1 and not second.requests
        assert not daemon.logged("config: upstream_url")


def test_shown_never_tells_a_secret() -> None:
    assert shown("upstream_api_key", "sk-123") == "***"
    url = "http://u:pw@host:1/v1?api_key=k"
    assert shown("upstream_url", url) == "http://host:1/v1?api_key=***"
    assert shown("db", "postgresql://me:pw@db/memd").count("pw") == 0
    assert shown("min_similarity", 0.5) == "0.5"
    assert {"weights", "preset", "min_similarity", "upstream_url", "prices"} <= LIVE_KEYS
    assert not {"port", "db", "host", "auth", "notes_dir"} & LIVE_KEYS


def test_the_readme_names_every_key_read_live() -> None:
    """A key the daemon reloads live but the README does not name is a setting users
    cannot know takes effect without a restart."""
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Live config"):]
    section = section[:section.index("\n### ", 1)]
    unnamed = sorted(key for key in LIVE_KEYS if key not in section)
    assert unnamed == []
