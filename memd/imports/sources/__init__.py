"""The clients whose history memd reads, one module each, registered in :data:`SOURCES`.

Each module knows where its client keeps its history on Linux and macOS, which files
under a folder are its own, and how to read one into
:class:`memd.imports.model.Conversation` values (a :class:`memd.imports.base.Source`).
Reading is pure: a file's bytes in, conversations out, so an uploaded file
(``POST /v1/import``) and a file on disk read the same way.
"""

from __future__ import annotations

from memd.errors import InvalidInput
from memd.imports.base import Source
from memd.imports.sources import (
    aider,
    chatgpt,
    claude_ai,
    claude_code,
    cline,
    continue_dev,
    opencode,
)

SOURCES: dict[str, Source] = {
    m.SOURCE.name: m.SOURCE
    for m in (claude_code, chatgpt, claude_ai, aider, continue_dev, cline, opencode)}


def source(name: str) -> Source:
    """The source named ``name``; InvalidInput listing the known ones otherwise."""
    found = SOURCES.get(name)
    if found is None:
        raise InvalidInput(f"unknown history source {name!r}: one of "
                           f"{', '.join(sorted(SOURCES))}")
    return found
