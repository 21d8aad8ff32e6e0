"""memd.types.quick_init: the faster __init__ of the frozen dataclasses a compile builds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from memd.types import Memory, Provenance, Tier, quick_init


def test_quick_init_builds_what_the_generated_init_builds() -> None:
    @dataclass(frozen=True, slots=True)
    class Plain:
        a: str
        b: int = 2
        c: list[int] = field(default_factory=list)

    Quick = quick_init(dataclass(frozen=True, slots=True)(type(
        "Quick", (), {"__annotations__": {"a": "str", "b": "int", "c": "list[int]"},
                      "b": 2, "c": field(default_factory=list)})))
    for args, kwargs in ((("x",), {}), (("x", 5), {}), (("x",), {"c": [1]}),
                         ((), {"a": "y", "b": 0, "c": []})):
        assert dataclasses.astuple(Quick(*args, **kwargs)) == \
            dataclasses.astuple(Plain(*args, **kwargs))
    one, two = Quick("x"), Quick("x")
    assert one == two and one.c is not two.c  # a fresh list each
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = "z"  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        Quick()
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        Quick("x", d=1)


def test_quick_init_keeps_memorys_fields_and_defaults() -> None:
    m = Memory("id1", "alice", "text", "hash", 3, 1.0, 2.0, importance=0.9)
    assert (m.id, m.user_id, m.text, m.token_count, m.updated_at) == ("id1", "alice", "text",
                                                                       3, 2.0)
    assert (m.tier, m.provenance, m.importance, m.metadata, m.tags) == (
        Tier.SEMANTIC, Provenance.USER_STATED, 0.9, {}, ())
    assert m == dataclasses.replace(m) and m.metadata is not Memory(
        "id1", "alice", "text", "hash", 3, 1.0, 2.0).metadata


def test_quick_init_refuses_what_it_does_not_build() -> None:
    @dataclass(frozen=True, slots=True)
    class Later:
        a: int

        def __post_init__(self) -> None: ...

    @dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    for cls in (Later, KeywordOnly):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)
