"""The key of an encrypted SQLite store: where it comes from, and keeping a new one.

The ``encryption`` setting says where the passphrase comes from:

* ``"env"``: the environment variable ``MEMD_DB_KEY``;
* ``"keyring"``: the OS keyring (the ``keyring`` package), service ``memd``, user name the
  database file's absolute path, so each file has a key of its own. ``memd encrypt
  --key-from keyring`` makes one and stores it there.

The key is never a setting: no config file, listing or log line holds it. This module
needs no database driver, so the CLI and ``memd doctor`` find a key without reaching
into the backend; :mod:`memd.backends.sqlite.cipher` opens and encrypts the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from memd.errors import InvalidInput, StorageError

KEY_ENV = "MEMD_DB_KEY"
KEYRING_SERVICE = "memd"
T = TypeVar("T")


def keyring_user(path: str | os.PathLike[str]) -> str:
    """The keyring user name a database file's key is stored under."""
    return str(Path(path).resolve())


def key_for(mode: str, path: str | os.PathLike[str]) -> str | None:
    """The key of the database at ``path`` under ``encryption = mode`` (None when off).
    Raises StorageError when the mode's source has no key."""
    if mode == "off":
        return None
    if mode == "env":
        return env_key(path)
    if mode == "keyring":
        # keyring.get_password is documented to return the password or None
        key: str | None = _keyring(
            lambda k: k.get_password(KEYRING_SERVICE, keyring_user(path)))
        if not key:
            raise StorageError(f"the OS keyring holds no key for {path} (service "
                               f"{KEYRING_SERVICE!r}): `memd encrypt --key-from keyring` "
                               "stores one")
        return key
    raise InvalidInput(f"encryption must be off, env or keyring, not {mode!r}")


def env_key(path: str | os.PathLike[str]) -> str:
    """The key in ``MEMD_DB_KEY``; StorageError when it is not set."""
    key = os.environ.get(KEY_ENV)
    if not key:
        raise StorageError(f'encryption is "env" but {KEY_ENV} is not set: set it to the '
                           f"key of {path}")
    return key


def store_key(path: str | os.PathLike[str], key: str) -> None:
    """Keep ``key`` in the OS keyring as the key of the database at ``path``, checked by
    reading it back (a key that is lost leaves the file unreadable)."""
    user = keyring_user(path)
    _keyring(lambda k: k.set_password(KEYRING_SERVICE, user, key))
    if _keyring(lambda k: k.get_password(KEYRING_SERVICE, user)) != key:
        raise StorageError("the OS keyring did not keep the key: nothing was encrypted")


def _keyring(call: Callable[[ModuleType], T]) -> T:
    """``call(keyring)``, the package's absence and its errors as StorageError."""
    try:
        import keyring
        from keyring.errors import KeyringError
    except ImportError:
        raise StorageError('encryption = "keyring" needs the keyring package: '
                           "pip install 'memd[keyring]'") from None
    try:
        return call(keyring)
    except KeyringError as exc:
        raise StorageError(f"the OS keyring failed: {exc}") from exc
