"""How a memd error becomes an HTTP reply: its status, its public message and, for a
store out of reach, ``Retry-After``.

One function for every place a request can fail: the app's exception handler and the
middlewares that run before it (the API key check of team mode reads the store, and a
store that is down there must answer as it would inside a route: a JSON 503, not the
server's plain-text 500).
"""

from __future__ import annotations

import logging
from typing import Any

from memd.engine.validate import clean_chars
from memd.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemdError,
    NotFound,
    StorageError,
    StoreUnavailable,
    TooLarge,
    Unauthorized,
)

log = logging.getLogger("memd.server")

RETRY_AFTER_SECONDS = 5  # what a 503 for a store out of reach tells a client to wait


# The HTTP status of each memd error, most specific first (TooLarge is an InvalidInput).
_STATUSES: tuple[tuple[type[MemdError], int], ...] = (
    (TooLarge, 413), (InvalidInput, 400), (NotFound, 404), (Conflict, 409),
    (Unauthorized, 401), (Forbidden, 403), (StoreUnavailable, 503),
)


def status_for(exc: MemdError) -> int:
    return next((status for kind, status in _STATUSES if isinstance(exc, kind)), 500)


# What a client is told instead of a driver's own words (SQL, constraint and table
# names), which stay in the daemon's log.
_DRIVER_WORDS: tuple[tuple[type[MemdError], str], ...] = (
    (Conflict, "this write conflicts with stored data: an id in it is already in use"),
    (InvalidInput, "the store cannot hold a value in this request"),
    (StoreUnavailable, "the store cannot be reached for now; try again shortly"),
    (StorageError, "the store failed; the daemon's log has the details"),
)

_DRIVERS = frozenset({"apsw", "psycopg", "psycopg_pool", "sqlite3"})


def public_message(exc: MemdError) -> str:
    """``exc``'s message for a client: a message that quotes the database driver error
    it was translated from is replaced by a plain one."""
    message = str(exc)
    cause = exc.__cause__
    driver = type(cause).__module__.partition(".")[0] in _DRIVERS
    if cause is None or not driver or str(cause) not in message:
        return clean_chars(message)
    log.warning("%s (told the client less)", message)
    return next((text for kind, text in _DRIVER_WORDS if isinstance(exc, kind)),
                "the request failed")


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """memd's error shape: ``{"error": {"type": ..., "message": ...}}``."""
    return {"error": {"type": kind, "message": message, **extra}}


def reply_for(exc: MemdError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, JSON body and headers that answer a request ``exc`` ended; a store
    out of reach or a server-side failure is logged here."""
    status = status_for(exc)
    headers = {}
    if status == 503:
        log.warning("the store is out of reach: %s", exc)
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    elif status >= 500:
        log.error("internal error: %s", exc)
    return status, error_body(exc.type, public_message(exc)), headers
