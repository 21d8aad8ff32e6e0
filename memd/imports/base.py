"""What a history source is: how it finds and reads a client's files (the sources
themselves: :mod:`memd.imports.sources`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memd.errors import InvalidInput
from memd.imports.model import Conversation


@dataclass(frozen=True)
class Source:
    """A client's history format. ``parse`` reads one file's bytes (``name``: its path
    or upload name, which some formats take the conversation's key from); ``read`` reads
    one file on disk (``parse`` of its bytes, unless the format is a database)."""

    name: str
    client: str
    defaults: Callable[[], list[Path]]
    files: Callable[[Path], list[Path]]
    parse: Callable[[bytes, str], list[Conversation]] | None
    read: Callable[[Path], list[Conversation]] | None = None

    def read_file(self, path: Path) -> list[Conversation]:
        if self.read is not None:
            return self.read(path)
        assert self.parse is not None
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
        return self.parse(data, str(path))

    def conversations(self, paths: list[Path]) -> Iterator[Conversation]:
        """The conversations of every file of this source under ``paths``."""
        for path in paths:
            for file in self.files(path):
                yield from self.read_file(file)


def files_named(*patterns: str) -> Callable[[Path], list[Path]]:
    """A ``files`` function: ``path`` itself when it is a file, else the files under it
    matching one of the glob ``patterns``, sorted."""
    def files(path: Path) -> list[Path]:
        if path.is_file():
            return [path]
        if not path.is_dir():
            raise InvalidInput(f"{path} does not exist")
        return sorted({f for p in patterns for f in path.glob(p) if f.is_file()})
    return files


def home(*parts: str) -> Path:
    return Path.home().joinpath(*parts)
