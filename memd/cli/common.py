"""What every ``memd`` command shares: the ``main`` group, the settings and the store a
command opens, the daemon it talks to, and how errors end it (see :mod:`memd.cli` for the
rules). The command modules import this one, and :mod:`memd.cli` imports them, so the
package has no import cycle.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from memd.errors import InvalidInput, MemdError, NotFound

if TYPE_CHECKING:
    import httpx

    from memd.config import Settings
    from memd.engine.memory import Memd
    from memd.migrate.run import Advance

F = TypeVar("F", bound=Callable[..., Any])
KEY_ENV = "MEMD_API_KEY"  # the key the CLI acts with (find_daemon sends it)


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
        except ModuleNotFoundError as exc:  # a module of an extra that is not installed
            from memd.extras import hint_for_module

            hint = hint_for_module(exc.name)
            if hint is None:
                raise
            fail(hint)

    return wrapper  # type: ignore[return-value]


def open_engine(ctx: click.Context) -> Memd:
    """The engine over the store this command names, opened here (see
    :func:`own_store_settings`)."""
    import memd

    return memd.open(settings=own_store_settings(ctx))


def own_store_settings(ctx: click.Context) -> Settings:
    """The settings of a command that opens its store itself; refused when it names no
    store and the daemon of the data dir serves another store than the default, which
    the user most likely meant."""
    from memd.server.discovery import find_daemon, served_store, store_place

    settings, named = _settings_named(ctx)
    if not named:
        served = served_store(settings.data_dir)
        if served is not None and served.key != store_place(settings).key:
            running = find_daemon(settings.data_dir)
            if running is not None:
                running.close()
                raise InvalidInput(
                    f"the daemon of {settings.data_dir} serves {served.backend} "
                    f"({served.shown}), and this command opens the store itself: name "
                    "that store with --db (or MEMD_DB), or the default one with --db sqlite")
    return settings


def daemon_for(ctx: click.Context) -> httpx.Client | None:
    """An HTTP client for the daemon of this data dir when it serves the store this
    command names (any store, when it names none), else None."""
    from memd.server.discovery import find_daemon, served_store, store_place

    settings, named = _settings_named(ctx)
    client = find_daemon(settings.data_dir)
    if client is None or not named:
        return client
    served = served_store(settings.data_dir)
    if served is not None and served.key == store_place(settings).key:
        return client
    client.close()
    return None


def daemon_user(ctx: click.Context, user_id: str | None) -> str | None:
    """The user to name in a daemon call: ``--user``; else none with a key in
    ``MEMD_API_KEY`` (the daemon acts as the key's user); else the default user."""
    if user_id or os.environ.get(KEY_ENV):
        return user_id
    return str(settings_for(ctx).default_user)


def store_user(engine: Memd, user_id: str | None) -> str:
    """The acting user on a store opened directly: ``--user``; else the user of the key
    in ``MEMD_API_KEY``, looked up in that store; else the default user."""
    if user_id:
        return user_id
    key = os.environ.get(KEY_ENV)
    if not key:
        return str(engine.settings.default_user)
    owner = engine.accounts.user_of_key(key)
    if owner is None:
        raise InvalidInput(f"{KEY_ENV} is not a live key of this store: give --user, or "
                           f"unset {KEY_ENV}")
    return str(owner)


def daemon_call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
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


def settings_for(ctx: click.Context) -> Settings:
    return _settings_named(ctx)[0]


def _settings_named(ctx: click.Context) -> tuple[Settings, bool]:
    """The settings, and whether they name a store (``--db``, ``MEMD_DB`` or the config
    file's ``db``) rather than fall back on the default."""
    from memd.config import load_settings_with_sources

    opts = ctx.obj or {}
    settings, sources = load_settings_with_sources(
        opts.get("config"), data_dir=opts.get("data_dir"), db=opts.get("db"))
    return settings, sources["db"] != "default"


@contextmanager
def progressbar(label: str, total: int) -> Iterator[Advance]:
    """A progress bar on stderr (stdout stays clean for --json): rows done of ``total``,
    and beside it what is being done (a table), when the caller names it. When stderr is
    no terminal (a log, a pipe), one line at the end says how many were done."""
    if not sys.stderr.isatty():
        done = 0

        def count(n: int, item: str | None = None) -> None:
            nonlocal done
            done += n

        yield count
        click.echo(f"{label}: {done:,} of {total:,}", err=True)
        return
    with click.progressbar(length=max(total, 1), label=f"{label:<10}", file=sys.stderr,
                           show_pos=True, item_show_func=lambda item: item) as bar:
        def advance(n: int, item: str | None = None) -> None:
            bar.update(n, item)

        yield advance
