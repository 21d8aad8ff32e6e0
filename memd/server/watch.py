"""Files the daemon watches while it runs: its config file and the notes folder.

Each is watched by a :class:`memd.watching.FileWatcher`; each group of changes triggers
one full re-read: the file or folder is read again whole and compared with what the
daemon holds, so a coalesced event never leaves the daemon out of step.

**Live config.** The config file is loaded again with the precedence the daemon started
with (its environment and ``memd serve`` flags still win over the file). A key the
running daemon reads afresh on every call (:data:`LIVE_KEYS`) is applied by swapping in a
new :class:`~memd.config.Settings` object, one reference for the engine and one for the
server, so a call sees the old or the new settings whole; the upstream client and the
window resolver, built from settings, are dropped and rebuilt by the next call. Any other
changed key is logged as needing a restart and keeps its running value. A file that does
not load (bad TOML, an unknown key, a bad value) changes nothing, and the log says why.
The last outcome is in ``GET /health`` under ``config``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from memd.config import Settings
from memd.errors import MemdError
from memd.watching import FileWatcher

log = logging.getLogger("memd.watch")

# Settings read afresh on every call: retrieval (weights, preset, similarity floors),
# the memory budgets and context windows, the upstream (URL, key, timeouts) and prices.
LIVE_KEYS = frozenset({
    "preset", "weights", "min_similarity", "sure_similarity", "recall_min_similarity",
    "recall_keyword", "known_words", "recall_answer_floor", "recall_question_floor",
    "memory_recall", "memory_max_tokens", "memory_window_share", "instruction_share",
    "memory_unknown_window_tokens", "memory_placement", "default_context_window",
    "default_max_response_tokens", "context_windows", "context_window", "upstream_url",
    "upstream_anthropic_url", "upstream_ollama_url", "upstream_api_key", "upstream_timeout",
    "upstream_probe_timeout",
    "prices", "virtualize", "virtualize_workspaces", "virtual_zones", "search_second_round",
    "search_expand_kinds", "search_time_cues", "search_passages", "search_message_freshness",
    "search_keyword_agreement", "search_head_coverage", "search_diversity",
    "search_second_hop", "search_repeats_last", "search_questions_lower",
})
UPSTREAM_KEYS = frozenset({"upstream_url", "upstream_anthropic_url", "upstream_ollama_url",
                           "upstream_api_key", "upstream_timeout"})
WINDOW_KEYS = UPSTREAM_KEYS | {"context_windows", "context_window", "upstream_probe_timeout"}
_SECRET_KEYS = frozenset({"upstream_api_key", "helper_api_key", "sanitize_patterns"})
_URL_KEYS = frozenset({"upstream_url", "upstream_anthropic_url", "upstream_ollama_url",
                       "helper_url", "db"})

@dataclass(frozen=True)
class ConfigSource:
    """The config file the daemon was started with, and how to load its settings again
    (with the environment and the flags it was started with)."""

    path: Path
    load: Callable[[], Settings]


def shown(name: str, value: Any) -> str:
    """A setting's value as a log line may show it: never a key, a URL without its
    credentials."""
    from memd.privacy.urls import redact_url

    if value is None:
        return "(none)"
    if name in _SECRET_KEYS:
        return "***"
    if name in _URL_KEYS and isinstance(value, str):
        return redact_url(value) if "://" in value or "=" in value else value
    return repr(value)


class LiveConfig:
    """Applies the config file's changes to a running app (see the module docstring)."""

    def __init__(self, app: Any, source: ConfigSource) -> None:
        self.app = app
        self.source = source
        self.status: dict[str, Any] = {"file": str(source.path), "reloaded_at": None,
                                       "applied": [], "needs_restart": [], "error": None}
        app.state.config_status = self.status

    def watcher(self) -> FileWatcher:
        name = self.source.path.name
        return FileWatcher("config", self.source.path.parent,
                           lambda path: path.name == name, self.reload)

    def reload(self) -> None:
        """Load the file again and apply what changed."""
        try:
            fresh = self.source.load()
        except (MemdError, OSError) as exc:
            log.error("config: %s; keeping the current settings", exc)
            self._report(error=str(exc))
            return
        engine = self.app.state.engine
        current: Settings = self.app.state.settings
        changed = [f.name for f in fields(Settings) if f.name != "config_file"
                   and getattr(fresh, f.name) != getattr(current, f.name)]
        live = {name: getattr(fresh, name) for name in changed if name in LIVE_KEYS}
        restart = [name for name in changed if name not in LIVE_KEYS]
        if live:
            # one reference each: a call reads the old settings or the new ones whole
            engine.settings = replace(engine.settings, **live)
            self.app.state.settings = replace(current, **live)
            self._rebuild(live.keys())
        for name in changed:
            what = "applied" if name in live else "needs a restart"
            log.info("config: %s %s -> %s (%s)", name, shown(name, getattr(current, name)),
                     shown(name, getattr(fresh, name)), what)
        self._report(applied=sorted(live), needs_restart=restart)

    def _rebuild(self, names: Any) -> None:
        from memd.server.upstream import retire_upstream

        names = set(names)
        if names & UPSTREAM_KEYS:
            retire_upstream(self.app)
        elif names & WINDOW_KEYS:
            self.app.state.windows = None
        if names & {"weights", "preset", "min_similarity", "sure_similarity",
                    "recall_min_similarity", "known_words", "recall_answer_floor",
                    "recall_question_floor", "memory_recall", "recall_keyword",
                    "memory_placement", "instruction_share"}:
            # blocks sent before were chosen by the old rules; choose again
            self.app.state.engine.blocks.clear()

    def _report(self, *, applied: list[str] | None = None,
                needs_restart: list[str] | None = None, error: str | None = None) -> None:
        status = dict(self.status, reloaded_at=time.time(), error=error)
        if error is None:
            status.update(applied=applied or [], needs_restart=needs_restart or [])
        self.status = self.app.state.config_status = status
