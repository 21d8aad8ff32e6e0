"""Who a request acts as, and API keys.

With authentication on (``auth = true`` in the config, or ``memd serve --auth``), every
HTTP request carries an API key (``Authorization: Bearer memd_...``, which is what an
OpenAI client sends as its api_key). The server resolves the key to its user and runs
the request under :func:`acting_as`, a context variable that the PostgreSQL backend reads
at the start of every transaction: it switches to the unprivileged ``memd_app`` role and
sets ``memd.user_id``, which Row-Level Security policies compare with each row's owner.

Keys are 32 random bytes (256 bits) in URL-safe base64 behind the ``memd_`` prefix. Only
their SHA-256 is stored: with that much entropy a slow password hash adds nothing, and a
lookup by hash stays one index probe.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

KEY_PREFIX = "memd_"

_actor: ContextVar[str | None] = ContextVar("memd_actor", default=None)


def current_actor() -> str | None:
    """The authenticated user the current request acts as; None outside one (local
    mode, the job worker, the CLI)."""
    return _actor.get()


@contextmanager
def acting_as(user_id: str | None) -> Iterator[None]:
    token = _actor.set(user_id)
    try:
        yield
    finally:
        _actor.reset(token)


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id_of(key_hash: str) -> str:
    """A key's public id: shown in listings, used to revoke it."""
    return "key_" + key_hash[:12]


def looks_like_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX) and 20 <= len(value) <= 200
