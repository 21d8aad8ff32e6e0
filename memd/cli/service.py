"""Running memd as a service (``memd service install``, ``uninstall``, ``status``), and
where ``memd serve`` writes its log.

The service runs this interpreter as ``python -P -m memd.cli serve`` with the data dir,
config file and ``--db`` as absolute paths. ``sys.executable`` names the environment this
very memd is installed in however the command was started (the console script, the
``~/.local/bin`` link install.sh makes, ``python -m memd.cli``), where ``sys.argv[0]`` may
be a relative name, a link or a test runner; ``-P`` keeps the service's working directory
off ``sys.path``, so that a ``memd`` folder there cannot stand in for the package.

An install finishes or leaves nothing behind: the service manager must answer before the
unit file is written, and a file written for an install that then fails is taken back.

The log: under systemd, journald keeps the daemon's stderr (``journalctl --user -u
memd``), so ``memd serve`` writes no file of its own; anywhere else (a terminal, launchd,
another init) it also writes ``memd.log``, rotated, in the user log dir.
"""

from __future__ import annotations

import logging
import os
import plistlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, Protocol, TextIO

import click
import platformdirs

from memd.cli.common import handles_errors, main, settings_for
from memd.config import APP, Settings
from memd.errors import InvalidInput, MemdError
from memd.private import private_dir, private_file, write_private

UNIT = "memd.service"
LABEL = "io.memd.daemon"
LOG_FORMAT = "%(asctime)s %(name)s %(message)s"
LOG_MAX_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 3
# Settings a shell may hold that the service will not see (MEMD_API_KEY is the CLI's).
_PASSED_ON = ("MEMD_DATA_DIR", "MEMD_CONFIG", "MEMD_DB", "MEMD_API_KEY")


# -- the log of memd serve -------------------------------------------------------------
class PrivateLogFile(RotatingFileHandler):
    """A rotating log file whose every file, the first and each one rotation starts, is
    0600: log lines can quote what users sent."""

    def _open(self) -> Any:
        private_file(Path(self.baseFilename))
        return super()._open()


def default_log_file() -> Path:
    return Path(platformdirs.user_log_dir(APP)) / "memd.log"


def journal_keeps(stream: TextIO) -> bool:
    """Whether journald receives what is written to ``stream``. systemd puts the device
    and inode of the stream it connected in JOURNAL_STREAM; comparing them, rather than
    only looking for the variable, tells a terminal in a session that inherited it."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no file descriptor (a test's captured stream)
        return False
    return os.environ.get("JOURNAL_STREAM") == f"{st.st_dev}:{st.st_ino}"


def log_handlers(log_file: Path | None = None, *, no_log_file: bool = False,
                 stream: TextIO | None = None) -> list[logging.Handler]:
    """Handlers for ``memd serve``'s log: ``stream`` (stderr), and a rotated file:
    ``log_file``, else ``memd.log`` in the user log dir unless ``no_log_file`` or
    journald keeps the stream. A file that cannot be opened is reported on the stream
    and left out: the daemon runs without it."""
    stream = stream or sys.stderr
    handlers: list[logging.Handler] = [logging.StreamHandler(stream)]
    if log_file is None and not no_log_file and not journal_keeps(stream):
        log_file = default_log_file()
    if log_file is None or no_log_file:
        return handlers
    try:
        private_dir(log_file.parent, tighten=log_file == default_log_file())
        handlers.append(PrivateLogFile(log_file, maxBytes=LOG_MAX_BYTES,
                                       backupCount=LOG_BACKUPS, encoding="utf-8"))
    except OSError as exc:
        stream.write(f"warning: cannot write the log file {log_file} ({exc}); "
                     "logging to stderr only\n")
    return handlers


# -- the files ---------------------------------------------------------------------------
def serve_command(settings: Settings, db_given: bool) -> list[str]:
    """The daemon's command line: this interpreter running ``memd serve`` on the data
    dir, the config file if there is one, and the store if ``--db``/MEMD_DB named one."""
    if not sys.executable:
        raise MemdError("cannot tell which Python runs memd (sys.executable is empty)")
    argv = [os.path.abspath(sys.executable), "-P", "-m", "memd.cli", "serve",
            "--data-dir", str(settings.data_dir.absolute())]
    if settings.config_file is not None:
        argv += ["--config", str(settings.config_file.absolute())]
    if db_given and settings.db not in ("", "sqlite"):
        url = settings.db.startswith(("postgresql://", "postgres://"))
        argv += ["--db", settings.db if url else str(settings.db_path.absolute())]
    return argv


def _unit_word(word: str) -> str:
    """``word`` as one word of a unit file's ExecStart: specifiers (%) and variables ($)
    taken literally, quoted if it holds anything but plain path characters."""
    word = word.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[\w@%+=:,./-]+", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(argv: Sequence[str], env_file: Path) -> str:
    """The systemd user unit running ``argv``; ``env_file`` may hold KEY=value settings."""
    return f"""\
# memd, written by 'memd service install'; 'memd service uninstall' removes it.
[Unit]
Description=memd, a local-first memory daemon for AI assistants

[Service]
Type=simple
ExecStart={" ".join(_unit_word(w) for w in argv)}
# memd drains open requests on SIGTERM and exits 0; a streamed answer gets this long.
KillSignal=SIGTERM
TimeoutStopSec=30
Restart=on-failure
RestartSec=3
# Exit status 2 is bad input (a config error, a data dir another daemon serves):
# starting again would fail the same way.
RestartPreventExitStatus=2
EnvironmentFile=-{str(env_file).replace("%", "%%")}
Environment=PYTHONUNBUFFERED=1
NoNewPrivileges=true

[Install]
WantedBy=default.target
"""


def render_plist(argv: Sequence[str], log_dir: Path) -> bytes:
    """The launchd agent running ``argv``, again after a crash but not after a clean
    stop; what it prints goes to ``launchd.log`` in ``log_dir``."""
    return plistlib.dumps({
        "Label": LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "ProcessType": "Background",
        "EnvironmentVariables": {"PYTHONUNBUFFERED": "1"},
        "StandardOutPath": str(log_dir / "launchd.log"),
        "StandardErrorPath": str(log_dir / "launchd.log"),
    })


# -- the service managers ----------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    argv: list[str]
    fallback: list[str] | None = None  # run instead when launchctl lacks argv's subcommand
    may_fail: bool = False


class Manager(Protocol):
    kind: str  # what the file is, e.g. "systemd user unit"
    path: Path
    log: str  # where to read the daemon's log

    def render(self, argv: Sequence[str]) -> bytes: ...
    def prepare(self) -> str | None:
        """Why the manager cannot take the service now, or None when it answers (and
        what its file names exists)."""
    def start(self) -> list[Step]: ...
    def stop(self) -> list[Step]: ...
    def unhook(self) -> list[Step]:
        """Undo a failed start, before its file is removed."""
    def reload(self) -> list[Step]:
        """Make the manager see that the file changed or went."""
    def state(self) -> str: ...


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(argv, 1, "", str(exc))


def _said(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return text[0] if text else f"exit status {done.returncode}"


def _unknown_subcommand(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and bool(re.search(
        r"(?i)(unknown|unrecognized) (sub)?command", done.stdout + done.stderr))


class Systemd:
    kind = "systemd user unit"
    log = "journalctl --user -u memd"

    def __init__(self) -> None:
        self.path = platformdirs.user_config_path() / "systemd" / "user" / UNIT

    def render(self, argv: Sequence[str]) -> bytes:
        env_file = platformdirs.user_config_path(APP) / "memd.env"
        return render_unit(argv, env_file).encode()

    def prepare(self) -> str | None:
        if shutil.which("systemctl") is None:
            return "there is no systemctl: this system does not run systemd"
        done = _run(["systemctl", "--user", "show", "--property=Version"])
        if done.returncode != 0:
            return f"systemd's user instance does not answer (systemctl --user: {_said(done)})"
        return None

    def start(self) -> list[Step]:
        # enable + restart rather than enable --now: a reinstall restarts the daemon on
        # its new command line, where --now would leave the old one running.
        return [Step(["systemctl", "--user", "daemon-reload"]),
                Step(["systemctl", "--user", "enable", UNIT]),
                Step(["systemctl", "--user", "restart", UNIT])]

    def stop(self) -> list[Step]:
        return [Step(["systemctl", "--user", "disable", "--now", UNIT])]

    def unhook(self) -> list[Step]:
        return [Step(["systemctl", "--user", "disable", UNIT], may_fail=True)]

    def reload(self) -> list[Step]:
        return [Step(["systemctl", "--user", "daemon-reload"], may_fail=True)]

    def state(self) -> str:
        if shutil.which("systemctl") is None:
            return "no systemctl on this system"
        done = _run(["systemctl", "--user", "is-active", UNIT])
        return done.stdout.strip() or f"unknown (systemctl --user: {_said(done)})"


class Launchd:
    kind = "launchd agent"

    def __init__(self) -> None:
        self.path = Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        self.log = str(default_log_file())
        self.domain = f"gui/{os.getuid()}"

    def render(self, argv: Sequence[str]) -> bytes:
        return render_plist(argv, default_log_file().parent)

    def prepare(self) -> str | None:
        if shutil.which("launchctl") is None:
            return "there is no launchctl: this system does not run launchd"
        done = _run(["launchctl", "print", self.domain])
        if _unknown_subcommand(done):
            done = _run(["launchctl", "list"])
        if done.returncode != 0:
            return f"launchd has no {self.domain} session here (launchctl: {_said(done)})"
        # launchd opens StandardErrorPath but does not create its folder.
        private_dir(default_log_file().parent, tighten=False)
        return None

    def start(self) -> list[Step]:
        plist = str(self.path)
        return [Step(["launchctl", "bootout", f"{self.domain}/{LABEL}"],
                     ["launchctl", "unload", plist], may_fail=True),  # a reinstall
                Step(["launchctl", "bootstrap", self.domain, plist],
                     ["launchctl", "load", "-w", plist])]

    def stop(self) -> list[Step]:
        return [Step(["launchctl", "bootout", f"{self.domain}/{LABEL}"],
                     ["launchctl", "unload", "-w", str(self.path)], may_fail=True)]

    def unhook(self) -> list[Step]:
        return []

    def reload(self) -> list[Step]:
        return []

    def state(self) -> str:
        if shutil.which("launchctl") is None:
            return "no launchctl on this system"
        done = _run(["launchctl", "print", f"{self.domain}/{LABEL}"])
        if _unknown_subcommand(done):
            done = _run(["launchctl", "list", LABEL])
            return "loaded" if done.returncode == 0 else "not loaded"
        found = re.search(r"^\s*state = (\S+)", done.stdout, re.MULTILINE)
        return "not loaded" if done.returncode != 0 else found[1] if found else "loaded"


def manager() -> Manager:
    """launchd on macOS, else systemd (whether it runs is for ``prepare`` to tell)."""
    return Launchd() if sys.platform == "darwin" else Systemd()


def _perform(steps: Sequence[Step]) -> None:
    """Run ``steps`` in order, telling each; the first failure (unless allowed) raises."""
    for step in steps:
        done = _run(step.argv)
        if step.fallback is not None and _unknown_subcommand(done):
            done = _run(step.fallback)
        if done.returncode == 0:
            click.echo(f"ran {shlex.join(done.args)}")
        elif not step.may_fail:
            raise MemdError(f"'{shlex.join(done.args)}' failed: {_said(done)}")


def _quietly(steps: Sequence[Step]) -> None:
    for step in steps:
        _run(step.argv)


# -- the commands ------------------------------------------------------------------------
@main.group()
def service() -> None:
    """Run memd in the background from login: a systemd user unit or a launchd agent."""


@service.command()
@click.option("--dry-run", is_flag=True,
              help="Print the file and the commands instead; change nothing.")
@click.pass_context
@handles_errors
def install(ctx: click.Context, dry_run: bool) -> None:
    """Install and start memd as a service that starts again at every login.

    Writes a systemd user unit (Linux) or launchd agent (macOS) running 'memd serve' on
    this data dir and config file, then has the service manager start it. Other
    settings go in the config file (memd reads it again at each start).

    \b
    Example:
      memd service install --data-dir ~/memd-data --dry-run
    """
    mgr = manager()
    opts = ctx.obj or {}
    settings = settings_for(ctx)
    argv = serve_command(settings, db_given=bool(opts.get("db") or os.environ.get("MEMD_DB")))
    content = mgr.render(argv)
    if dry_run:
        click.echo(f"would write {mgr.path}:\n")
        click.echo(content.decode())
        click.echo("would run:")
        for step in mgr.start():
            click.echo(f"  {shlex.join(step.argv)}")
        return
    problem = mgr.prepare()
    if problem is not None:
        raise MemdError(f"cannot install the memd service: {problem}. Nothing was "
                        "written. Start 'memd serve' from your own init or session "
                        "instead, or get the file with 'memd service install --dry-run'.")
    before = mgr.path.read_bytes() if mgr.path.exists() else None
    from memd.server.discovery import find_daemon

    # Whatever store it serves: one daemon per data dir.
    running = find_daemon(settings.data_dir) if before is None else None
    if running is not None:
        running.close()
        raise InvalidInput(f"a memd daemon already serves {settings.data_dir} at "
                           f"{running.base_url}: stop it first (the service would be "
                           "refused that data dir)")
    try:
        mgr.path.parent.mkdir(parents=True, exist_ok=True)
        write_private(mgr.path, content)  # its command line may name a database password
    except OSError as exc:
        if before is None:
            mgr.path.unlink(missing_ok=True)
        raise MemdError(f"cannot write {mgr.path}: {exc}") from exc
    click.echo(f"wrote {mgr.path}")
    try:
        _perform(mgr.start())
    except MemdError as exc:
        _quietly(mgr.unhook())
        if before is None:
            mgr.path.unlink(missing_ok=True)
            undone = f"{mgr.path} was removed again"
        else:
            write_private(mgr.path, before)
            undone = f"the earlier {mgr.path} was put back"
        _quietly(mgr.reload())
        raise MemdError(f"cannot start the memd service: {exc}; {undone}") from exc
    for name in sorted(n for n in os.environ if n.startswith("MEMD_") and n not in _PASSED_ON):
        click.echo(f"note: the service does not see {name} from this shell; put the "
                   "setting in the config file", err=True)
    click.echo(f"memd runs as a service; check it with 'memd service status', read its "
               f"log with: {mgr.log}")


@service.command()
@handles_errors
def uninstall() -> None:
    """Stop the memd service and remove its unit file or launchd agent.

    \b
    Example:
      memd service uninstall
    """
    mgr = manager()
    if not mgr.path.exists():
        click.echo(f"memd is not installed as a service (no {mgr.path})")
        return
    try:
        _perform(mgr.stop())
    except MemdError as exc:
        raise MemdError(f"{exc}; {mgr.path} stays (delete it by hand if no service "
                        "manager runs it)") from exc
    mgr.path.unlink()
    click.echo(f"removed {mgr.path}")
    _perform(mgr.reload())


@service.command(name="status")
@click.pass_context
@handles_errors
def service_status(ctx: click.Context) -> None:
    """Say whether memd is installed as a service, what the service manager reports of
    it, and whether a daemon answers for the data dir.

    \b
    Example:
      memd service status --data-dir ~/memd-data
    """
    mgr = manager()
    installed = mgr.path.exists()
    click.echo(f"service:  {mgr.kind} {mgr.path}" if installed
               else f"service:  not installed (no {mgr.path})")
    click.echo(f"manager:  {mgr.state()}")
    from memd.server.discovery import find_daemon

    daemon = find_daemon(settings_for(ctx).data_dir)
    if daemon is None:
        click.echo(f"daemon:   none answers for {settings_for(ctx).data_dir}")
    else:
        with daemon:
            click.echo(f"daemon:   answers at {daemon.base_url}")
    click.echo(f"log:      {mgr.log}")
