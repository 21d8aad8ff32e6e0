"""The ``memd`` command.

When a daemon serves the same data dir (``memd serve`` leaves ``daemon.json`` there) and
the store the command names, add, search, list, facts and forget go through its HTTP API:
no model to load, one writer. A command that names no store (no ``--db``, ``MEMD_DB`` or
``db`` in the config file) means the daemon's. A command that names another store opens
that store itself (SQLite in WAL mode, safe beside a daemon), and so does every command
when no daemon runs. A command that can only open a store itself (accounts, export) and
names none while the daemon serves another store than the default is refused: it would
otherwise write where the daemon never looks.

The acting user is ``--user``, else the user of the key in ``MEMD_API_KEY`` (through
the daemon, which knows it; on a store opened directly, looked up there), else the
configured default user. Errors print ``error: ...`` on stderr and exit 2 for bad input
or an unknown id, 1 for anything else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

# The commands, registered on ``main`` by importing their modules.
from memd.cli import (  # noqa: F401
    activity,  # noqa: F401  (sessions, usage, pause, resume)
    admin,
    daemon,
    doctor,
    jobs,
    mcp_stdio,
    memories,
    service,
    storage,
)
from memd.cli import config as config_commands  # noqa: F401  (main has a config option)
from memd.cli import encryption as encryption_commands  # noqa: F401
from memd.cli import history as history_commands  # noqa: F401  (import-history)
from memd.cli import inspector as inspector_commands  # noqa: F401  (ui)
from memd.cli import transfer as transfer_commands  # noqa: F401  (export, import)
from memd.cli.common import DB_HELP, handles_errors, main

__all__ = ["handles_errors", "main"]


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None:  # a subcommand's option wins over the group's
        ctx.ensure_object(dict)[param.name or ""] = value


def _where_options(with_db: bool) -> list[click.Option]:
    options = [
        click.Option(["--data-dir"], type=click.Path(file_okay=False, path_type=Path),
                     expose_value=False, callback=_remember,
                     help="Where memd keeps its data (as before the command)."),
        click.Option(["--config"], type=click.Path(dir_okay=False, path_type=Path),
                     expose_value=False, callback=_remember,
                     help="TOML config file (as before the command)."),
    ]
    if with_db:
        options.append(click.Option(["--db"], expose_value=False, callback=_remember,
                                    help=DB_HELP))
    return options


def _on_every_command(group: click.Group, with_db: bool = True) -> None:
    """``--data-dir``, ``--config`` and ``--db`` after a subcommand as well as before it:
    ``memd serve --data-dir X`` as every guide writes it. Not ``--db`` where it means
    nothing (moving and hosting the store name their databases themselves)."""
    for name, command in group.commands.items():
        db = with_db and name not in ("migrate", "postgres")
        if isinstance(command, click.Group):
            _on_every_command(command, db)
            continue
        taken = {o for p in command.params for o in p.opts}
        command.params += [o for o in _where_options(db) if not set(o.opts) & taken]


_on_every_command(main)
