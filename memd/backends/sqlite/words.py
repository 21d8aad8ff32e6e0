"""A long message history's full-text index held in memory: each term's messages and
counts as numpy arrays, ranked by FTS5's own bm25 over the same bounded part of the
matches as the SQL ranking (memd.backends.sqlite.messages), so the keyword channel finds
the same messages in the same order without walking FTS5's doclists and reading a size
per ranked match (most of the channel's cost on a history of 100,000 messages).

The terms are FTS5's: each message's indexed text (fulltext.fts_text of its keyword
part) cut by the table's own tokenizer, called through apsw. The whole table's row and
token counts, which bm25's IDF and average length read, come from FTS5's own record of
them at each search. A user's index is loaded on their second keyword search (in a
thread; FTS5 answers meanwhile) or by the store's warm-up, only for a history of at
least HELD_FROM indexed messages, kept in step with the store's appends and dropped at any
other change to the user's messages (the next search but one loads it again). The
indexes held stay within HELD_BYTES, the least recently searched user's dropped first.
"""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor

import apsw
import numpy as np

from memd.backends.common.connection import Part
from memd.backends.common.fulltext import keyword_part, rarest
from memd.backends.sqlite.connection import SQLiteConnection
from memd.backends.sqlite.fulltext import fts_text

# Histories with fewer indexed messages stay on FTS5 alone: it ranks every match of a
# query cheaply there.
HELD_FROM = 2_000
# What the held indexes may take together (~28 MB per 100,000 messages): beyond it the
# least recently searched user's is dropped (read again at their next search but one).
HELD_BYTES = 128 * 2**20
# What messages_fts's tokenizer is (sql/sqlite/005_fts_per_user.sql).
TOKENIZER = ("porter", ["unicode61", "remove_diacritics", "2"])
# FTS5's bm25 constants (k1, b).
K1, B = 1.2, 0.75
_LOAD_ROWS = 5_000  # messages read at a time while loading
# A load pauses LOAD_PAUSE seconds after cutting each LOAD_SLICE messages into terms.
LOAD_SLICE, LOAD_PAUSE = 20, 0.001

Ranks = list[tuple[str, float]]  # (message_id, bm25), best first
_INDEXED = ("SELECT m.rowid, m.message_id, coalesce(m.sanitized, m.content) "
            "FROM messages m JOIN messages_fts_content f ON f.id = m.rowid "
            "WHERE m.user_id = ? AND m.rowid > ? ORDER BY m.rowid LIMIT ?")
_COUNT = ("SELECT count(*) FROM messages m JOIN messages_fts_content f ON f.id = m.rowid "
          "WHERE m.user_id = ?")
_local = threading.local()


def tokens(text: str, query: bool = False) -> list[str]:
    """``text`` cut into FTS5 terms by messages_fts's tokenizer, as a document or as a
    query term (each thread has a tokenizer of its own, on an in-memory connection)."""
    tok = getattr(_local, "tokenizer", None)
    if tok is None:
        conn = apsw.Connection(":memory:")
        tok = _local.tokenizer = conn.fts5_tokenizer(*TOKENIZER)
        _local.conn = conn  # the tokenizer needs its connection open
    flags = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    return list(tok(text.encode("utf-8"), flags, None, include_offsets=False,
                    include_colocated=False))


def indexed_tokens(user_id: str, text: str) -> list[str]:
    """The terms messages_fts holds for a message of ``user_id`` with sanitized ``text``."""
    return tokens(fts_text(user_id, keyword_part(text)))


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """SQLite's variable-length integer at ``at`` in ``buf``, and where the next starts."""
    value = 0
    for i in range(8):
        byte = buf[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | buf[at + 8], at + 9


def table_totals(block: bytes) -> tuple[int, int]:
    """FTS5's averages record (the row of id 1 in ``<table>_data``): the table's rows and
    tokens, all columns together."""
    rows, at = _varint(block, 0)
    total = 0
    while at < len(block):
        size, at = _varint(block, at)
        total += size
    return rows, total


class _Postings:
    """One term's messages (positions in HeldWords' arrays, ascending) and counts, with
    room to grow."""

    __slots__ = ("docs", "counts", "n")

    def __init__(self, docs: np.ndarray, counts: np.ndarray) -> None:
        self.docs, self.counts, self.n = docs, counts, len(docs)

    def add(self, doc: int, count: int) -> None:
        if self.n == len(self.docs):
            size = max(4, 2 * self.n)
            self.docs = np.resize(self.docs, size)
            self.counts = np.resize(self.counts, size)
        self.docs[self.n], self.counts[self.n] = doc, count
        self.n += 1

    @property
    def nbytes(self) -> int:
        return int(self.docs.nbytes + self.counts.nbytes)


class HeldWords:
    """One user's messages_fts rows in memory: per term its :class:`_Postings`; per
    message (in rowid order) its rowid, id and length in tokens. Appends hold its lock;
    a search takes views of the arrays under it (an append writes past their ends or
    into new arrays)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.terms: dict[str, _Postings] = {}
        self.rowids = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.float64)
        self.ids: list[str] = []

    @classmethod
    def built(cls, rowids: Sequence[int], ids: list[str], lengths: Sequence[int],
              codes: np.ndarray, names: list[str]) -> HeldWords:
        """The index of messages (``rowids`` ascending, ``ids``, ``lengths`` in terms)
        whose terms, one message after the other, are ``codes`` into ``names``."""
        out = cls()
        out.rowids = np.array(rowids, dtype=np.int64)
        out.lengths = np.array(lengths, dtype=np.float64)
        out.ids = ids
        docs = np.repeat(np.arange(len(ids), dtype=np.int64), out.lengths.astype(np.int64))
        # one (term, message) pair per run of equal pairs, in term then message order
        order = np.lexsort((docs, codes))
        codes, docs = codes[order], docs[order]
        new = np.ones(len(codes), dtype=bool)
        new[1:] = (codes[1:] != codes[:-1]) | (docs[1:] != docs[:-1])
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, len(codes))).astype(np.int32)
        codes, docs = codes[starts], docs[starts].astype(np.int32)
        bounds = np.flatnonzero(np.diff(codes)) + 1
        for code, d, c in zip(codes[np.r_[0, bounds]] if len(codes) else [],
                              np.split(docs, bounds), np.split(counts, bounds), strict=True):
            out.terms[names[code]] = _Postings(d, c)
        return out

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return (sum(p.nbytes for p in self.terms.values()) + self.rowids.nbytes
                + self.lengths.nbytes + 80 * len(self.ids))

    def add(self, rowid: int, message_id: str, terms: list[str]) -> None:
        """A message appended (its rowid above every held one)."""
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        with self.lock:
            doc = len(self.ids)
            if doc == len(self.rowids):
                size = max(16, 2 * doc)
                self.rowids = np.resize(self.rowids, size)
                self.lengths = np.resize(self.lengths, size)
            self.rowids[doc], self.lengths[doc] = rowid, len(terms)
            self.ids.append(message_id)
            for t, c in counts.items():
                held = self.terms.get(t)
                if held is None:
                    self.terms[t] = _Postings(np.array([doc], dtype=np.int32),
                                              np.array([c], dtype=np.int32))
                else:
                    held.add(doc, c)

    def ranks(self, phrases: Sequence[str], k: int, table: tuple[int, int],
              rank_all: int, rare_matches: int, newest_matches: int) -> Ranks:
        """The best ``k`` (message id, bm25) for the query of ``phrases`` (one term each,
        in the query's order: FTS5 scores a term given twice twice), by the rules of the
        SQL ranking (``rank_all``, ``rare_matches``, ``newest_matches``: see
        memd.backends.sqlite.messages). ``table``: the whole table's rows and tokens."""
        with self.lock:  # views: an append writes past them or into new arrays
            held = [self.terms.get(p) for p in phrases]
            lists = [(h.docs[: h.n], h.counts[: h.n]) if h is not None
                     else (np.zeros(0, np.int32), np.zeros(0, np.int32)) for h in held]
            rowids, lengths, ids = self.rowids, self.lengths, self.ids
        hits = [len(d) for d, _ in lists]
        counts = [min(h, rank_all + 1) for h in hits]
        # every match is ranked when there are at most rank_all of them
        every = (np.unique(np.concatenate([d for d, _ in lists]))
                 if max(counts) <= rank_all else None)
        if every is not None and len(every) <= rank_all:
            ranked = every
        else:
            rare = set(rarest(list(phrases), counts, rare_matches))
            if rare:
                ranked = np.unique(np.concatenate(
                    [d for p, (d, _) in zip(phrases, lists, strict=True) if p in rare]))
            else:  # the newest matches: from the newest_matches-th newest on
                tails = np.unique(np.concatenate([d[-newest_matches:] for d, _ in lists]))
                oldest = tails[-newest_matches] if len(tails) >= newest_matches else 0
                ranked = np.unique(np.concatenate([d[np.searchsorted(d, oldest):]
                                                   for d, _ in lists]))
        if not len(ranked):
            return []
        rows, tokens_ = table
        avg = tokens_ / rows if rows else 1.0
        norm = K1 * (1 - B + B * lengths[ranked] / avg)
        score = np.zeros(len(ranked))
        for hit, (d, c) in zip(hits, lists, strict=True):
            idf = math.log((rows - hit + 0.5) / (hit + 0.5))
            at = np.minimum(np.searchsorted(d, ranked), max(len(d) - 1, 0))
            freq = np.where(d[at] == ranked, c[at], 0) if len(d) else np.zeros(len(ranked))
            score += (idf if idf > 0 else 1e-6) * (freq * (K1 + 1)) / (freq + norm)
        best = np.lexsort((rowids[ranked], -score))[:k]
        return [(ids[ranked[i]], float(score[i])) for i in best]


class SQLiteWords(Part):
    """The held indexes of the users with long histories: loaded at a user's second
    keyword search or by :meth:`warm`, kept in step with appends (:meth:`added`),
    dropped at any other change to their messages (:meth:`forget`), at a rollback, when
    another connection changed the file, and beyond HELD_BYTES (the least recently
    searched first)."""

    def __init__(self, conn: SQLiteConnection) -> None:
        super().__init__(conn)
        self._conn = conn
        self._lock = threading.Lock()
        # None: fewer than HELD_FROM; least recently searched first
        self.held: OrderedDict[str, HeldWords | None] = OrderedDict()
        self._few: dict[str, int] = {}  # how many those have
        self._loads: set[str] = set()
        self._seen: set[str] = set()
        self._data_version = -1
        self._changes = 0  # drops and forgets: a load that saw one is not kept
        # one thread loads, on a side connection of its own, kept for the next load
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="memd-message-words")
        conn.on_rollback.append(self.drop)
        # a load reads on the loader's side connection, which the store's close closes
        conn.on_close.append(lambda: self._loader.shutdown(wait=True, cancel_futures=True))

    def drop(self) -> None:
        with self._lock:
            self.held.clear()
            self._few.clear()
            self._changes += 1

    def forget(self, user_id: str) -> None:
        """The user's messages changed otherwise than by an append: read them again."""
        with self._lock:
            self.held.pop(user_id, None)
            self._few.pop(user_id, None)
            self._changes += 1

    def _check(self, version: int) -> None:
        """Drop every index when another connection changed the file since the last
        check (``version``: its data_version); the caller holds ``self._lock``."""
        if version != self._data_version:
            if self._data_version != -1:  # -1: the first check, nothing held yet
                self.held.clear()
                self._few.clear()
                self._changes += 1
            self._data_version = version

    def added(self, user_id: str, message_id: str, text: str,
              rowid: int | None = None) -> None:
        """A message indexed for ``user_id``, just now (``rowid`` None: the row the
        connection inserted last, its full-text row)."""
        held = self.held.get(user_id)
        if held is not None:
            if rowid is None:
                [(rowid,)] = self._rows("SELECT last_insert_rowid()")
            held.add(int(rowid), message_id, indexed_tokens(user_id, text))
        elif user_id in self._few:  # too few when counted: loaded once grown enough
            self._few[user_id] += 1
            if self._few[user_id] >= HELD_FROM:
                self.forget(user_id)

    def of(self, user_id: str) -> HeldWords | None:
        """The user's held index, or None: then from their second search on, a thread
        loads it (the search goes to FTS5)."""
        version = self._conn.data_version()
        with self._lock:
            self._check(version)
            if user_id in self.held:
                self.held.move_to_end(user_id)
                return self.held[user_id]
            if user_id in self._loads:
                return None
            if user_id not in self._seen:
                self._seen.add(user_id)
                return None
            self._loads.add(user_id)
        self._loader.submit(self._load, user_id)
        return None

    def warm(self, user_id: str) -> int:
        """Load the user's index now unless it is held or being loaded (as ``memd serve``
        does for its one user at start: SQLiteStore.warm_vectors), on the loader's
        thread, whose load the store's close waits for; how many messages it holds."""
        with self._lock:
            self._seen.add(user_id)
            busy = user_id in self.held or user_id in self._loads
            if not busy:
                self._loads.add(user_id)
        if not busy:
            try:
                self._loader.submit(self._load, user_id).result()
            except (RuntimeError, CancelledError):  # the store closed meanwhile
                with self._lock:
                    self._loads.discard(user_id)
        held = self.held.get(user_id)
        return len(held) if held is not None else 0

    def _load(self, user_id: str) -> None:
        """Load the user's index on a side connection (appends and reads go on), then
        with the store's lock add what was appended meanwhile; a load that saw another
        change to the messages is dropped (the next search but one tries again)."""
        try:
            with self._lock:
                start = self._changes
            before = self._conn.data_version()
            with self._conn.side_reads():
                words = self.load(user_id)
            with self._conn.lock:
                if self._conn.closed:
                    return
                if words is not None:
                    last = int(words.rowids[len(words) - 1]) if len(words) else -1
                    for rowid, mid, tokens_ in self._indexed(user_id, last):
                        words.add(rowid, mid, tokens_)
                else:
                    few = self._rows(_COUNT, (user_id,))[0][0]
                version = self._conn.data_version()
                with self._lock:
                    kept = self._changes == start and version == before
                    self._check(version)
                    if kept:
                        self.held[user_id] = words
                        if words is None:
                            self._few[user_id] = few
                        self._bound()
        except Exception:  # noqa: BLE001 - FTS5 answers; the next search tries again
            pass
        finally:
            with self._lock:
                self._loads.discard(user_id)

    def _bound(self) -> None:
        """Drop the least recently searched users' indexes while those held take more
        than HELD_BYTES (the newest is kept); the caller holds ``self._lock``."""
        sizes = {u: w.nbytes for u, w in self.held.items() if w is not None}
        total = sum(sizes.values())
        for user_id in list(sizes)[:-1]:
            if total <= HELD_BYTES:
                return
            del self.held[user_id]
            self._seen.discard(user_id)  # loaded again from their second search on
            total -= sizes[user_id]

    def load(self, user_id: str) -> HeldWords | None:
        """The user's index read from their messages (None below HELD_FROM). Cutting
        the texts into terms is Python's work: it pauses after every LOAD_SLICE
        messages, so that the requests' threads get the interpreter's lock while it
        runs (it takes twice as long, and compiles meanwhile are not held up)."""
        if self._rows(_COUNT, (user_id,))[0][0] < HELD_FROM:
            return None
        rowids: list[int] = []
        ids: list[str] = []
        lengths: list[int] = []
        codes = array("q")
        vocab: dict[str, int] = {}
        while not self._conn.closed:  # the store's close waits for this page
            part = self._rows(_INDEXED, (user_id, rowids[-1] if rowids else -1, _LOAD_ROWS))
            for i, (rowid, mid, text) in enumerate(part):
                terms = indexed_tokens(user_id, text or "")
                codes.extend([vocab.setdefault(t, len(vocab)) for t in terms])
                rowids.append(rowid)
                ids.append(mid)
                lengths.append(len(terms))
                if i % LOAD_SLICE == LOAD_SLICE - 1:
                    time.sleep(LOAD_PAUSE)
            if len(part) < _LOAD_ROWS:
                return HeldWords.built(rowids, ids, lengths,
                                       np.frombuffer(codes, dtype=np.int64), list(vocab))
        return None

    def _indexed(self, user_id: str, after: int) -> list[tuple[int, str, list[str]]]:
        """(rowid, message id, terms) of the user's indexed messages past rowid
        ``after``, in rowid order."""
        rows = self._rows(_INDEXED, (user_id, after, -1))
        return [(r, mid, indexed_tokens(user_id, text or "")) for r, mid, text in rows]

    def table(self) -> tuple[int, int] | None:
        """messages_fts's rows and tokens (None when FTS5 keeps no such record)."""
        found = self._rows("SELECT block FROM messages_fts_data WHERE id = 1")
        return table_totals(found[0][0]) if found and found[0][0] else None

