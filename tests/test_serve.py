"""`memd serve` as a real process, and the CLI talking to it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from servers import FakeUpstream, free_port, postgres_url, serve, wait_healthy

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
        db = str(tmp_path / "data" / "memd.db")
        assert marker == {"pid": proc.pid, "host": "127.0.0.1", "port": port, "store": {
            "backend": "SQLite", "shown": db, "key": f"sqlite:{Path(db).resolve()}"}}

        added = run("add", "I prefer tabs over spaces", "--user", "alice", "--json", env=env)
        assert added.returncode == 0, added.stderr
        found = run("search", "tabs", "--user", "alice", "--json", env=env)
        assert json.loads(found.stdout)[0]["text"] == "I prefer tabs over spaces"
        bad = run("add", "   ", "--user", "alice", env=env)
        assert bad.returncode == 2 and "empty" in bad.stderr
        # another store named: written there by the CLI itself, not into the daemon's
        other = str(tmp_path / "other.db")
        assert run("add", "Lunch is at noon", "--user", "alice", "--db", other,
                   env=env).returncode == 0
        kept = httpx.get(f"http://127.0.0.1:{port}/v1/memories",
                         params={"user_id": "alice"}).json()["memories"]
        assert [m["text"] for m in kept] == ["I prefer tabs over spaces"]
        elsewhere = run("list", "--user", "alice", "--json", "--db", other, env=env)
        assert [m["text"] for m in json.loads(elsewhere.stdout)] == ["Lunch is at noon"]
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
    # without --user: the local user's memories
    assert run("add", "Deploys go out on Tuesdays", env=env).returncode == 0
    mine = run("search", "Tuesdays", "--json", env=env)
    assert [h["text"] for h in json.loads(mine.stdout)][:1] == ["Deploys go out on Tuesdays"]
    listed = run("list", "--json", env=env)
    assert "Deploys go out on Tuesdays" in listed.stdout and "tabs" not in listed.stdout


def test_listening_is_said_only_once_the_port_is_bound(tmp_path: Path) -> None:
    env = {**os.environ, "MEMD_DATA_DIR": str(tmp_path / "data"), "MEMD_EMBEDDER": "fake"}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = run("serve", "--port", str(port), "--no-log-file", env=env)
    assert refused.returncode != 0
    assert "address already in use" in refused.stderr.lower()
    assert "listening on" not in refused.stderr
    assert not (tmp_path / "data" / "daemon.json").exists()  # no daemon to point at
    # --port 0: the line names the port the system gave, which answers
    proc = subprocess.Popen([*MEMD, "serve", "--port", "0", "--no-log-file"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening on" in line:
                break
        url = line.split("listening on ", 1)[1].split()[0].removesuffix("/v1")
        assert not url.endswith(":0")
        assert httpx.get(f"{url}/health").status_code == 200
        # and daemon.json, what the CLI finds the daemon by, names that port too
        marker = json.loads((tmp_path / "data" / "daemon.json").read_text())
        assert f"http://127.0.0.1:{marker['port']}" == url
        status = run("status", env=env)
        assert f"daemon:    answers at {url}" in status.stdout, status.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def _warm_line(proc: subprocess.Popen[str]) -> str:
    """The daemon's line saying it loaded the local user's vectors (read from stderr;
    a daemon that never says it is stopped after a minute, which fails the test)."""
    assert proc.stderr is not None
    stop = threading.Timer(60, proc.terminate)
    stop.start()
    try:
        for line in proc.stderr:
            if "loaded ahead of their first search" in line:
                return line
    finally:
        stop.cancel()
    raise AssertionError("the daemon ended without loading the vectors")


def test_serve_loads_the_local_users_vectors_once_it_listens(tmp_path: Path) -> None:
    """In local mode the daemon loads its user's vectors as soon as it listens, with no
    search made, on an empty store (nothing to load: it starts and serves) as on one
    with memories."""
    env = {**os.environ, "MEMD_DATA_DIR": str(tmp_path / "data"), "MEMD_EMBEDDER": "fake"}
    for memories in (0, 2):
        if memories:
            for text in ("Deploys go out on Tuesdays", "I prefer tabs over spaces"):
                assert run("add", text, env=env).returncode == 0
        proc = subprocess.Popen([*MEMD, "serve", "--port", "0", "--no-log-file",
                                 "--log-level", "debug"], env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            line = _warm_line(proc)
            assert f"vectors of local loaded ahead of their first search: {memories} in" \
                in line
            marker = json.loads((tmp_path / "data" / "daemon.json").read_text())
            found = httpx.post(f"http://127.0.0.1:{marker['port']}/v1/search",
                               json={"query": "tabs", "k": 5})
            assert found.status_code == 200, found.text
            texts = [h["text"] for h in found.json()["hits"]]
            assert ("I prefer tabs over spaces" in texts) if memories else texts == []
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
            assert proc.stderr is not None
            proc.stderr.close()


def test_of_two_daemons_started_at_once_on_one_data_dir_one_serves(tmp_path: Path) -> None:
    """Both start before either has written daemon.json: the data dir's lock lets one
    through and refuses the other."""
    env = {**os.environ, "MEMD_DATA_DIR": str(tmp_path / "data"), "MEMD_EMBEDDER": "fake"}
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([*MEMD, "serve", "--port", str(p)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for p in ports]
    try:
        deadline = time.monotonic() + 60
        refused = None
        while refused is None and time.monotonic() < deadline:
            refused = next((i for i, p in enumerate(procs) if p.poll() is not None), None)
            time.sleep(0.1)
        assert refused is not None, "neither daemon was refused"
        _, err = procs[refused].communicate(timeout=10)
        assert procs[refused].returncode == 2 and "already serves" in err, err
        serving = ports[1 - refused]
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{serving}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{serving}/health").status_code == 200
        assert procs[1 - refused].poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                p.wait(timeout=30)


def test_sigterm_drains_a_stream_stores_the_turn_and_exits_0(tmp_path: Path) -> None:
    """What systemd and launchd send to stop a service: the stream in flight finishes,
    its turn is stored, the store is closed (no WAL left), daemon.json goes, status 0."""
    upstream = FakeUpstream()
    upstream.gate = threading.Event()
    data = tmp_path / "data"
    env = {**os.environ, "MEMD_DATA_DIR": str(data), "MEMD_EMBEDDER": "fake"}
    port = free_port()
    with serve(upstream.app) as up:
        proc = subprocess.Popen([*MEMD, "serve", "--port", str(port), "--upstream-url",
                                 f"{up}/v1"], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_healthy(port, proc)
            body = {"model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "count to three"}]}
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                              json=body, timeout=60) as resp:
                chunks = resp.iter_bytes()
                received = next(chunks)  # the first chunk: the stream is in flight
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)  # the daemon is draining, the stream still open
                upstream.gate.set()
                received += b"".join(chunks)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert received.rstrip().endswith(b"data: [DONE]"), received
    assert proc.returncode == 0, err
    assert not (data / "daemon.json").exists()
    assert not (data / "memd.db-wal").exists()  # closed: the WAL was checkpointed
    import memd

    with memd.open(data, embedder="fake") as engine:
        [session] = engine.store.list_sessions("local")
        stored = engine.messages(session.id, "local")
        assert [m.role for m in stored] == ["user", "assistant"]
        assert stored[1].content == "ok: count to three"


def test_serve_refuses_a_database_whose_migrate_did_not_finish(tmp_path: Path) -> None:
    """A killed ``memd migrate`` leaves vector indexes deferred: served as it is, search
    would find nothing, so serve says what to do instead."""
    import psycopg
    from click.testing import CliRunner

    from memd.backends.common.migrations import DEFERRED_INDEX_KEY
    from memd.cli import main

    dsn = postgres_url()
    args = ["serve", "--data-dir", str(tmp_path), "--db", dsn, "--port", str(free_port())]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_meta (key, value) VALUES (%s, %s)",
                     (f"{DEFERRED_INDEX_KEY}memories.idx_memories_embedding",
                      "CREATE INDEX ..."))
    result = CliRunner().invoke(main, args, env={"MEMD_EMBEDDER": "fake"})
    assert result.exit_code == 1, result.output
    assert "memd migrate into this database did not finish" in result.output
    assert "memories" in result.output and "run the same memd migrate again" in result.output
    assert not (tmp_path / "daemon.json").exists()


def _command_paths() -> list[tuple[str, ...]]:
    """Every command of memd's click tree, the groups' subcommands included, as the
    words that invoke it (``()`` is ``memd`` itself)."""
    import click

    from memd.cli import main

    paths: list[tuple[str, ...]] = []

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        paths.append(path)
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd, info_name=path[-1] if path else "memd")
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, (path, name)
                walk(sub, (*path, name))

    walk(main, ())
    return paths


COMMAND_PATHS = _command_paths()


def test_the_command_tree_has_nested_subcommands() -> None:
    """The enumeration reaches into the groups (``memd user add``), not just the top."""
    assert ("user", "add") in COMMAND_PATHS and ("key", "revoke") in COMMAND_PATHS
    assert len([p for p in COMMAND_PATHS if len(p) == 2]) >= 10


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "memd")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    import click
    from click.testing import CliRunner

    from memd.cli import main

    result = CliRunner().invoke(main, [*path, "--help"], prog_name="memd")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: {' '.join(('memd', *path))} "), result.output
    cmd: click.Command = main
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.commands[name]
    assert cmd.help, f"{' '.join(path) or 'memd'} has no help text"
    if isinstance(cmd, click.Group):  # a group's help lists its subcommands
        assert all(name in result.output for name in cmd.commands), result.output
