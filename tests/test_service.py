"""``memd service install|uninstall|status`` and the log of ``memd serve``.

No test needs a real user systemd or launchd: the unit is checked with
``systemd-analyze --user verify``, which loads it without a running manager, and the
command sequences run against fake ``systemctl``/``launchctl`` executables on PATH that
record their arguments. Home, XDG and log dirs are the test's tmp dirs.
"""

from __future__ import annotations

import logging
import os
import plistlib
import shlex
import shutil
import subprocess
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from memd.cli import main
from memd.cli.service import (
    LOG_MAX_BYTES,
    Launchd,
    default_log_file,
    log_handlers,
    manager,
    render_plist,
    render_unit,
)

REPO = Path(__file__).resolve().parent.parent
PYTHON = os.path.abspath(sys.executable)
SERVE = [PYTHON, "-P", "-m", "memd.cli", "serve"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own (``XDG_CONFIG_HOME`` is already the test's, see
    conftest.py), and no journald stream inherited from the shell running pytest."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    return home


def memd(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="memd")


def unit_path() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "systemd" / "user" / "memd.service"


def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fail_on: str = "",
         says: str = "", status: int = 1) -> Path:
    """A fake ``name`` first on PATH: it appends its arguments to the file it returns,
    and when they match the shell pattern ``fail_on`` prints ``says`` and exits
    ``status``. ``systemctl --user is-active`` answers "active"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    (bin_dir / name).write_text(f"""#!/bin/sh
echo "{name} $*" >> {shlex.quote(str(calls))}
case "$*" in
    {fail_on or "__never__"}) echo {shlex.quote(says)} >&2; exit {status} ;;
    "--user is-active memd.service") echo active ;;
esac
""")
    (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def calls_of(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


# -- the unit and the plist ----------------------------------------------------------------
def verify(tmp_path: Path, unit: str) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze --user verify`` on ``unit``: a user manager's view of it (its
    targets, %h), loaded without a running manager; it only needs a runtime dir."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    path = tmp_path / "unit" / "memd.service"
    path.parent.mkdir(exist_ok=True)
    path.write_text(unit)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    return subprocess.run([analyze, "--user", "verify", str(path)], capture_output=True,
                          text=True, timeout=60, env=env)


def complaints(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if "memd.service" in line]


def test_dry_run_prints_a_unit_systemd_accepts_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "my data"
    result = memd("service", "install", "--dry-run", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    head, rest = result.output.split(":\n\n", 1)
    assert head == f"would write {unit_path()}"
    unit, commands = rest.split("\nwould run:\n")
    assert commands.split("\n") == ["  systemctl --user daemon-reload",
                                    "  systemctl --user enable memd.service",
                                    "  systemctl --user restart memd.service", ""]
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == f'ExecStart={PYTHON} -P -m memd.cli serve --data-dir "{data}"'
    done = verify(tmp_path, unit)
    assert done.returncode == 0 and not complaints(done), done.stdout + done.stderr
    assert not Path(os.environ["XDG_CONFIG_HOME"]).exists()


def test_verify_finds_what_is_wrong_in_a_unit(tmp_path: Path) -> None:
    """The check above has teeth: a bad setting and a missing program are reported."""
    unit = render_unit([*SERVE, "--data-dir", str(tmp_path)], tmp_path / "memd.env")
    done = verify(tmp_path, unit.replace("Restart=on-failure", "Restart=sometimes"))
    assert any("sometimes" in line for line in complaints(done)), done.stderr
    done = verify(tmp_path, unit.replace(PYTHON, str(tmp_path / "no-python")))
    assert done.returncode != 0 and complaints(done)


def test_unit_words_are_taken_literally(tmp_path: Path) -> None:
    odd = '/srv/100% "$HOME"\\x'
    unit = render_unit([*SERVE, "--data-dir", odd], tmp_path / "memd.env")
    assert 'serve --data-dir "/srv/100%% \\"$$HOME\\"\\\\x"\n' in unit
    assert verify(tmp_path, unit).returncode == 0


def test_install_passes_config_and_db_as_absolute_paths(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("memd.toml").write_text('embedder = "fake"\n')
    result = memd("service", "install", "--dry-run", "--data-dir", "d", "--config",
                  "memd.toml", "--db", "other.db")
    assert result.exit_code == 0, result.output
    assert (f"ExecStart={PYTHON} -P -m memd.cli serve --data-dir {tmp_path}/d "
            f"--config {tmp_path}/memd.toml --db {tmp_path}/other.db\n") in result.output


def test_the_plist_parses_and_runs_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         home: Path) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    result = memd("service", "install", "--dry-run", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    mgr = manager()
    assert isinstance(mgr, Launchd)
    assert mgr.path == home / "Library" / "LaunchAgents" / "io.memd.daemon.plist"
    head, rest = result.output.split(":\n\n", 1)
    assert head == f"would write {mgr.path}"
    plist = plistlib.loads(rest.split("\nwould run:\n")[0].encode())
    assert plist["Label"] == "io.memd.daemon"
    assert plist["ProgramArguments"] == [*SERVE, "--data-dir", str(tmp_path / "d")]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardErrorPath"] == str(default_log_file().parent / "launchd.log")
    assert f"launchctl bootstrap gui/{os.getuid()} {mgr.path}" in result.output


def test_the_packaging_files_are_what_install_writes(home: Path) -> None:
    """packaging/ holds the same unit and agent, run from ~/.local/bin/memd."""
    argv = [f"{home}/.local/bin/memd", "serve"]

    def settings(text: str) -> list[str]:
        return [line for line in text.splitlines() if line and not line.startswith("#")]

    template = (REPO / "packaging" / "memd.service").read_text().replace("%h", str(home))
    assert settings(template) == settings(render_unit(argv, home / ".config/memd/memd.env"))
    template = (REPO / "packaging" / "io.memd.daemon.plist").read_text()
    assert plistlib.loads(template.replace("__HOME__", str(home)).encode()) == \
        plistlib.loads(render_plist(argv, home / "Library/Logs/memd"))


# -- install, uninstall, status ----------------------------------------------------------------
def test_install_without_a_user_systemd_fails_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake(tmp_path, monkeypatch, "systemctl", fail_on="*",
                 says="Failed to connect to bus: No medium found")
    result = memd("service", "install")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: cannot install the memd service: systemd's user instance does not answer "
        "(systemctl --user: Failed to connect to bus: No medium found). Nothing was written.")
    assert "memd service install --dry-run" in result.stderr
    assert calls_of(calls) == ["systemctl --user show --property=Version"]
    assert not Path(os.environ["XDG_CONFIG_HOME"]).exists()


def test_install_on_this_machine_without_a_user_bus(tmp_path: Path) -> None:
    """The real systemctl, where it has no user instance to talk to (CI, containers)."""
    if shutil.which("systemctl") is None:
        pytest.skip("no systemctl here")
    probe = subprocess.run(["systemctl", "--user", "show", "--property=Version"],
                           capture_output=True, timeout=30)
    if probe.returncode == 0:
        pytest.skip("a user systemd answers here; the fake one covers installing")
    result = memd("service", "install", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 1 and "Nothing was written" in result.stderr, result.output
    assert not Path(os.environ["XDG_CONFIG_HOME"]).exists()


def test_install_without_systemd_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = memd("service", "install")
    assert result.exit_code == 1
    assert "there is no systemctl: this system does not run systemd" in result.stderr


def test_install_status_uninstall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake(tmp_path, monkeypatch, "systemctl")
    data = tmp_path / "d"
    result = memd("service", "install", "--data-dir", str(data))
    assert result.exit_code == 0, result.output
    assert calls_of(calls) == ["systemctl --user show --property=Version",
                               "systemctl --user daemon-reload",
                               "systemctl --user enable memd.service",
                               "systemctl --user restart memd.service"]
    assert f"ExecStart={PYTHON} -P -m memd.cli serve --data-dir {data}\n" in \
        unit_path().read_text()
    assert unit_path().stat().st_mode & 0o777 == 0o600  # it may name a database password
    assert "journalctl --user -u memd" in result.output

    result = memd("service", "status", "--data-dir", str(data))
    assert result.output.splitlines() == [
        f"service:  systemd user unit {unit_path()}",
        "manager:  active",
        f"daemon:   none answers for {data}",
        "log:      journalctl --user -u memd",
    ]

    calls.unlink()
    result = memd("service", "uninstall")
    assert result.exit_code == 0, result.output
    assert calls_of(calls) == ["systemctl --user disable --now memd.service",
                               "systemctl --user daemon-reload"]
    assert not unit_path().exists()


def test_a_failed_start_takes_the_file_back(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake(tmp_path, monkeypatch, "systemctl", fail_on="*restart*",
                 says="Job for memd.service failed.")
    result = memd("service", "install")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: cannot start the memd service: 'systemctl --user restart memd.service' "
        f"failed: Job for memd.service failed.; {unit_path()} was removed again\n")
    assert calls_of(calls)[-3:] == ["systemctl --user restart memd.service",
                                    "systemctl --user disable memd.service",
                                    "systemctl --user daemon-reload"]
    assert not unit_path().exists()


def test_a_failed_reinstall_puts_the_earlier_unit_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unit_path().parent.mkdir(parents=True)
    unit_path().write_text("the earlier unit\n")
    fake(tmp_path, monkeypatch, "systemctl", fail_on="*enable*", says="no")
    result = memd("service", "install")
    assert result.exit_code == 1 and "was put back" in result.stderr
    assert unit_path().read_text() == "the earlier unit\n"


def test_launchd_install_falls_back_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            home: Path) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    calls = fake(tmp_path, monkeypatch, "launchctl", fail_on="bootstrap*",
                 says="Unrecognized subcommand: bootstrap", status=64)
    result = memd("service", "install", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    plist = home / "Library" / "LaunchAgents" / "io.memd.daemon.plist"
    uid = os.getuid()
    assert calls_of(calls) == [f"launchctl print gui/{uid}",
                               f"launchctl bootout gui/{uid}/io.memd.daemon",
                               f"launchctl bootstrap gui/{uid} {plist}",
                               f"launchctl load -w {plist}"]
    assert plistlib.loads(plist.read_bytes())["ProgramArguments"][-1] == str(tmp_path / "d")
    assert default_log_file().parent.is_dir()  # launchd does not create it
    result = memd("service", "uninstall")
    assert result.exit_code == 0 and not plist.exists(), result.output


def test_uninstall_and_status_when_not_installed(tmp_path: Path) -> None:
    result = memd("service", "uninstall")
    assert result.exit_code == 0
    assert result.output == f"memd is not installed as a service (no {unit_path()})\n"
    result = memd("service", "status", "--data-dir", str(tmp_path / "d"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"service:  not installed (no {unit_path()})\n")
    assert f"daemon:   none answers for {tmp_path / 'd'}\n" in result.output


# -- the log of memd serve ---------------------------------------------------------------
def log_through(handlers: list[logging.Handler], message: str) -> None:
    log = logging.getLogger("memd.test_service")
    log.propagate = False
    log.setLevel(logging.INFO)
    formatter = logging.Formatter("%(asctime)s %(name)s %(message)s")
    try:
        for handler in handlers:
            handler.setFormatter(formatter)
            log.addHandler(handler)
        log.info(message)
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


def test_serve_logs_to_a_rotated_file_in_the_user_log_dir(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_log_file() == tmp_path / "xdg-state" / "memd" / "log" / "memd.log"
    # A JOURNAL_STREAM inherited from a session is not this stream: it still logs.
    monkeypatch.setenv("JOURNAL_STREAM", "8:12345")
    with (tmp_path / "stderr").open("w") as stderr:
        handlers = log_handlers(stream=stderr)
        assert isinstance(handlers[1], RotatingFileHandler)
        assert handlers[1].maxBytes == LOG_MAX_BYTES and handlers[1].backupCount == 3
        log_through(handlers, "hello file")
    assert default_log_file().read_text().endswith(" memd.test_service hello file\n")
    assert (tmp_path / "stderr").read_text().endswith(" memd.test_service hello file\n")


def test_serve_leaves_its_log_to_journald_under_systemd(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with (tmp_path / "stderr").open("w") as stderr:
        st = os.fstat(stderr.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        handlers = log_handlers(stream=stderr)
        assert len(handlers) == 1
        log_through(handlers, "hello journal")
        # An explicit --log-file is still written.
        handlers = log_handlers(tmp_path / "mine.log", stream=stderr)
        log_through(handlers, "hello mine")
    assert not default_log_file().parent.exists()
    assert (tmp_path / "mine.log").read_text().endswith("hello mine\n")


def test_no_log_file_and_an_unwritable_one(tmp_path: Path) -> None:
    with (tmp_path / "stderr").open("w") as stderr:
        assert len(log_handlers(no_log_file=True, stream=stderr)) == 1
        (tmp_path / "a-file").write_text("")
        handlers = log_handlers(tmp_path / "a-file" / "memd.log", stream=stderr)
        assert len(handlers) == 1
        log_through(handlers, "still logging")
    assert not default_log_file().parent.exists()
    text = (tmp_path / "stderr").read_text()
    assert text.startswith(f"warning: cannot write the log file {tmp_path}/a-file/memd.log (")
    assert text.endswith("still logging\n")


def test_serve_refuses_log_file_with_no_log_file(tmp_path: Path) -> None:
    result = memd("serve", "--log-file", str(tmp_path / "x.log"), "--no-log-file")
    assert result.exit_code == 2
    assert "--log-file and --no-log-file contradict each other" in result.stderr
