"""The one registry of pluggable parts: entry points.

Built-in stores and embedders are declared in pyproject.toml under the
``memd.stores`` and ``memd.embedders`` entry point groups, exactly as an external
package would declare its own; nothing here lists names by hand.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, cast

from memd.errors import InvalidInput, MissingExtra

if TYPE_CHECKING:
    from memd.backends.base import StoreClass


@cache
def _group(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def names(group: str) -> list[str]:
    return sorted(_group(group))


def load(group: str, name: str) -> Any:
    eps = _group(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none"
        raise InvalidInput(f"unknown {group.split('.')[-1][:-1]} {name!r} (known: {known})")
    return eps[name].load()


def store_class(name: str) -> StoreClass:
    """The store class registered as ``name``; each backend checks its class against
    :class:`memd.backends.base.StoreClass` where it defines it."""
    return cast("StoreClass", load("memd.stores", name))


def store_for(db: str) -> StoreClass:
    """The registered store class that opens the ``db`` setting (each says which it opens:
    ``opens(db)``; ``db_forms`` for this error)."""
    classes: list[StoreClass] = []
    absent: list[str] = []
    for name in names("memd.stores"):
        try:
            classes.append(store_class(name))
        except ImportError as exc:  # its extra is not installed: the message says how
            absent.append(str(exc))
    for cls in classes:
        if cls.opens(db):
            return cls
    # each is a class, but a protocol cannot require __name__ of one: getattr reads it
    forms = "; ".join(f"{cls.db_forms} ({getattr(cls, '__name__', cls)})" for cls in classes)
    if absent:  # the database is most likely one of theirs: say how to install it
        raise MissingExtra(f"no installed store opens this database (installed: {forms}); "
                           + "; ".join(absent))
    raise InvalidInput(f"unsupported database {db!r}: use {forms}")


def embedder_class(name: str) -> Any:
    return load("memd.embedders", name)
