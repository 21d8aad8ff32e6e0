"""Driver errors as memd errors, at the backend edge: a uniqueness or foreign-key
violation is a Conflict, a value the database cannot store is InvalidInput, anything
else the driver raises is a StorageError."""

from __future__ import annotations

from memd.errors import Conflict, InvalidInput, MemdError, StorageError

ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]


def translate(exc: BaseException, database: str, *, conflict: ErrorTypes,
              invalid: ErrorTypes) -> MemdError:
    """The memd error for ``exc``, which ``database``'s driver raised; ``conflict`` and
    ``invalid`` are the driver's exception types for the first two kinds."""
    if isinstance(exc, conflict):
        return Conflict(f"conflicting write: {exc}")
    if isinstance(exc, invalid):
        return InvalidInput(f"{database} cannot store this value: {exc}")
    return StorageError(f"{database}: {exc}")
