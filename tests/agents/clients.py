"""How to run each agent CLI headless against an OpenAI-compatible base URL.

Every run gets a temporary HOME (and XDG dirs inside it) holding the client's own
configuration, with telemetry, update checks and model-list downloads turned off, so a
run reads nothing of the developer's setup and needs no network beyond the base URL. A
new process is a new conversation for all four clients. All four stream their chat
requests whatever they are configured to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL = "scripted-model"
API_KEY = "sk-agent-test"


@dataclass(frozen=True)
class Client:
    """One agent CLI: ``configure(home, base_url)`` writes its settings, ``command(bin,
    home, base_url, prompt)`` is the argv and extra environment of one run; ``read_tool``
    is its file-reading tool and ``read_args(path)`` that tool's arguments."""

    name: str
    read_tool: str
    read_args: Callable[[str], dict[str, Any]]
    configure: Callable[[Path, str], None]
    command: Callable[[Path, Path, str, str], tuple[list[str], dict[str, str]]]


def _opencode_config(home: Path, base: str) -> None:
    (home / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "autoupdate": False,
        "share": "disabled", "model": f"memd/{MODEL}",
        "provider": {"memd": {"npm": "@ai-sdk/openai-compatible", "name": "memd",
                              "options": {"baseURL": base, "apiKey": API_KEY},
                              "models": {MODEL: {"name": MODEL}}}},
    }))


def _opencode(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    env = {"OPENCODE_CONFIG": str(home / "opencode.json"),
           **{f"OPENCODE_DISABLE_{x}": "1" for x in (
               "AUTOUPDATE", "MODELS_FETCH", "LSP_DOWNLOAD", "SHARE", "DEFAULT_PLUGINS")}}
    return [str(bin / "opencode"), "run", "--auto", prompt], env


def _qwen_config(home: Path, base: str) -> None:
    (home / ".qwen").mkdir(exist_ok=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "security": {"auth": {"selectedType": "openai"}}, "model": {"name": MODEL},
    }))


def _qwen(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    env = {"OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": base, "OPENAI_MODEL": MODEL}
    return [str(bin / "qwen"), "--auth-type", "openai", "--approval-mode", "yolo",
            "-m", MODEL, prompt], env


def _cline_config(home: Path, base: str) -> None:
    """What ``cline auth -p openai-compatible -k KEY -m MODEL -b URL`` writes."""
    settings = home / ".cline" / "data" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "providers.json").write_text(json.dumps({
        "version": 1, "lastUsedProvider": "openai-compatible", "modes": {},
        "providers": {"openai-compatible": {"settings": {
            "provider": "openai-compatible", "apiKey": API_KEY, "model": MODEL,
            "baseUrl": base}, "updatedAt": "2026-01-01T00:00:00.000Z",
            "tokenSource": "manual"}},
    }))


def _cline(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    return [str(bin / "cline"), "-t", "90", prompt], {}  # act mode, tools auto-approved


def _continue_config(home: Path, base: str) -> None:
    (home / "continue.yaml").write_text(
        "name: memd-test\nversion: 1.0.0\nschema: v1\nmodels:\n"
        f"  - name: {MODEL}\n    provider: openai\n    model: {MODEL}\n"
        f"    apiBase: {base}\n    apiKey: {API_KEY}\n"
        "    roles: [chat, edit, apply, summarize]\n")


def _continue(bin: Path, home: Path, base: str, prompt: str) -> tuple[list[str], dict[str, str]]:
    env = {"CONTINUE_GLOBAL_DIR": str(home / ".continue"),
           "CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0"}
    return [str(bin / "cn"), "--config", str(home / "continue.yaml"), "--auto", "-p",
            prompt], env


CLIENTS: tuple[Client, ...] = (
    Client("opencode", "read", lambda p: {"filePath": p}, _opencode_config, _opencode),
    Client("qwen-code", "read_file", lambda p: {"file_path": p}, _qwen_config, _qwen),
    Client("cline", "read_files", lambda p: {"files": [{"path": p}]}, _cline_config, _cline),
    Client("continue", "Read", lambda p: {"filepath": p}, _continue_config, _continue),
)


def run(client: Client, bin: Path, home: Path, workdir: Path, base: str,
        prompt: str) -> subprocess.CompletedProcess[str]:
    """One headless run of ``client`` in ``workdir`` with ``prompt``: a new conversation.
    The environment holds nothing but PATH and the client's own settings."""
    home.mkdir(parents=True, exist_ok=True)
    client.configure(home, base)
    argv, extra = client.command(bin, home, base, prompt)
    node = shutil.which("node")
    path = os.pathsep.join([*([os.path.dirname(node)] if node else []), "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local/share"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local/state"),
           **extra}
    try:
        return subprocess.run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=180)
    finally:
        end_leftovers(workdir)


def end_leftovers(workdir: Path) -> list[int]:
    """End what a run left behind in ``workdir`` (Cline starts a hub daemon there that
    outlives the command and would hold its port and memory after the tests); returns
    their pids. Linux only (/proc); elsewhere nothing is ended."""
    proc, mark, ended = Path("/proc"), str(workdir), []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            here = os.readlink(entry / "cwd") == mark
        except OSError:  # gone meanwhile, or another user's
            continue
        if here or mark in argv:
            try:
                os.kill(int(entry.name), signal.SIGTERM)
                ended.append(int(entry.name))
            except ProcessLookupError:
                pass
    return ended
