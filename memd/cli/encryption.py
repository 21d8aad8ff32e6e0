"""Encryption at rest: ``memd encrypt`` (see :mod:`memd.keys` and
:mod:`memd.backends.sqlite.cipher`)."""

from __future__ import annotations

import secrets

import click

from memd.cli.common import daemon_for, handles_errors, main, settings_for
from memd.errors import InvalidInput


@main.command()
@click.option("--key-from", type=click.Choice(["env", "keyring"]),
              help="Where the key comes from: 'env' (MEMD_DB_KEY, which must be set) or "
                   "'keyring' (a new random key, stored in the OS keyring). Default: the "
                   "configured encryption setting, else 'env'.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@handles_errors
def encrypt(ctx: click.Context, key_from: str | None, yes: bool) -> None:
    """Encrypt the SQLite store in place, for encryption at rest. Stop the daemon
    first. Afterwards memd opens the store only with `encryption` set to the same
    source (config file, or env MEMD_ENCRYPTION) and the key there: a lost key cannot be
    recovered, and neither can the store."""
    from memd.backends.sqlite import encrypt, is_encrypted
    from memd.keys import KEY_ENV, env_key, store_key
    from memd.server.discovery import store_place

    settings = settings_for(ctx)
    place = store_place(settings)
    if place.backend != "SQLite":
        raise InvalidInput(f"the store is {place.backend} ({place.shown}): encrypt its "
                           "data with the server's or the disk's encryption")
    path = settings.db_path
    mode = key_from or (settings.encryption if settings.encryption != "off" else "env")
    state = is_encrypted(path)
    if state:
        raise InvalidInput(f"{path} is encrypted already")
    if state is not None and daemon_for(ctx) is not None:
        raise InvalidInput(f"a memd daemon is serving {path}: stop it first")
    key = env_key(path) if mode == "env" else secrets.token_urlsafe(32)
    told = f"{KEY_ENV}" if mode == "env" else "the OS keyring"
    use = (f'set encryption = "{mode}" in the config file (or MEMD_ENCRYPTION={mode})'
           + (f" and keep {KEY_ENV} set" if mode == "env" else ""))
    if state is None:
        if mode == "keyring":
            store_key(path, key)
            click.echo(f"stored a new key for {path} in the OS keyring", err=True)
        click.echo(f"no store at {path} yet: memd creates it encrypted once you {use}")
        return
    if not yes:
        click.confirm(f"Encrypt {path} in place with the key from {told}? Without that key "
                      "nothing in it can be read again", abort=True)
    if mode == "keyring":
        store_key(path, key)
        click.echo(f"stored a new key for {path} in the OS keyring", err=True)
    encrypt(str(path), key)
    click.echo(f"encrypted {path}; from now on {use}")
