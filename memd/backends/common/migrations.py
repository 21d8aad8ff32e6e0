"""The migration runner's bookkeeping, the same for both dialects: the ordered files of
``memd/sql/<dialect>/NNN_name.sql``, which of them a database still needs, and the checks
that refuse a database this code cannot serve. Each backend applies a file in a
transaction of its driver and records it in ``schema_migrations``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable

from memd.errors import MigrationError

# schema_meta keys of the vector indexes a ``memd migrate`` run dropped to copy in bulk and
# has not built again yet: while one is there, the copy is unfinished.
DEFERRED_INDEX_KEY = "migrate.deferred_index."
# schema_meta key a ``memd migrate`` run writes before anything else (its value: the
# tables it copies, comma-separated) and deletes once the copy is verified: a target a
# killed run left, even one it had made no row in yet, is not served as if it were whole.
COPYING_KEY = "migrate.copying"
# every key of an unfinished copy starts with this
UNFINISHED_PREFIX = "migrate."


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    file: Traversable

    def text(self, values: Mapping[str, str]) -> str:
        """The file's SQL with each ``{placeholder}`` of ``values`` filled in."""
        text = self.file.read_text("utf-8")
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        return text


def pending(dialect: str, applied: set[int], where: str) -> list[Migration]:
    """The migrations of ``dialect`` not in ``applied``, in order. Raises MigrationError
    when ``where`` records a version this code does not know (a newer memd made it)."""
    files = sorted((f for f in (resources.files("memd.sql") / dialect).iterdir()
                    if f.name.endswith(".sql")), key=lambda f: f.name)
    known = [Migration(int(f.name.split("_", 1)[0]), f.name, f) for f in files]
    unknown = applied - {m.version for m in known}
    if unknown:
        raise MigrationError(
            f"{where} has schema versions {sorted(unknown)} unknown to this memd; upgrade memd")
    return [m for m in known if m.version not in applied]


def check_dim(stored: str | None, dim: int, where: str, fresh: str) -> None:
    """Refuse a database whose vectors have another dimension than the embedder's;
    ``fresh`` names what the user can start over with (a data dir, a database)."""
    if stored is not None and int(stored) != dim:
        raise MigrationError(
            f"{where} holds {stored}-dim embeddings; this embedder makes {dim}-dim ones "
            f"(use a new {fresh} or the original embedder)")
