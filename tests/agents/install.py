"""The pinned agent CLIs, installed once with npm into a cache outside the repository
(``$MEMD_AGENTS_CACHE``, else ``~/.cache/memd/agents``).

Versions are pinned because each release changes prompts, tools and side requests, which
is what the tests look at; each pin is the newest release that runs on Node 20 (qwen-code
0.21 and later require Node 22). opencode and cline ship Bun binaries in per-platform
optional dependencies, so npm's refusal to run install scripts costs nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

PINS: dict[str, str] = {
    "opencode-ai": "1.18.33",
    "@qwen-code/qwen-code": "0.15.10",
    "cline": "3.0.65",
    "@continuedev/cli": "1.5.47",
    "@anthropic-ai/claude-code": "2.1.197",
    "@openai/codex": "0.171.0",
}


#: A real MCP client: the MCP Inspector's CLI mode. 0.21.0 is its newest release that
#: runs on Node 20 (later ones require Node 22).
INSPECTOR: dict[str, str] = {"@modelcontextprotocol/inspector": "0.21.0"}


def cache_dir() -> Path:
    return Path(os.environ.get("MEMD_AGENTS_CACHE")
                or Path.home() / ".cache" / "memd" / "agents")


def _installed(root: Path, pins: dict[str, str]) -> bool:
    for name, version in pins.items():
        manifest = root / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text())["version"] != version:
            return False
    return True


def _ensure(root: Path, pins: dict[str, str]) -> Path:
    """``root``'s ``node_modules/.bin``, with ``pins`` installed there first when it lacks
    one (this needs ``npm`` and the npm registry, nothing else)."""
    if not _installed(root, pins):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed to install the agent CLIs the tests drive")
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--prefix", str(root), "--no-audit", "--no-fund",
                        "--loglevel=error", *(f"{n}@{v}" for n, v in pins.items())],
                       check=True, capture_output=True, text=True, timeout=900)
        if not _installed(root, pins):
            raise RuntimeError(f"npm install into {root} did not install {pins}")
    return root / "node_modules" / ".bin"


def ensure_installed() -> Path:
    """The ``node_modules/.bin`` directory holding the pinned agent CLIs."""
    return _ensure(cache_dir(), PINS)


def ensure_inspector() -> Path:
    """The ``mcp-inspector`` command, from its own cache beside the agents'."""
    return _ensure(cache_dir().with_name("mcp-inspector"), INSPECTOR) / "mcp-inspector"
