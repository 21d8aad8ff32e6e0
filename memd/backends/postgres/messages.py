"""PostgreSQL messages: appends under the session's row lock, history windows over a
user's own partition where it may, the vector channel (HNSW, cosine) and the keyword
channel (see memd.backends.postgres.memories for full text under row-level security),
and the retention sweep's deletes (a message's vector and full-text vector live in its
own row)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

from psycopg.types.json import Jsonb

from memd.auth import current_actor
from memd.backends.base import Vector
from memd.backends.common.columns import MESSAGE_COLUMNS
from memd.backends.common.dialect import POSTGRES
from memd.backends.common.fulltext import rarest
from memd.backends.common.messages import (
    INSERT_MESSAGE,
    SharedMessages,
    message_params,
    new_messages,
)
from memd.backends.common.queries import BUMP_HISTORY_VERSION, recent_query
from memd.backends.postgres.connection import MAP
from memd.backends.postgres.partitions import PostgresPartitions
from memd.backends.postgres.queries import ranked, search_text
from memd.backends.postgres.vectors import as_vector, vector_array
from memd.errors import NotFound
from memd.types import Message, NewMessage

# A message keyword search ranks every match while its words match at most RANK_ALL
# messages (counted per word, up to RANK_ALL + 1 each); beyond, a bounded part of them:
# ts_rank reads each matching row, and in a long history a common word matches tens of
# thousands. That part: the matches of the query's rarest words, as long as they match
# at most RARE_MATCHES messages together (a thing said once, however long ago, is still
# found by its own word), ranked by the whole query; for a query of common words only,
# the matches among the user's NEWEST_MESSAGES newest messages (the last turns of the
# newest sessions). A word's count is reused for COUNTS_KEPT seconds: counting a common
# word reads its postings (tens of thousands), and the words people ask with recur;
# a count gone stale with new messages only makes a search read more rows than it needs.
# The bounds are lower than SQLite's (memd.backends.sqlite.messages): each match ranked
# here is a row read from the table (its tsvector), not a posting of the index.
RANK_ALL = 500
RARE_MATCHES = 300
NEWEST_MESSAGES = 300
COUNTS_KEPT = 600.0


class WordCounts:
    """Keyword match counts per (user, word), each kept COUNTS_KEPT seconds, the
    ``size`` last used at most; a word is kept as a keyed hash (the key is random per
    instance), never as text: the words of what users ask stay in no cache. Safe to
    share between threads."""

    def __init__(self, size: int = 50_000) -> None:
        self._size = size
        self._key = secrets.token_bytes(16)
        self._counts: OrderedDict[tuple[str, bytes], tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _of(self, user_id: str, word: str) -> tuple[str, bytes]:
        return user_id, hashlib.blake2b(word.encode("utf-8", "surrogatepass"),
                                        key=self._key, digest_size=16).digest()

    def get(self, user_id: str, words: list[str], now: float) -> dict[str, int]:
        """The counts of ``words`` still fresh at ``now`` (time.monotonic())."""
        out: dict[str, int] = {}
        with self._lock:
            for w in words:
                key = self._of(user_id, w)
                kept = self._counts.get(key)
                if kept is not None and now - kept[1] < COUNTS_KEPT:
                    self._counts.move_to_end(key)
                    out[w] = kept[0]
        return out

    def put(self, user_id: str, counts: dict[str, int], now: float) -> None:
        with self._lock:
            for w, n in counts.items():
                key = self._of(user_id, w)
                self._counts[key] = (n, now)
                self._counts.move_to_end(key)
            while len(self._counts) > self._size:
                self._counts.popitem(last=False)

    def forget(self, user_id: str) -> None:
        """Drop the user's counts: many of their messages were deleted (the retention
        sweep), and a count too high could have a rare word searched as a common one.
        (A few pruned or erased messages change a count little; it is counted again
        within COUNTS_KEPT seconds anyway.)"""
        with self._lock:
            for key in [key for key in self._counts if key[0] == user_id]:
                del self._counts[key]


class PostgresMessages(SharedMessages):
    """Messages: appends under the session's row lock, history windows, the search
    channels and the retention sweep's deletes."""

    _needs_embedding = ("embedding IS NULL AND content IS NOT NULL AND NOT is_pruned "
                        "ORDER BY created_at, session_id, turn_index")

    def __init__(self, conn: PostgresPartitions) -> None:
        super().__init__(conn)
        self._pg = conn
        self._counts = WordCounts()

    def append_messages(
        self, user_id: str, session_id: str, messages: Sequence[NewMessage],
        token_counts: Sequence[int], content_hashes: Sequence[str | None], now: float,
        chain_hashes: Sequence[str | None] | None = None, expires_at: float | None = None,
    ) -> list[Message]:
        # No savepoint: nothing here raises an error a caller goes on from (the row lock
        # keeps the turns unique; NotFound comes before any write).
        with self._pg.txn(savepoint=False) as conn:
            # The session's row lock: concurrent appends to one session take turns, so
            # turns stay unique. Taken by the update itself, which returns the new count.
            row = conn.execute(
                "UPDATE sessions SET turn_count = turn_count + %s, updated_at = %s, "
                "expires_at = coalesce(%s, expires_at) "
                "WHERE user_id = %s AND session_id = %s RETURNING turn_count",
                (len(messages), now, expires_at, user_id, session_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"no session {session_id!r} for user {user_id!r}")
            out = new_messages(user_id, session_id, messages, token_counts, content_hashes,
                               chain_hashes, int(row[0]) - len(messages), now)
            with conn.cursor() as cur:
                cur.executemany(POSTGRES.sql(INSERT_MESSAGE),
                                [message_params(m, Jsonb) for m in out])
        return out

    def recent_messages(
        self, user_id: str, session_id: str, token_budget: int, *,
        before_turn: int | None = None, limit: int = 512,
    ) -> list[Message]:
        tables = self._pg.tables(user_id)
        query, params = recent_query(
            MESSAGE_COLUMNS, user_id, session_id, before_turn, mark="%s",
            active="NOT is_compressed AND NOT is_pruned", nonneg="greatest",
            table=tables.messages,
        )
        rows = self._pg.rows_in(tables, query, (*params, limit, token_budget))
        return [MAP.message(r) for r in rows]

    def find_chain(self, user_id: str, chain_hashes: Sequence[str]) -> list[Message]:
        if not chain_hashes:
            return []
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE user_id = %s "
            "AND chain_hash = ANY(%s) ORDER BY session_id, turn_index",
            (user_id, list(dict.fromkeys(chain_hashes))),
        )
        return [MAP.message(r) for r in rows]

    def mark_compressed(
        self, user_id: str, session_id: str, message_ids: Sequence[str], summary_id: str
    ) -> None:
        with self._pg.txn() as conn:
            conn.execute(
                "UPDATE messages SET is_compressed = true, compressed_summary_id = %s "
                "WHERE user_id = %s AND session_id = %s AND message_id = ANY(%s)",
                (summary_id, user_id, session_id, list(message_ids)),
            )
            conn.execute(self._sql(BUMP_HISTORY_VERSION), (user_id, session_id))

    def set_message_embeddings(self, user_id: str, items: Sequence[tuple[str, Vector]]) -> None:
        self._write_many(
            "UPDATE messages SET embedding = %s WHERE user_id = %s AND message_id = %s "
            "AND NOT is_pruned",
            [(as_vector(self._pg.dim, v), user_id, mid) for mid, v in items],
        )

    def nearest_messages(
        self, user_id: str, vector: Vector, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        q = as_vector(self._pg.dim, vector)
        where = "user_id = %s AND embedding IS NOT NULL"
        params: list[Any] = [q, user_id]
        if session_id is not None:
            where += " AND session_id = %s"
            params.append(session_id)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS}, 1 - (embedding <=> %s) FROM messages WHERE {where} "
            "ORDER BY embedding <=> %s LIMIT %s",
            (*params, q, k),
        )
        return [(MAP.message(r), float(r[-1])) for r in rows]

    def get_message_vectors(self, user_id: str, message_ids: Sequence[str]
                            ) -> dict[str, Vector]:
        if not message_ids:
            return {}
        rows = self._rows(
            "SELECT message_id, embedding FROM messages WHERE user_id = %s "
            "AND message_id = ANY(%s) AND embedding IS NOT NULL AND NOT is_pruned",
            (user_id, list(message_ids)),
        )
        return {mid: cast(Vector, vector_array(v)) for mid, v in rows}

    def messages_at(self, user_id: str, turns: Sequence[tuple[str, int]]) -> list[Message]:
        places = list(dict.fromkeys(turns))
        if not places:
            return []
        # A key look-up per place, the places an array join (an OR of them, or a UNION
        # of a look-up each, costs more to plan over the partitions than to run)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages JOIN unnest(%s::text[], %s::integer[]) "
            "AS p (sid, turn) ON session_id = p.sid AND turn_index = p.turn "
            "WHERE user_id = %s",
            ([sid for sid, _ in places], [turn for _, turn in places], user_id))
        return [MAP.message(r) for r in rows]

    def keyword_messages(
        self, user_id: str, query: str, k: int, session_id: str | None = None
    ) -> list[tuple[Message, float]]:
        text = search_text(query)
        if text is None:
            return []
        if session_id is None:
            words = text.split(" or ")
            counts = self._word_counts(user_id, words)
            if sum(counts) > RANK_ALL:
                return self._bounded(user_id, text, words, counts, k)
        return self._ranked(user_id, text, text, k, session_id)

    def _ranked(self, user_id: str, text: str, rank_by: str, k: int,
                session_id: str | None = None) -> list[tuple[Message, float]]:
        """The best ``k`` of the user's messages that ``text`` matches, ranked by how well
        they match ``rank_by`` (both search_text). Under row-level security the GIN probe
        runs in memd_keyword_message_ranks (sql/postgres/028), and the rows are read
        through the policies."""
        if current_actor() is not None:
            rows = self._rows(
                f"SELECT {MESSAGE_COLUMNS}, k.rank FROM memd_keyword_message_ranks(%s, "
                "websearch_to_tsquery('english', %s), websearch_to_tsquery('english', %s), "
                "%s, %s) AS k (kid, kat, rank) "
                "JOIN messages ON user_id = %s AND message_id = k.kid AND created_at = k.kat "
                "AND NOT is_pruned ORDER BY k.rank DESC, message_id",
                (user_id, text, rank_by, k, session_id, user_id))
            return ranked(rows, MAP.message)
        # a pruned message keeps its keyword vector (a trigger derives it from the text,
        # which stays for its owner): the search skips it
        where = ("user_id = %s AND content_tsv @@ websearch_to_tsquery('english', %s) "
                 "AND NOT is_pruned")
        args: list[Any] = [rank_by, user_id, text]
        if session_id is not None:
            where += " AND session_id = %s"
            args.append(session_id)
        rows = self._rows(
            f"SELECT {MESSAGE_COLUMNS}, "
            "ts_rank(content_tsv, websearch_to_tsquery('english', %s)) AS r "
            f"FROM messages WHERE {where} ORDER BY r DESC, message_id LIMIT %s",
            (*args, k),
        )
        return ranked(rows, MAP.message)

    def _word_counts(self, user_id: str, words: list[str]) -> list[int]:
        """How many of the user's messages each of ``words`` matches, up to RANK_ALL + 1;
        a word counted less than COUNTS_KEPT seconds ago is not counted again."""
        now = time.monotonic()
        known = self._counts.get(user_id, words, now)
        missing = [w for w in words if w not in known]
        if missing:
            if current_actor() is not None:  # the GIN probes in a function (028)
                tsqueries = ", ".join(["websearch_to_tsquery('english', %s)"] * len(missing))
                [(found,)] = self._rows(
                    f"SELECT memd_keyword_message_counts(%s, ARRAY[{tsqueries}], %s)",
                    (user_id, *missing, RANK_ALL + 1))
            else:
                one = ("(SELECT count(*) FROM (SELECT 1 FROM messages WHERE user_id = %s "
                       "AND content_tsv @@ websearch_to_tsquery('english', %s) "
                       "AND NOT is_pruned LIMIT %s) AS c)")
                [found] = self._rows("SELECT " + ", ".join([one] * len(missing)),
                                     [x for w in missing for x in (user_id, w, RANK_ALL + 1)])
            counted = dict(zip(missing, (int(n) for n in found), strict=True))
            self._counts.put(user_id, counted, now)
            known.update(counted)
        return [known[w] for w in words]

    def _bounded(self, user_id: str, text: str, words: list[str], counts: list[int],
                 k: int) -> list[tuple[Message, float]]:
        """The best ``k`` by the whole query (``text``) among the matches of its rarest
        ``words`` (RARE_MATCHES at most together, at any age), or without such a word
        among the user's NEWEST_MESSAGES newest messages (``counts``: the words'
        :meth:`_word_counts`)."""
        rare = rarest(words, counts, RARE_MATCHES)
        if rare:
            return self._ranked(user_id, " or ".join(rare), text, k)
        # The newest sessions' last turns, NEWEST_MESSAGES in all: a btree probe per
        # session, then the keyword test on those rows alone (MATERIALIZED keeps the
        # planner from reading every match's GIN postings instead).
        take: list[tuple[str, int]] = []
        left = NEWEST_MESSAGES
        for sid, turns in self._rows(
                "SELECT session_id, turn_count FROM sessions WHERE user_id = %s "
                "ORDER BY created_at DESC, session_id LIMIT 100", (user_id,)):
            if left <= 0:
                break
            n = min(int(turns), left)
            take.append((sid, int(turns) - n))  # its turns after that one
            left -= n
        if not take:
            return []
        rows = self._rows(
            f"WITH recent AS MATERIALIZED (SELECT {MESSAGE_COLUMNS}, content_tsv "
            "FROM messages JOIN unnest(%s::text[], %s::integer[]) AS s (sid, after_turn) "
            "ON session_id = s.sid AND turn_index > s.after_turn "
            "WHERE user_id = %s AND NOT is_pruned) "
            f"SELECT {MESSAGE_COLUMNS}, "
            "ts_rank(content_tsv, websearch_to_tsquery('english', %s)) AS r FROM recent "
            "WHERE content_tsv @@ websearch_to_tsquery('english', %s) "
            "ORDER BY r DESC, message_id LIMIT %s",
            ([t[0] for t in take], [t[1] for t in take], user_id, text, text, k))
        return ranked(rows, MAP.message)

    def delete_inactive_messages(self, user_id: str, before: float) -> tuple[int, int]:
        with self.transaction():
            sessions = self._inactive_sessions(user_id, before)
            if not sessions:
                return 0, 0
            deleted = self._write("DELETE FROM messages WHERE user_id = %s "
                                  "AND session_id = ANY(%s)", (user_id, sessions))
            self._write_many(self._sql(BUMP_HISTORY_VERSION),
                             [(user_id, s) for s in sessions])
        self._counts.forget(user_id)
        return deleted, len(sessions)

