"""``memd config``: the effective settings and where each came from.

What it prints may be pasted into a bug report, so secrets never appear: a setting named
like a key, password, token or secret shows ``***`` when set, and a URL or database DSN is
shown without its user name and password (``memd.privacy.urls``).
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from memd.cli.common import handles_errors, main

if TYPE_CHECKING:
    from memd.config import Settings

_SECRET_WORDS = {"key", "password", "passwd", "secret", "token", "credentials"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _flags(ctx: click.Context) -> dict[str, Any]:
    """``--data-dir``, ``--config`` and ``--db`` as given on the command line, before the
    command or after it. A value click took from the environment for the group is left
    out: load_settings reads that variable itself and reports it as such."""
    out: dict[str, Any] = {}
    opts = ctx.obj or {}
    for name in ("data_dir", "config", "db"):
        c: click.Context | None = ctx
        while c is not None:
            if c.get_parameter_source(name) is ParameterSource.COMMANDLINE:
                out[name] = opts.get(name)
                break
            c = c.parent
    return out


def _shown(name: str, value: Any) -> Any:
    """``value`` as it may be shown: secrets masked, URLs without credentials."""
    if value is None:
        return None
    if _SECRET_WORDS & set(name.lower().split("_")):
        return "***"
    if isinstance(value, str) and (name.endswith("_url") or name == "db") and (
            "://" in value or "=" in value):
        from memd.privacy.urls import redact_url

        try:
            return redact_url(value)
        except ImportError:  # a PostgreSQL DSN without psycopg installed
            return "(a PostgreSQL database)"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _entries(settings: Settings, sources: dict[str, str]) -> list[tuple[str, Any, str]]:
    """(name, value as shown, source) of every setting, the keys of the weights and
    maintenance tables as ``weights.similarity``; tables of names (context windows,
    prices, custom patterns) stay one value, a dict."""
    out = []
    for f in fields(settings):
        value = getattr(settings, f.name)
        if is_dataclass(value):
            for sub in fields(value):
                key = f"{f.name}.{sub.name}"
                out.append((key, _shown(sub.name, getattr(value, sub.name)), sources[key]))
        elif f.name == "sanitize_patterns":
            out.append((f.name, {p.name: p.regex for p in value}, sources[f.name]))
        else:
            out.append((f.name, _shown(f.name, value), sources[f.name]))
    return out


def _toml(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _aligned(lines: list[tuple[str, str]]) -> list[str]:
    width = min(max((len(text) for text, _ in lines), default=0), 56)
    return [f"{text:<{width}}  # {source}" if source else text for text, source in lines]


def _text(entries: list[tuple[str, Any, str]]) -> list[tuple[str, str]]:
    top: list[tuple[str, str]] = []
    tables: dict[str, list[tuple[str, str]]] = {}
    for name, value, source in entries:
        if "." in name:
            table, key = name.split(".", 1)
            tables.setdefault(table, []).append((f"{key} = {_toml(value)}", source))
        elif isinstance(value, dict):
            tables[name] = [(f"{_toml_key(k)} = {_toml(v)}", "") for k, v in value.items()]
            tables[name].insert(0, ("", source if value else f"{source} (empty)"))
        else:
            top.append((f"{name} = {_toml(value)}", source))
    lines = top
    for table, rows in tables.items():
        lines.append(("", ""))
        if rows and rows[0][0] == "":  # a table of names: its source on the header
            lines.append((f"[{table}]", rows[0][1]))
            rows = rows[1:]
        else:
            lines.append((f"[{table}]", ""))
        lines.extend(rows)
    return lines


@main.group(name="config")
def config_group() -> None:
    """The settings memd runs with (defaults, config file, environment, flags)."""


@config_group.command(name="show")
@click.option("--json", "as_json", is_flag=True, help="As JSON: each value and its source.")
@click.pass_context
@handles_errors
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective settings and where each came from: default, file, env or
    flag. Secrets are masked and URLs shown without passwords."""
    from memd.config import config_path, load_settings_with_sources

    flags = _flags(ctx)
    config = flags.pop("config", None)
    settings, sources = load_settings_with_sources(config, **flags)
    path = config_path(config)
    entries = _entries(settings, sources)
    if as_json:
        click.echo(json.dumps({
            "config_file": str(path), "config_file_exists": settings.config_file is not None,
            "settings": {name: {"value": value, "source": source}
                         for name, value, source in entries},
        }, indent=2))
        return
    if settings.config_file is not None:
        click.echo(f"# config file: {path}")
    else:
        click.echo(f"# config file: none ({path} does not exist)")
    for line in _aligned(_text(entries)):
        click.echo(line.rstrip())


@config_group.command(name="path")
@click.pass_context
@handles_errors
def config_path_command(ctx: click.Context) -> None:
    """Print the path of the config file memd reads (it may not exist yet)."""
    from memd.config import config_path

    path = config_path(_flags(ctx).get("config"))
    click.echo(str(path))
    if not path.exists():
        click.echo("(it does not exist; memd runs on defaults and the environment)",
                   err=True)
