"""Each registered store is composed, not stacked: it *has* a connection and one small
part per role, and inherits only the shared delegations (ComposedStore). A mixin chain
slipping back in, or a part growing a method its role does not name, fails here."""

from __future__ import annotations

import inspect

import pytest

from memd import registry
from memd.backends.base import Store
from memd.backends.common.composed import ComposedStore

STORES = registry.names("memd.stores")


@pytest.mark.parametrize("name", STORES)
def test_a_registered_store_is_composed_not_stacked(name: str) -> None:
    cls = registry.store_class(name)
    mro = inspect.getmro(cls)  # type: ignore[arg-type]  # a StoreClass is a class
    assert len(mro) <= 4, [c.__name__ for c in mro]
    assert ComposedStore in mro, [c.__name__ for c in mro]


def test_the_shared_base_delegates_every_store_method() -> None:
    """Every method of the Store protocol is bound from a part in ComposedStore (so no
    backend writes its own delegations), and nothing else is."""
    source = inspect.getsource(ComposedStore.__init__)
    protocol = {name for name in dir(Store) if not name.startswith("_")
                and callable(getattr(Store, name))}
    bound = {line.split("=")[0].strip().removeprefix("self.")
             for line in source.splitlines() if line.strip().startswith("self.")}
    assert protocol <= bound, protocol - bound
    assert bound - protocol == {"dim", "concurrent_reads", "concurrent_writes"}


def test_the_registry_lists_both_builtin_stores() -> None:
    assert {"sqlite", "postgres"} <= set(STORES)
