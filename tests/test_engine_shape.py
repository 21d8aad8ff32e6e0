"""The engine's one shape, read from its source: functions and small classes that are
given what they use, owned by ``Memd`` and reached through it.

Three checks make the rule fail when broken: ``Memd`` inherits from nothing (a facade
that *has* its parts, not one that *is* a stack of mixins); no class of the engine
declares, under ``TYPE_CHECKING``, attributes it expects another class to provide (what
a mixin does); and no engine function takes the whole ``Memd`` but in the facade's own
module and the few listed below, each with its reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

from memd.engine.memory import Memd

ENGINE = Path(__file__).resolve().parent.parent / "memd" / "engine"

#: Modules of the engine whose functions may take the whole engine, and why.
TAKES_THE_ENGINE = {
    # the facade itself
    "memory.py": "Memd's own module",
    # A proxied call runs through every part of the engine by the facade's public
    # methods (append, context, memory_candidates, record_used...): the server and the
    # tests substitute those on the engine object, so the call path goes through it.
    "conversation/chat.py": "a proxied call orchestrates the facade's public methods",
}

_MEMD = re.compile(r"\bMemd\b")


def _annotation_names_memd(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_MEMD.search(node.value))
    return any(isinstance(n, ast.Name) and n.id == "Memd"
               or isinstance(n, ast.Attribute) and n.attr == "Memd"
               or isinstance(n, ast.Constant) and isinstance(n.value, str)
               and bool(_MEMD.search(n.value))
               for n in ast.walk(node))


def takes_the_engine(source: str) -> list[str]:
    """The functions of ``source`` with a parameter annotated ``Memd``, as
    ``name:line``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            if any(p is not None and _annotation_names_memd(p.annotation) for p in params):
                found.append(f"{node.name}:{node.lineno}")
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def mixins(source: str) -> list[str]:
    """The classes of ``source`` that declare, under ``if TYPE_CHECKING:`` in their
    body, attributes or methods another class provides (the shape of a mixin), or
    whose name says they are one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        expects = any(isinstance(stmt, ast.If) and _is_type_checking(stmt.test)
                      for stmt in node.body)
        if expects or node.name.endswith("Mixin"):
            found.append(f"{node.name}:{node.lineno}")
    return found


def _engine_modules() -> dict[str, str]:
    return {p.relative_to(ENGINE).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(ENGINE.rglob("*.py"))}


def test_memd_is_a_facade_not_a_stack() -> None:
    assert Memd.__mro__ == (Memd, object)


def test_the_engine_parts_memd_owns_are_plain_objects() -> None:
    """Each part is a small class of its own, reached through the facade."""
    from memd.engine.block.context import Contexts
    from memd.engine.conversation.sessions import Sessions
    from memd.engine.learning.erase import Erasure
    from memd.engine.learning.forget import Forgetting

    for part in (Sessions, Contexts, Erasure, Forgetting):
        assert part.__mro__ == (part, object)


def test_no_engine_class_is_a_mixin() -> None:
    found = {path: names for path, source in _engine_modules().items()
             if (names := mixins(source))}
    assert found == {}


def test_no_engine_function_takes_the_whole_engine() -> None:
    found = {path: names for path, source in _engine_modules().items()
             if path not in TAKES_THE_ENGINE and (names := takes_the_engine(source))}
    assert found == {}


def test_the_listed_exceptions_still_need_listing() -> None:
    """An exception that no longer takes the engine comes off the list."""
    modules = _engine_modules()
    assert all(takes_the_engine(modules[path]) for path in TAKES_THE_ENGINE
               if path != "memory.py")


def test_the_checks_find_what_they_look_for() -> None:
    planted = '''
from typing import TYPE_CHECKING

class PartMixin:
    pass

class Needy:
    if TYPE_CHECKING:
        store: object

def compile_for(engine: Memd, user: str) -> None: ...

async def later(*, engine: "memd.engine.memory.Memd") -> None: ...

def fine(store: Store, now: float) -> None: ...
'''
    assert mixins(planted) == ["PartMixin:4", "Needy:7"]
    assert takes_the_engine(planted) == ["compile_for:11", "later:13"]


def test_new_settings_reach_the_parts_that_read_them(engine: Memd) -> None:
    """A live config reload swaps the engine's settings: the parts read the new ones."""
    fresh = replace(engine.settings, min_similarity=0.9)
    engine.settings = fresh
    assert engine.settings is fresh
    assert all(part.settings is fresh
               for part in (engine.sessions, engine.contexts, engine.erasure))
