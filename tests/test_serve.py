"""`memd serve` as a real process, and the CLI talking to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from servers import free_port

pytestmark = pytest.mark.slow
MEMD = [sys.executable, "-m", "memd.cli"]


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMD, *args], env=env, capture_output=True, text=True, timeout=120)


def test_cli_uses_the_running_daemon(tmp_path: Path) -> None:
    env = {**os.environ, "MEMD_DATA_DIR": str(tmp_path / "data"), "MEMD_EMBEDDER": "fake"}
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([*MEMD, "serve", "--port", str(port), "--log-level", "debug"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "daemon did not start"
            time.sleep(0.2)
        marker = json.loads((tmp_path / "data" / "daemon.json").read_text())
        assert marker == {"pid": proc.pid, "host": "127.0.0.1", "port": port}

        added = run("add", "I prefer tabs over spaces", "--user", "alice", "--json", env=env)
        assert added.returncode == 0, added.stderr
        found = run("search", "tabs", "--user", "alice", "--json", env=env)
        assert json.loads(found.stdout)[0]["text"] == "I prefer tabs over spaces"
        bad = run("add", "   ", "--user", "alice", env=env)
        assert bad.returncode == 2 and "empty" in bad.stderr
        served = (tmp_path / "serve.log").read_text()
        assert "POST /v1/memories" in served and "POST /v1/search" in served
        assert "listening on http://127.0.0.1:" in served
        # A second daemon on the same data dir is refused (on one SQLite file their
        # writes would starve each other), and the first goes on serving.
        second = run("serve", "--port", str(free_port()), env=env)
        assert second.returncode == 2, second.stderr
        assert f"already serves {tmp_path / 'data'} at http://127.0.0.1:{port}" in second.stderr
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        log.close()
    assert not (tmp_path / "data" / "daemon.json").exists()
    # with the daemon gone, the CLI opens the store itself and sees the same data
    again = run("search", "tabs", "--user", "alice", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)[0]["text"].startswith("I prefer")


def test_every_command_has_help() -> None:
    from click.testing import CliRunner

    from memd.cli import main

    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0
    for name in main.commands:  # type: ignore[attr-defined]
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output, name
        assert main.commands[name].help, f"{name} has no help text"  # type: ignore[attr-defined]
