"""The notes folder: Markdown files the user keeps as standing instructions.

Each ``*.md`` file at the top of the folder (``notes_dir``, by default ``notes`` in the
data dir) is a standing instruction of the default user; each one under a subfolder is
its workspace's (``<notes_dir>/<workspace>/AGENTS.md``, coding rules of one project).
Hidden files and folders are left out.

A note is a memory of its own kind: procedural (L4), provenance "instruction", tagged
:data:`~memd.engine.learning.write.NOTE_TAG`, with ``note_path`` (its path in the folder),
``sha256`` (of the file) and ``part`` in its metadata. It takes its own write path: the
file decides its words, so it is never merged with or superseded by what extraction
finds (the write path leaves notes alone), and a changed file updates its memory in place,
a deleted one retires it. A file longer than ``max_text_chars`` is split at headings.
Its text goes through the same sanitizer as every memory: a secret in a note is stored
as a placeholder.

:meth:`NotesFolder.sync` reconciles the folder with the stored notes: at start (files
changed while the daemon was down) and after each change the watcher sees. The compiled
context gets the scope's notes through a channel of their own (:func:`with_notes`),
first within the memory budget whatever the query, not only when retrieval finds them;
the engine reads them through a :class:`NoteCache`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memd.backends.base import MemoryStore, Store
from memd.engine import validate as v
from memd.engine.block.compile import NOTE_KIND, STYLE_RULE, Candidate
from memd.engine.learning.extract import STYLE_TAG
from memd.engine.learning.write import NOTE_TAG, content_hash
from memd.errors import InvalidInput
from memd.models.tokens import count_text
from memd.private import private_dir
from memd.types import Memory, MemoryFilter, Provenance, Scope, Tier

if TYPE_CHECKING:
    from memd.config import Settings
    from memd.engine.block.inject import StableBlocks
    from memd.models.embedder import Embedder
    from memd.watching import FileWatcher

log = logging.getLogger("memd.notes")

MAX_NOTES = 10_000  # stored notes of a user read at once
_HEADING = re.compile(r"^#{1,6}\s", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class NoteFile:
    """A Markdown file of the folder: its path in it, workspace, sha256 and text."""

    path: str  # relative, with "/" separators
    workspace: str | None
    sha256: str
    text: str


def scan(root: Path) -> list[NoteFile]:
    """The note files under ``root`` (none when it does not exist), by path."""
    found: list[NoteFile] = []
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if (path.suffix.lower() != ".md" or any(p.startswith(".") for p in rel.parts)
                or not path.is_file()):
            continue
        workspace = rel.parts[0] if len(rel.parts) > 1 else None
        try:
            if workspace is not None:
                v.check_id(workspace, "workspace")
            raw = path.read_bytes()
            text = raw.decode("utf-8")
        except InvalidInput as exc:
            log.warning("notes: %s is left out: its folder is not a workspace name (%s)",
                        rel.as_posix(), exc)
            continue
        except UnicodeDecodeError:
            log.warning("notes: %s is left out: it is not UTF-8 text", rel.as_posix())
            continue
        except OSError as exc:  # removed or unreadable between the listing and the read
            log.warning("notes: %s is left out: %s", rel.as_posix(), exc)
            continue
        found.append(NoteFile(rel.as_posix(), workspace, hashlib.sha256(raw).hexdigest(),
                              text))
    return found


def normalize(text: str) -> str:
    """A note's text as stored, before sanitizing: NFC, characters every store can hold,
    lines kept (Markdown is line structure), trailing spaces and runs of blank lines
    removed."""
    text = v.clean_chars(unicodedata.normalize("NFC", text)).replace("\r\n", "\n")
    lines = [line.rstrip() for line in text.split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def split(text: str, max_chars: int) -> list[str]:
    """``text`` in parts of at most ``max_chars``: whole when it fits, else cut before
    headings (sections joined while they fit), a section longer than the limit cut at
    lines, then characters."""
    if len(text) <= max_chars:
        return [text] if text else []
    starts = [m.start() for m in _HEADING.finditer(text) if m.start() > 0]
    sections = [text[a:b] for a, b in zip([0, *starts], [*starts, len(text)], strict=True)]
    pieces: list[str] = []
    for section in sections:
        while len(section) > max_chars:
            cut = section.rfind("\n", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            pieces.append(section[:cut])
            section = section[cut:]
        pieces.append(section)
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + len(piece) <= max_chars:
            parts[-1] += piece
        else:
            parts.append(piece)
    return [p.strip() for p in parts if p.strip()]


class NotesHost(Protocol):
    """What syncing the folder needs of the engine (``Memd`` is one)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Store: ...
    @property
    def embedder(self) -> Embedder: ...
    @property
    def notes_cache(self) -> NoteCache: ...
    @property
    def blocks(self) -> StableBlocks: ...
    def redact(self, text: str) -> str: ...
    def now(self) -> float: ...


class NotesFolder:
    """Keeps the stored notes of ``engine``'s default user in step with the folder."""

    def __init__(self, engine: NotesHost) -> None:
        self.engine = engine
        self.root = engine.settings.notes_path
        self.user_id = engine.settings.default_user
        self._lock = threading.Lock()

    def watcher(self) -> FileWatcher:
        """A watcher that syncs on every change under the folder (made if missing)."""
        from memd.watching import FileWatcher

        private_dir(self.root, tighten=False)  # the user's notes: 0700 when memd makes it
        roots = (self.root, self.root.resolve())  # events may name either

        def accept(path: Path) -> bool:
            for root in roots:
                if path.is_relative_to(root):
                    return not any(p.startswith(".") for p in path.relative_to(root).parts)
            return False

        return FileWatcher("notes", self.root, accept, self.sync, recursive=True)

    def sync(self) -> dict[str, int]:
        """Reconcile the stored notes with the folder; returns how many were added,
        updated and retired."""
        with self._lock:
            try:
                return self._sync()
            finally:
                self.engine.notes_cache.clear()

    def _sync(self) -> dict[str, int]:
        engine = self.engine
        store = engine.store
        files = scan(self.root)
        stored: dict[tuple[str, int], Memory] = {}
        extra: list[Memory] = []
        for mem in stored_notes(store, self.user_id):
            key = (str(mem.metadata.get("note_path")), int(mem.metadata.get("part", 0)))
            if key in stored:
                extra.append(mem)  # a copy left by an interrupted sync
            else:
                stored[key] = mem
        wanted: set[tuple[str, int]] = set()
        puts: list[tuple[NoteFile, int, str, Memory | None]] = []
        for note in files:
            kept = [m for k, m in stored.items() if k[0] == note.path]
            if kept and all(m.metadata.get("sha256") == note.sha256 and _standing(m)
                            for m in kept):
                wanted.update((note.path, int(m.metadata.get("part", 0))) for m in kept)
                continue
            parts = split(normalize(note.text), engine.settings.max_text_chars)
            for i, text in enumerate(parts):
                wanted.add((note.path, i))
                puts.append((note, i, engine.redact(text), stored.get((note.path, i))))
        retired = [(key, mem) for key, mem in stored.items() if key not in wanted]
        # embedded before the transaction: a real model takes a while, the writes do not
        vectors: list[Any] = (list(engine.embedder.embed([t for _, _, t, _ in puts])) if puts
                              else [])
        now = engine.now()
        counts = {"added": 0, "updated": 0, "retired": len(retired)}
        with store.transaction():
            for (note, part, text, old), vector in zip(puts, vectors, strict=True):
                counts[self._put(note, part, text, old, vector, now)] += 1
            for mem in [*extra, *(mem for _, mem in retired)]:
                store.delete_memory(self.user_id, mem.id)
        for note, part, _, old in puts:
            if part == 0:
                log.info("notes: %s %s", "updated" if old else "added", note.path)
        for key, _ in retired:
            if key[1] == 0:
                log.info("notes: retired %s", key[0])
        if puts or retired or extra:
            engine.blocks.forget_user(self.user_id)
        return counts

    def _put(self, note: NoteFile, part: int, text: str, old: Memory | None,
             vector: Any, now: float) -> str:
        store = self.engine.store
        metadata: dict[str, Any] = {"note_path": note.path, "sha256": note.sha256,
                                    "part": part}
        common: dict[str, Any] = dict(
            text=text, content_hash=content_hash(text), token_count=count_text(text),
            tier=Tier.PROCEDURAL, scope=Scope.GLOBAL, provenance=Provenance.INSTRUCTION,
            confidence=1.0, importance=1.0, is_active=True, is_validated=True,
            superseded_by=None, expires_at=None, tags=(NOTE_TAG,), metadata=metadata,
            updated_at=now,
        )
        if old is not None and old.workspace == note.workspace:
            store.update_memory(self.user_id, old.id, vector, **common)
            return "updated"
        if old is not None:
            store.delete_memory(self.user_id, old.id)
        store.insert_memory(Memory(
            id=uuid.uuid4().hex, user_id=self.user_id, created_at=now,
            workspace=note.workspace, access_count=0, **common), vector)
        return "added"


def _standing(mem: Memory) -> bool:
    """Whether a stored note is as the folder made it: maintenance sweeps may have
    demoted or expired it."""
    return (mem.is_active and mem.superseded_by is None and mem.tier == Tier.PROCEDURAL
            and mem.expires_at is None)


def stored_notes(store: MemoryStore, user_id: str,
                 workspaces: tuple[str, ...] | None = None) -> list[Memory]:
    """The user's notes (with ``workspaces``, those of these workspaces; ``""`` stands
    for the user's own), whatever their state."""
    flt = MemoryFilter(workspaces=workspaces, tags=(NOTE_TAG,), include_inactive=True,
                       include_superseded=True, include_expired=True)
    return store.list_memories(user_id, flt, limit=MAX_NOTES)


def note_candidates(store: MemoryStore, user_id: str,
                    visible: tuple[str, ...]) -> list[Candidate]:
    """The notes a call in scope ``visible`` gets, as memory-block candidates, in the
    order of their paths."""
    # active L4 memories only (an index's worth): a note a sweep demoted is back at the
    # next sync
    flt = MemoryFilter(workspaces=visible, tiers=(Tier.PROCEDURAL,), tags=(NOTE_TAG,))
    notes = store.list_memories(user_id, flt, limit=MAX_NOTES)
    notes.sort(key=lambda m: (str(m.metadata.get("note_path")), m.metadata.get("part", 0)))
    return [Candidate(NOTE_KIND, m.id, m.text, m.token_count, 1.0) for m in notes]


def style_rule_candidates(store: MemoryStore, user_id: str,
                          visible: tuple[str, ...]) -> list[Candidate]:
    """The user's global style and format rules in scope ``visible`` (memories tagged
    :data:`~memd.engine.learning.extract.STYLE_TAG`): like notes, they apply to every request,
    so they are read whatever the query, not only when retrieval finds them."""
    flt = MemoryFilter(workspaces=visible, scope=Scope.GLOBAL, tags=(STYLE_TAG,))
    rules = store.list_memories(user_id, flt, limit=MAX_NOTES, order="importance")
    return [Candidate(m.kind, m.id, m.text, m.token_count, m.importance * m.confidence,
                      1.0, STYLE_RULE) for m in rules]


class NoteCache:
    """The notes channel's reads (the notes, then the style rules), kept per (user,
    scope): reading them is a filtered scan of the user's memories (25 ms at 10,000,
    250 at 100,000), too slow for every compile, and they change seldom. A sync in this
    process (and an erasure) drops them at once. Past ``TTL`` seconds an answer is read
    again, to see what changed elsewhere (another process, a new rule): on a store of
    concurrent reads in a side worker, while calls go on with the answer at hand (up to
    ``STALE`` seconds old, beyond which a call reads it itself), so that no call waits
    for that scan."""

    TTL = 1.0
    STALE = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._kept: dict[tuple[str, tuple[str, ...]], tuple[float, list[Candidate]]] = {}
        self._lock = threading.Lock()
        self._reading: set[tuple[str, tuple[str, ...]]] = set()  # read again aside
        self._cleared = 0  # a read begun before a clear is not kept

    def candidates(self, store: Store, user_id: str,
                   visible: tuple[str, ...]) -> list[Candidate]:
        key, now = (user_id, visible), self._clock()
        with self._lock:
            kept = self._kept.get(key)
            cleared = self._cleared
            aside_read = (kept is not None and now - kept[0] >= self.TTL
                          and now - kept[0] < self.STALE and key not in self._reading
                          and store.concurrent_reads and not store.in_transaction())
            if aside_read:
                self._reading.add(key)
        if kept is not None and now - kept[0] < self.TTL:
            return kept[1]
        if aside_read and kept is not None:
            from memd.engine.retrieval.retrieve import aside

            try:
                aside(store, self._read, store, user_id, visible, cleared)
                return kept[1]
            except RuntimeError:  # the workers are shut down: the interpreter exits
                with self._lock:
                    self._reading.discard(key)
        if kept is not None and now - kept[0] < self.STALE and key in self._reading:
            return kept[1]  # another call's read aside is under way
        return self._read(store, user_id, visible, cleared)

    def _read(self, store: Store, user_id: str, visible: tuple[str, ...],
              cleared: int) -> list[Candidate]:
        """Read the scope's notes and rules, and keep them unless the cache was cleared
        since ``cleared`` (what was read may be from before the change)."""
        key, now = (user_id, visible), self._clock()
        try:
            found = [*note_candidates(store, user_id, visible),
                     *style_rule_candidates(store, user_id, visible)]
        finally:
            with self._lock:
                self._reading.discard(key)
        with self._lock:
            if self._cleared == cleared:
                self._kept[key] = (now, found)
        return found

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._cleared += 1


def with_notes(notes: list[Candidate], memories: Sequence[Candidate]) -> list[Candidate]:
    """The notes channel: the scope's ``notes`` first, then ``memories`` without the
    notes retrieval found among them."""
    ids = {n.id for n in notes}
    return [*notes, *(m for m in memories if m.id not in ids)]
