"""SQLite messages: appends, history windows, the message search channels (vector
from the cache or vec0, keyword from FTS5), embeddings and the retention sweep's deletes
(with the rows derived from each message beside it: its full-text row, its vec0 row,
the in-process vectors)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memd.backends.base import Vector
from memd.backends.common.columns import MESSAGE_COLUMNS, marks
from memd.backends.common.dialect import SQLITE
from memd.backends.common.fulltext import rarest
from memd.backends.common.messages import (
    INSERT_MESSAGE,
    SharedMessages,
    message_params,
    new_messages,
)
from memd.backends.common.queries import BUMP_HISTORY_VERSION, recent_query
from memd.backends.sqlite.connection import MAP, SQLiteConnection, to_json
from memd.backends.sqlite.fulltext import any_of, fts_terms, message_index_row
from memd.backends.sqlite.vectors import SQLiteVectors, blob
from memd.backends.sqlite.words import SQLiteWords, tokens
from memd.errors import NotFound
from memd.types import Message, NewMessage

# A message keyword search ranks every match while there are at most RANK_ALL; beyond,
# a bounded part of them: bm25 reads each ranked match's sizes (about a microsecond
# each), and in a long history a common word matches tens of thousands of messages. That
# part: every match of the query's rarest words, as long as they match at most
# RARE_MATCHES messages together (a thing said once, however long ago, is still found by
# its own word), each ranked by the whole query; the messages of its common words alone
# are not ranked. A query of common words only ranks its NEWEST_MATCHES newest matches.
RANK_ALL = 2_000
RARE_MATCHES = 300
NEWEST_MATCHES = 300

Ranks = list[tuple[str, float]]  # (message_id, bm25), best first

# What a row of these tables has beside it: its full-text row (by rowid) and its vec0
# row (by id).
_INDEX_ROWS = {"memories": ("memories_fts", "memory_vec", "memory_id"),
               "messages": ("messages_fts", "message_vec", "message_id")}


class SQLiteMessages(SharedMessages):
    """Messages: appends, history windows, the message search channels and retention,
    each write kept in step with the full-text index, vec0 and the vector cache."""

    _needs_embedding = ("has_embedding = 0 AND content IS NOT NULL AND is_pruned = 0 "
                        "ORDER BY created_at")

    def __init__(self, conn: SQLiteConnection, vectors: SQLiteVectors,
                 words: SQLiteWords) -> None:
        super().__init__(conn)
        self._conn = conn
        self._vectors = vectors
        self.words = words

    def drop_index_rows(self, table: str, test: str, params: tuple[Any, ...]) -> None:
        """Delete the full-text and vec0 rows of the rows of ``table`` (memories or
        messages) where ``test``; the rows themselves are the caller's to delete."""
        fts, vec, key = _INDEX_ROWS[table]
        rows = self._rows(f"SELECT rowid, {key} FROM {table} WHERE {test}", params)
        self._write_many(f"DELETE FROM {fts} WHERE rowid = ?", [(r[0],) for r in rows])
        self._write_many(f"DELETE FROM {vec} WHERE {key} = ?", [(r[1],) for r in rows])

    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None, expires_at: float | None = None,
    ) -> list[Message]:
        with self.transaction():
            rows = self._rows(
                "SELECT turn_count FROM sessions WHERE user_id = ? AND session_id = ?",
                (user_id, session_id),
            )
            if not rows:
                raise NotFound(f"no session {session_id!r} for user {user_id!r}")
            out = new_messages(user_id, session_id, messages, token_counts, content_hashes,
                               chain_hashes, int(rows[0][0]), now)
            for m in out:
                self._write(SQLITE.sql(INSERT_MESSAGE), message_params(m, to_json))
                indexed = message_index_row(user_id, session_id, m.id, m.safe_text)
                if indexed is not None:
                    self._write(*indexed)
                    self.words.added(user_id, m.id, m.safe_text or "")
            self._write(
                "UPDATE sessions SET turn_count = ?, updated_at = ?, "
                "expires_at = coalesce(?, expires_at) WHERE user_id = ? AND session_id = ?",
                (int(rows[0][0]) + len(out), now, expires_at, user_id, session_id),
            )
        return out

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        query, params = recent_query(
            MESSAGE_COLUMNS, user_id, session_id, before_turn, mark="?",
            active="is_compressed = 0 AND is_pruned = 0", nonneg="max",
        )
        message = MAP.message
        return [message(r) for r in self._rows(query, (*params, limit, token_budget))]

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        if not chain_hashes:
            return []
        out: list[Message] = []
        unique = list(dict.fromkeys(chain_hashes))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            out += [MAP.message(r) for r in self._rows(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND chain_hash IN "
                f"({marks('?', len(chunk))})",
                (user_id, *chunk),
            )]
        return out

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        with self.transaction():
            self._write_many(
                "UPDATE messages SET is_compressed = 1, compressed_summary_id = ? "
                "WHERE user_id = ? AND session_id = ? AND message_id = ?",
                [(summary_id, user_id, session_id, mid) for mid in message_ids],
            )
            self._write(BUMP_HISTORY_VERSION, (user_id, session_id))

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        cached = self._vectors.message_vectors_or_warm(user_id)
        if cached is not None:
            pairs = cached.knn(vector, k, False, None if session_id is None else (session_id,))
            return self._messages_with(user_id, pairs)
        query = (
            "SELECT message_id, distance FROM message_vec WHERE embedding MATCH ? AND k = ? "
            "AND user_id = ?"
        )
        params: list[Any] = [blob(vector), k, user_id]
        if session_id is not None:
            query += " AND session_id = ?"
            params.append(session_id)
        pairs = self._rows(query, params)
        return self._messages_with(user_id, [(mid, 1.0 - float(d)) for mid, d in pairs])

    def get_message_vectors(self, user_id: str, message_ids: Sequence[str]
                            ) -> dict[str, Vector]:
        return self._vectors.message_vectors_of(user_id, message_ids)

    def messages_at(self, user_id: str, turns: Sequence[tuple[str, int]]) -> list[Message]:
        # One key look-up per place: with the places OR-ed in one WHERE, SQLite may walk
        # every message of the user instead.
        rows = self._conn.rows_each(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = ? "
            "AND session_id = ? AND turn_index = ?",
            [(user_id, sid, turn) for sid, turn in dict.fromkeys(turns)])
        return [MAP.message(r) for r in rows]

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        terms = fts_terms(user_id, query)
        if not terms:
            return []
        pairs = self._keyword_ranks(user_id, terms, k, session_id)
        top = max((float(r) for _, r in pairs), default=0.0) or 1.0
        return self._messages_with(user_id, [(mid, float(r) / top) for mid, r in pairs])

    def _messages_with(
        self, user_id: str, pairs: list[tuple[str, float]]
    ) -> list[tuple[Message, float]]:
        """The messages of (message_id, score) pairs, in their order, with their scores."""
        if not pairs:
            return []
        ids = [p[0] for p in pairs]
        # "+user_id": look the ids up by primary key; with an index on user_id to choose,
        # SQLite may walk all the user's messages instead.
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id IN "
            f"({marks('?', len(ids))}) AND +user_id = ?",
            (*ids, user_id),
        )
        message = MAP.message
        by_id = {r[0]: message(r) for r in rows}
        return [(by_id[mid], s) for mid, s in pairs if mid in by_id]

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        latest = dict(items)  # a message given twice keeps its last vector
        ids = list(latest)
        with self.transaction():
            sessions: dict[str, str] = {}
            for i in range(0, len(ids), 500):  # the messages still there, in one look-up
                chunk = ids[i : i + 500]
                sessions.update(self._rows(
                    f"SELECT message_id, session_id FROM messages WHERE message_id IN "
                    f"({marks('?', len(chunk))}) AND +user_id = ? AND is_pruned = 0",
                    (*chunk, user_id),
                ))
            kept = [mid for mid in ids if mid in sessions]
            if not kept:
                return
            self._write_many("DELETE FROM message_vec WHERE message_id = ?",
                             [(mid,) for mid in kept])
            self._write_many(
                "INSERT INTO message_vec (message_id, user_id, embedding, session_id) "
                "VALUES (?, ?, ?, ?)",
                [(mid, user_id, blob(latest[mid]), sessions[mid]) for mid in kept],
            )
            self._write_many("UPDATE messages SET has_embedding = 1 WHERE message_id = ?",
                             [(mid,) for mid in kept])
            for mid in kept:
                self._vectors.put_message_vector(user_id, mid, latest[mid], sessions[mid])

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        with self.transaction():
            sessions = self._inactive_sessions(user_id, before)
            deleted = 0
            for session_id in sessions:
                # messages_fts has secure-delete on: the terms leave its pages as it
                # rewrites them (a full scrub also merges the index: SQLiteStore.scrub)
                this = ("user_id = ? AND session_id = ?", (user_id, session_id))
                self.drop_index_rows("messages", *this)
                deleted += self._write(f"DELETE FROM messages WHERE {this[0]}", this[1])
                self._write(BUMP_HISTORY_VERSION, (user_id, session_id))
            if sessions:
                self.forget_held(user_id)
        return deleted, len(sessions)

    def forget_held(self, user_id: str) -> None:
        """The user's messages changed otherwise than by an append (their index rows
        dropped): the message vectors and the word index held for them are read again
        at their next use."""
        self._vectors.message_vectors.pop(user_id, None)
        self.words.forget(user_id)

    def _keyword_ranks(self, user_id: str, terms: list[str], k: int,
                       session_id: str | None) -> Ranks:
        """The best ``k`` (message_id, bm25) of the messages holding any of ``terms`` (a
        user's: fts_terms), best first: every match ranked, or beyond RANK_ALL matches a
        bounded part of them (:meth:`_bounded_ranks`); from the user's held index where
        there is one (memd.backends.sqlite.words: the same ranking)."""
        match = any_of(terms)
        if session_id is not None:  # bm25 reads only the session's matches
            return self._ranks(match, k, " AND session_id = ?", (session_id,))
        held = self.words.of(user_id)
        if held is not None:
            phrases = [tokens(t.strip('"'), query=True) for t in terms]
            table = self.words.table()
            if table is not None and all(len(p) == 1 for p in phrases):
                return held.ranks([p[0] for p in phrases], k, table, RANK_ALL,
                                  RARE_MATCHES, NEWEST_MATCHES)
        counts = self._match_counts(terms)
        # Fewer matches than their words' together when words share messages: those
        # counted too when it matters (when no word alone is past RANK_ALL, each count is
        # cheap).
        if sum(counts) <= RANK_ALL or (
                max(counts) <= RANK_ALL and self._match_counts([match])[0] <= RANK_ALL):
            return self._ranks(match, k)
        return self._bounded_ranks(terms, counts, k)

    def _ranks(self, match: str, k: int, where: str = "", params: tuple[Any, ...] = ()
               ) -> Ranks:
        """The best ``k`` (message_id, bm25) of the FTS5 expression ``match``, best first
        (``where``: more conditions on the full-text row)."""
        return self._rows("SELECT message_id, -bm25(messages_fts) AS r FROM messages_fts "
                          f"WHERE messages_fts MATCH ?{where} ORDER BY r DESC LIMIT ?",
                          (match, *params, k))

    def _match_counts(self, matches: list[str]) -> list[int]:
        """How many messages each FTS5 expression of ``matches`` matches, counted up to
        RANK_ALL + 1 (a count walks the matches without reading their sizes: cheap)."""
        one = ("(SELECT count(*) FROM (SELECT 1 FROM messages_fts WHERE messages_fts "
               "MATCH ? LIMIT ?))")
        row = self._rows("SELECT " + ", ".join([one] * len(matches)),
                         [x for m in matches for x in (m, RANK_ALL + 1)])
        return [int(n) for n in row[0]]

    def _bounded_ranks(self, terms: list[str], counts: list[int], k: int) -> Ranks:
        """The best ``k`` by the whole query's bm25 among a bounded part of its matches:
        those of its rarest words (RARE_MATCHES at most together, at any age), or without
        such a word its NEWEST_MATCHES newest (``counts``: the terms' :meth:`_match_counts`)."""
        rare = rarest(terms, counts, RARE_MATCHES)
        match = any_of(terms)
        if not rare:
            # Newer messages have higher rowids: walking the matches down from the newest
            # costs a tenth of ranking them; the ranking then reads that rowid range alone.
            oldest = self._rows("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
                                "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                                (match, NEWEST_MATCHES - 1))
            return self._ranks(match, k, " AND rowid >= ?",
                               (oldest[0][0],) if oldest else (0,))
        # bm25 sums over the expression's words. A message of a rare word and no common one
        # has its whole score in the first ranking; one with both, in the second (the same
        # words, so the same score as the whole query's). A message's first score is never
        # above its whole one, so the best k of the two rankings' best are the best k of
        # the rare words' messages.
        pairs = self._ranks(any_of(rare), k)
        common = [t for t in terms if t not in rare]
        if common:
            pairs += self._ranks(f"({any_of(rare)}) AND ({any_of(common)})", k)
        best: dict[str, float] = {}
        for mid, r in pairs:
            best[mid] = max(float(r), best.get(mid, float("-inf")))
        return sorted(best.items(), key=lambda p: (-p[1], p[0]))[:k]
