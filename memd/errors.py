"""memd's exception tree. Driver errors are translated into these at the backend edge.

    MemdError
    ├── InvalidInput        bad input from a caller: empty or oversized text, bad id, bad role
    │   └── TooLarge        a message or body beyond its configured size limit
    ├── NotFound            an id that does not exist for this user
    ├── Conflict            a write that contradicts stored state (e.g. a duplicate id)
    ├── Unauthorized        auth is on and the request has no valid API key
    ├── Forbidden           the key's user asked to act as someone else
    ├── StorageError        the store failed (locked, corrupt, disk full, driver error)
    │   ├── StoreUnavailable  the store cannot be reached for now (server down, file locked)
    │   └── MigrationError  a schema migration failed or the schema is newer than this code
    ├── ModelError          an embedder or tokenizer could not be loaded or run
    └── MissingExtra        an optional part of memd (an extra) is not installed

The HTTP layer maps InvalidInput to 400/422, TooLarge to 413, NotFound to 404, Conflict to 409,
Unauthorized to 401, Forbidden to 403 and StoreUnavailable to 503 with Retry-After; the CLI
prints the message and exits 2 (bad input) or 1 (other failures).
"""

from __future__ import annotations


class MemdError(Exception):
    """Base class of every error memd raises on purpose."""

    type: str = "memd_error"


class InvalidInput(MemdError, ValueError):
    type = "invalid_request_error"


class TooLarge(InvalidInput):
    type = "request_too_large"


class NotFound(MemdError, LookupError):
    type = "not_found_error"


class Conflict(MemdError):
    type = "conflict_error"


class Unauthorized(MemdError):
    type = "authentication_error"


class Forbidden(MemdError):
    type = "permission_error"


class StorageError(MemdError):
    type = "storage_error"


class StoreUnavailable(StorageError):
    """The store cannot be reached for now (the database server is down or restarting,
    every pooled connection is busy, the file is locked): worth trying again later."""

    type = "store_unavailable"


class MigrationError(StorageError):
    type = "migration_error"


class ModelError(MemdError):
    type = "model_error"


class MissingExtra(MemdError):
    """An optional part of memd (an extra of pyproject.toml, e.g. PostgreSQL support) is
    not installed; the message names the command that installs it."""

    type = "missing_extra"
