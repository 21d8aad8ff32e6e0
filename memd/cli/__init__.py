"""The ``memd`` command.

When a daemon serves the same data dir (``memd serve`` leaves ``daemon.json`` there),
add, search, list and forget go through its HTTP API: no model to load, one writer.
Otherwise they open the data dir directly (SQLite in WAL mode, safe beside a daemon that
is starting or stopping). Errors print ``error: ...`` on stderr and exit 2 for bad input
or an unknown id, 1 for anything else.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from memd.errors import InvalidInput, MemdError, NotFound

if TYPE_CHECKING:
    from memd.migrate.run import Advance

F = TypeVar("F", bound=Callable[..., Any])


def fail(exc: MemdError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2 if isinstance(exc, InvalidInput | NotFound) else 1)


def handles_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemdError as exc:
            fail(exc)

    return wrapper  # type: ignore[return-value]


def open_engine(ctx: click.Context) -> Any:
    import memd

    opts = ctx.obj or {}
    return memd.open(opts.get("data_dir"), config=opts.get("config"), db=opts.get("db"))


def daemon_for(ctx: click.Context) -> Any:
    """An HTTP client for the daemon serving this data dir, or None."""
    from memd.server.discovery import find_daemon

    return find_daemon(settings_for(ctx).data_dir)


def daemon_call(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    """A daemon call; its JSON errors become the same memd errors a direct call raises."""
    from memd.errors import StorageError

    resp = client.request(method, path, **kwargs)
    if resp.is_success:
        return resp.json()
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text
    if resp.status_code == 404:
        raise NotFound(message)
    if resp.status_code == 401:
        raise InvalidInput(f"{message} (the CLI sends the key in MEMD_API_KEY)")
    if resp.status_code < 500:
        raise InvalidInput(message)
    raise StorageError(f"daemon error {resp.status_code}: {message}")


DB_HELP = ("The store: 'sqlite' (memd.db in the data dir, the default), a path to a .db "
           "file, or a postgresql:// URL (env MEMD_DB).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memd")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MEMD_DATA_DIR", help="Where memd keeps its data (env MEMD_DATA_DIR).")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
              envvar="MEMD_CONFIG", help="TOML config file (env MEMD_CONFIG).")
@click.option("--db", help=DB_HELP)
@click.pass_context
def main(ctx: click.Context, data_dir: Path | None, config: Path | None,
         db: str | None) -> None:
    """memd: a local-first memory daemon for AI assistants."""
    ctx.obj = {"data_dir": data_dir, "config": config, "db": db}


def settings_for(ctx: click.Context) -> Any:
    from memd.config import load_settings

    opts = ctx.obj or {}
    return load_settings(opts.get("config"), data_dir=opts.get("data_dir"), db=opts.get("db"))


def store_place(settings: Any) -> tuple[bool, str]:
    """Whether the store is a SQLite file, and where it is, as told to a user (a
    PostgreSQL URL without its password)."""
    from memd.privacy.urls import redact_dsn
    from memd.registry import store_class, store_for

    if store_for(settings.db) is store_class("sqlite"):
        return True, str(settings.db_path)
    return False, redact_dsn(settings.db)


@contextmanager
def progressbar(label: str, total: int) -> Iterator[Advance]:
    """A progress bar on stderr (stdout stays clean for --json): rows done of ``total``,
    and beside it what is being done (a table), when the caller names it."""
    with click.progressbar(length=max(total, 1), label=f"{label:<10}", file=sys.stderr,
                           show_pos=True, item_show_func=lambda item: item) as bar:
        def advance(n: int, item: str | None = None) -> None:
            bar.update(n, item)

        yield advance


# The commands, registered on ``main`` by importing their modules.
from memd.cli import admin, daemon, doctor, jobs, memories, service, storage  # noqa: E402, F401
from memd.cli import config as config_commands  # noqa: E402, F401  (main has a config option)
from memd.cli import encryption as encryption_commands  # noqa: E402, F401
from memd.cli import transfer as transfer_commands  # noqa: E402, F401  (export, import)


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
