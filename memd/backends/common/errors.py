"""Driver errors as memd errors, at the backend edge: a uniqueness or foreign-key
violation is a Conflict, a value the database cannot store is InvalidInput, a database
that cannot be reached for now is StoreUnavailable, anything else the driver raises is a
StorageError."""

from __future__ import annotations

from memd.errors import Conflict, InvalidInput, MemdError, StorageError, StoreUnavailable

ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]


def translate(exc: BaseException, database: str, *, conflict: ErrorTypes,
              invalid: ErrorTypes, unavailable: ErrorTypes) -> MemdError:
    """The memd error for ``exc``, which ``database``'s driver raised; ``conflict``,
    ``invalid`` and ``unavailable`` are the driver's exception types for the first
    three kinds."""
    if isinstance(exc, conflict):
        return Conflict(f"conflicting write: {exc}")
    if isinstance(exc, invalid):
        return InvalidInput(f"{database} cannot store this value: {exc}")
    if isinstance(exc, unavailable):
        return StoreUnavailable(f"{database} cannot be reached: {exc}")
    return StorageError(f"{database}: {exc}")
