"""`memd doctor`: a line a check, the fix under each failure, exit 1 on a failure."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner, Result
from servers import FakeUpstream, free_port, postgres_url, serve, wait_healthy
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import memd
from memd.cli import main

CHECKS = ["python", "config", "data dir", "store", "embedder", "helper", "upstream",
          "port", "daemon", "service"]


def doctor(*args: str) -> Result:
    return CliRunner().invoke(main, ["doctor", *args])


def line(result: Result, check: str) -> str:
    """The line of ``check`` and, when there is one, its fix line below it."""
    lines = result.output.splitlines()
    for i, text in enumerate(lines):
        if text[6:].startswith(f"{check}: "):
            below = lines[i + 1] if i + 1 < len(lines) else ""
            return text + ("\n" + below if below.startswith("      ") else "")
    raise AssertionError(f"no {check} line in:\n{result.output}")


@pytest.fixture
def upstream() -> Iterator[str]:
    with serve(FakeUpstream().app) as base:
        yield f"{base}/v1"


def test_a_healthy_setup_passes_and_lists_the_upstreams_models(
        hermetic_env: Path, upstream: str) -> None:
    memd.open().close()  # a store at the current schema
    result = doctor("--upstream-url", upstream, "--port", str(free_port()))
    assert result.exit_code == 0, result.output
    assert [text[6:].split(":")[0] for text in result.output.splitlines()
            if not text.startswith(" ")][:-1] == CHECKS
    store = line(result, "store")
    assert store.startswith("ok    store: SQLite ") and "sqlite-vec v0.1.9" in store
    assert f"{hermetic_env / 'memd.db'}" in store and "(current)" in store
    assert line(result, "upstream") == (f"ok    upstream: {upstream} answers; 1 model(s): "
                                        "fake-model")
    assert line(result, "embedder").startswith("ok    embedder: fake (fake-hash, 384 dims)")
    assert line(result, "port").startswith("ok    port: 127.0.0.1:")
    assert result.output.endswith("no check failed\n")


def test_an_unreachable_upstream_fails_with_a_fix(hermetic_env: Path) -> None:
    closed = free_port()
    result = doctor("--upstream-url", f"http://127.0.0.1:{closed}/v1", "--port",
                    str(free_port()))
    assert result.exit_code == 1
    found, fix = line(result, "upstream").splitlines()
    assert found == (f"FAIL  upstream: nothing answers at http://127.0.0.1:{closed}/v1 "
                     "(ConnectError)")
    assert fix.startswith("      fix: start the model server") and "--upstream-url" in fix
    assert result.output.endswith("1 check(s) failed\n")


def test_no_upstream_warns_how_to_set_one(hermetic_env: Path) -> None:
    result = doctor()
    found, fix = line(result, "upstream").splitlines()
    assert found.startswith("warn  upstream: none set")
    assert "memd serve --upstream-url http://" in fix and "MEMD_UPSTREAM_URL" in fix


def test_an_upstream_refusing_the_key_says_so(hermetic_env: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    async def models(request: Request) -> Response:
        ok = request.headers.get("authorization") == "Bearer right-key"
        return JSONResponse({"data": [{"id": "m"}]} if ok else {"error": {}},
                            status_code=200 if ok else 401)

    with serve(Starlette(routes=[Route("/v1/models", models)])) as base:
        missing = doctor("--upstream-url", f"{base}/v1")
        monkeypatch.setenv("MEMD_UPSTREAM_API_KEY", "wrong-key")
        wrong = doctor("--upstream-url", f"{base}/v1")
        monkeypatch.setenv("MEMD_UPSTREAM_API_KEY", "right-key")
        right = doctor("--upstream-url", f"{base}/v1")
    assert "FAIL  upstream:" in line(missing, "upstream")
    assert "the API key is missing" in line(missing, "upstream")
    assert "upstream_api_key" in line(missing, "upstream").splitlines()[1]
    assert "the API key is wrong" in line(wrong, "upstream")
    assert line(right, "upstream").startswith("ok    upstream:")
    assert "wrong-key" not in wrong.output


def test_a_port_held_by_another_program_fails(hermetic_env: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = doctor("--port", str(port))
    assert result.exit_code == 1
    found, fix = line(result, "port").splitlines()
    assert found == f"FAIL  port: 127.0.0.1:{port} is in use by another program"
    assert "memd serve --port " in fix and f"sport = :{port}" in fix


def test_an_invalid_config_file_fails_naming_it_and_the_rest_still_runs(
        hermetic_env: Path, tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text('port = "8765\n')
    result = doctor("--config", str(config))
    assert result.exit_code == 1
    found, fix = line(result, "config").splitlines()
    assert found.startswith(f"FAIL  config: config file {config}: ")
    assert fix == f"      fix: edit {config} (memd config show prints the settings once it loads)"
    assert line(result, "store").startswith("ok    store:")  # on defaults


def test_a_config_file_is_named_with_the_keys_it_sets(hermetic_env: Path,
                                                      tmp_path: Path) -> None:
    config = tmp_path / "memd.toml"
    config.write_text('upstream_api_key = "cfg-secret-key"\nretention_days = 30\n')
    result = doctor("--config", str(config))
    assert line(result, "config") == (f"ok    config: {config} sets retention_days, "
                                      "upstream_api_key")
    assert "cfg-secret-key" not in result.output


def test_a_store_behind_the_code_needs_its_migrations(hermetic_env: Path) -> None:
    memd.open().close()
    db = apsw.Connection(str(hermetic_env / "memd.db"))
    newest = db.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
    db.execute("DELETE FROM schema_migrations WHERE version = ?", (newest,))
    db.close()
    result = doctor()
    found, fix = line(result, "store").splitlines()
    assert found.startswith("warn  store:")
    assert f"schema v{newest - 1}, 1 migration(s) to apply" in found
    assert fix == "      fix: memd status (opening the store applies them)"


def test_a_stale_daemon_file_warns(hermetic_env: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    hermetic_env.mkdir(parents=True)
    (hermetic_env / "daemon.json").write_text(json.dumps(
        {"pid": gone.pid, "host": "127.0.0.1", "port": free_port()}))
    found, fix = line(doctor(), "daemon").splitlines()
    assert found.startswith("warn  daemon:") and f"pid {gone.pid}, which is gone" in found
    assert "daemon.json" in fix


@pytest.mark.slow
def test_a_running_daemon_is_ok_and_holds_its_own_port(hermetic_env: Path,
                                                        tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port", str(port),
                             "--no-log-file"], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(port, proc)
        result = doctor("--port", str(port))
        elsewhere = doctor("--data-dir", str(tmp_path / "other"), "--port", str(port))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert line(result, "daemon") == (
        f"ok    daemon: pid {proc.pid} answers at http://127.0.0.1:{port} (memd "
        f"{memd.__version__}, store SQLiteStore, embedder fake-hash, pending jobs 0)")
    assert line(result, "port") == (f"ok    port: 127.0.0.1:{port} is held by memd's own "
                                    f"daemon (pid {proc.pid})")
    assert line(result, "store").startswith("ok    store:")  # read beside the daemon
    assert line(elsewhere, "port").startswith(f"FAIL  port: 127.0.0.1:{port} is held by a "
                                              "memd daemon of another data dir")
    assert line(elsewhere, "daemon").startswith("info  daemon: none runs for ")


def test_json_lists_every_check_with_its_fields(hermetic_env: Path) -> None:
    result = doctor("--json", "--upstream-url", f"http://127.0.0.1:{free_port()}/v1")
    assert result.exit_code == 1
    found = json.loads(result.stdout)
    assert [c["check"] for c in found] == CHECKS
    assert all(set(c) == {"check", "status", "detail", "fix"} for c in found)
    by_name = {c["check"]: c for c in found}
    assert by_name["upstream"]["status"] == "fail" and by_name["upstream"]["fix"]
    assert by_name["store"]["status"] == "ok" and by_name["store"]["fix"] is None
    assert by_name["service"]["status"] == "info"
    assert by_name["service"]["fix"].startswith("memd service install")


def test_passwords_in_urls_and_dsns_never_show(hermetic_env: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    closed = free_port()
    monkeypatch.setenv("MEMD_UPSTREAM_API_KEY", "key-never-shown")
    args = ["--db", f"postgresql://memd:pg-pass-never-shown@127.0.0.1:{closed}/memdb",
            "--upstream-url", f"http://bob:url-pass-never-shown@127.0.0.1:{closed}/v1"
                              "?api_key=param-never-shown"]
    text, as_json = doctor(*args), doctor("--json", *args)
    for result in (text, as_json):
        assert result.exit_code == 1
        assert "never-shown" not in result.output
    assert line(text, "store").startswith(
        f"FAIL  store: cannot reach PostgreSQL, database memdb on 127.0.0.1:{closed}: ")
    assert f"nothing answers at http://127.0.0.1:{closed}/v1?api_key=***" in line(
        text, "upstream")


def test_postgresql_with_pgvector_and_the_current_schema_passes(hermetic_env: Path) -> None:
    from pg import database

    migrated = postgres_url()
    result = doctor("--db", migrated)
    found = line(result, "store")
    assert found.startswith("ok    store: PostgreSQL 18.") and ", pgvector 0." in found
    assert found.endswith("(current)")
    empty = line(doctor("--db", database()), "store")
    assert empty.startswith("ok    store: PostgreSQL") and "no memd tables yet" in empty


def test_a_database_a_killed_migrate_left_fails_with_the_fix(hermetic_env: Path) -> None:
    """memd serve refuses such a database; doctor says why before anyone tries."""
    from pg import database

    from memd.migrate.target import mark_copying

    target = database()
    assert mark_copying(target, ["memories"])
    found, fix = line(doctor("--db", target), "store").splitlines()
    assert found.startswith("FAIL  store: PostgreSQL")
    assert found.endswith("an unfinished memd migrate")
    assert fix == "      fix: run the same memd migrate again to finish it"


def test_an_installed_service_of_another_data_dir_warns(hermetic_env: Path,
                                                        tmp_path: Path) -> None:
    from memd.cli.service import manager, render_plist, render_unit

    mgr = manager()
    argv = ["python", "-m", "memd.cli", "serve", "--data-dir", str(tmp_path / "elsewhere")]
    mgr.path.parent.mkdir(parents=True)
    mgr.path.write_bytes(render_plist(argv, tmp_path) if mgr.kind == "launchd agent"
                         else render_unit(argv, tmp_path / "memd.env").encode())
    found, fix = line(doctor(), "service").splitlines()
    assert found.startswith(f"warn  service: {mgr.kind} {mgr.path}: ")
    assert found.endswith(f"it serves another data dir than {hermetic_env}")
    assert fix == "      fix: memd service install --data-dir <the data dir you use>"
