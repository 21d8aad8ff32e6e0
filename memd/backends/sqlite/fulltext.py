"""SQLite full text: FTS5 over terms prefixed with a mark of their user, so that a user's
MATCH reads only that user's postings (sql/sqlite/005_fts_per_user.sql), and the memory
keyword channel's ranking on a read-only connection of its own (:class:`SideRanker`)."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import apsw

from memd.backends.common.fulltext import keyword_part
from memd.backends.sqlite.cipher import connect_reader
from memd.errors import StorageError

# The keyword channel's ranking: FTS5 alone (cheap), the winners' rows fetched by key
# after it; joining every match to memories first costs several times more on a large
# store.
KEYWORD_RANKS = (
    "SELECT memory_id, -bm25(memories_fts) AS r FROM memories_fts "
    "WHERE memories_fts MATCH ? ORDER BY r DESC LIMIT ?"
)
Ranks = list[tuple[str, float]]


def keyword_ranks_limit(k: int) -> int:
    """How many KEYWORD_RANKS rows a keyword channel of ``k`` reads: a margin over ``k``
    for the memory filter applied after it."""
    return k * 3 + 10


_STOPWORDS = frozenset(
    "a an and are as at be by do does did for from has have i in is it its "
    "me my of on or our so that the this to was we what when where which who why how "
    "with you your".split()
)
# Words as FTS5's unicode61 tokenizer cuts them: letters and digits (``_`` separates).
_FTS_WORD = re.compile(r"[^\W_]+")
_MARK_LETTERS = "bcdfghjklmnpqrstvwxz"  # no vowels, no y: see 005_fts_per_user.sql


@functools.lru_cache(maxsize=4096)
def user_mark(user_id: str) -> str:
    """The 12 consonants that start every full-text term of this user's rows (a 52-bit
    hash of the id; a collision could only mix two users' rankings, never their rows,
    which are read back by user_id)."""
    n = int.from_bytes(hashlib.blake2b(user_id.encode("utf-8"), digest_size=8).digest(),
                       "big")
    out = []
    for _ in range(12):
        n, r = divmod(n, len(_MARK_LETTERS))
        out.append(_MARK_LETTERS[r])
    return "".join(out)


def fts_text(user_id: str | None, text: str | None) -> str:
    """What the full-text index holds for a row: each word prefixed with its user's mark."""
    if not user_id or not text:
        return ""
    mark = user_mark(user_id)
    words = _FTS_WORD.findall(text.lower())
    return mark + (" " + mark).join(words) if words else ""


Statement = tuple[str, tuple[Any, ...]]


def memory_index_row(user_id: str, memory_id: str, text: str,
                     rowid: int | None = None) -> Statement:
    """The insert of a memory's full-text row (``rowid`` None: the row just inserted)."""
    at = "last_insert_rowid()" if rowid is None else "?"
    params = (fts_text(user_id, text), memory_id)
    return (f"INSERT INTO memories_fts (rowid, content_text, memory_id) VALUES ({at}, ?, ?)",
            params if rowid is None else (rowid, *params))


def message_index_row(user_id: str, session_id: str, message_id: str, text: str | None,
                      rowid: int | None = None) -> Statement | None:
    """The insert of a message's full-text row from its sanitized text (the index holds
    no secret, memd.privacy; None for a message without text)."""
    if not text:
        return None
    at = "last_insert_rowid()" if rowid is None else "?"
    params = (fts_text(user_id, keyword_part(text)), session_id, message_id)
    return ("INSERT INTO messages_fts (rowid, content, session_id, message_id) "
            f"VALUES ({at}, ?, ?, ?)", params if rowid is None else (rowid, *params))


def fts_terms(user_id: str, text: str) -> list[str]:
    """The FTS5 terms of free text, each quoted (safe with any user text: no FTS syntax
    errors) and marked as the user's: its words, stopwords dropped (unless it has no
    other word), at most 32."""
    words = [w for w in _FTS_WORD.findall(text.lower()) if w not in _STOPWORDS]
    if not words:
        words = _FTS_WORD.findall(text.lower())
    mark = user_mark(user_id)
    return [f'"{mark}{w}"' for w in list(dict.fromkeys(words))[:32]]


def fts_query(user_id: str, text: str) -> str | None:
    """An FTS5 MATCH expression for free text: its :func:`fts_terms` OR-ed (None for
    text without a word)."""
    return any_of(fts_terms(user_id, text)) or None


def any_of(terms: list[str]) -> str:
    """The MATCH expression of rows holding any of ``terms``."""
    return " OR ".join(terms)


class SideRanker:
    """KEYWORD_RANKS on a read-only connection and a thread of its own, one ranking at a
    time: apsw and NumPy release the GIL, so on two cores the bm25 over every match
    overlaps the caller's vector channel. Under WAL the connection reads the last
    commit, as the store's own would. Opened at its first use."""

    def __init__(self, path: str, key: str | None = None) -> None:
        self.path = path
        self._key = key  # of an encrypted file
        self.lock = threading.Lock()  # held from start() until the ranking is done
        self._conn: apsw.Connection | None = None
        self._worker: ThreadPoolExecutor | None = None

    def start(self, match: str, limit: int) -> Future[Ranks] | None:
        """The ranking of ``match``, started; None when a ranking is under way already."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="memd-sqlite-side")
            return self._worker.submit(self.rank, match, limit)
        except BaseException:
            self.lock.release()
            raise

    def rank(self, match: str, limit: int) -> Ranks:
        try:
            if self._conn is None:
                self._conn = connect_reader(self.path, self._key)
            return list(self._conn.execute(KEYWORD_RANKS, (match, limit)))
        except apsw.Error as exc:
            raise StorageError(f"SQLite: {exc}") from exc
        finally:
            self.lock.release()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
