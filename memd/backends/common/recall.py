"""What memd keeps of what went by, besides messages and memories, the same SQL on both
backends: the digests of what was forgotten, the paragraphs seen in user messages, and
the sessions of answers an upstream keeps."""

from __future__ import annotations

from collections.abc import Sequence

from memd.backends.common.connection import Part
from memd.types import ParagraphSeen


class Forgotten(Part):
    """What was forgotten (memd.backends.roles.ForgottenStore)."""

    def add_forgotten(self, user_id: str, digests: Sequence[str], now: float) -> None:
        if not digests:
            return
        d = self._dialect
        self._write_many(
            d.sql(f"{d.ignore_prefix} forgotten (user_id, digest, created_at) "
                  f"VALUES (?, ?, ?){d.ignore_suffix}"),
            [(user_id, digest, now) for digest in dict.fromkeys(digests)])

    def forgotten(self, user_id: str, digests: Sequence[str]) -> set[str]:
        if not digests:
            return set()
        test, values = self._dialect.among("digest", list(dict.fromkeys(digests)))
        rows = self._rows(f"SELECT digest FROM forgotten WHERE user_id = {self._dialect.mark} "
                          f"AND {test}", (user_id, *values))
        return {str(r[0]) for r in rows}


class Paragraphs(Part):
    """Paragraphs seen in user messages (memd.backends.roles.ParagraphStore)."""

    def see_paragraphs(self, user_id: str, session_id: str, message_id: str,
                       keys: Sequence[str], now: float) -> list[ParagraphSeen]:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        d = self._dialect
        test, values = d.among("paragraph_hash", keys)
        known = {str(r[0]): r for r in self._rows(
            "SELECT paragraph_hash, first_session_id, first_message_id, last_session_id, "
            f"sessions FROM paragraphs_seen WHERE user_id = {d.mark} AND {test}",
            (user_id, *values))}
        seen: list[ParagraphSeen] = []
        for key in keys:
            row = known.get(key)
            if row is None:
                self._write(d.sql(
                    f"{d.ignore_prefix} paragraphs_seen (user_id, paragraph_hash, "
                    "first_session_id, first_message_id, last_session_id, sessions, "
                    f"first_seen, last_seen) VALUES (?, ?, ?, ?, ?, 1, ?, ?){d.ignore_suffix}"),
                    (user_id, key, session_id, message_id, session_id, now, now))
                seen.append(ParagraphSeen(key, session_id, message_id, 1, True))
                continue
            fresh = row[3] != session_id
            if fresh:
                self._write(self._sql(
                    "UPDATE paragraphs_seen SET sessions = sessions + 1, last_session_id = ?, "
                    "last_seen = ? WHERE user_id = ? AND paragraph_hash = ?"),
                    (session_id, now, user_id, key))
            seen.append(ParagraphSeen(key, str(row[1]), str(row[2]), int(row[4]) + fresh,
                                      fresh))
        return seen

    def recurring_paragraphs(self, user_id: str, keys: Sequence[str]) -> set[str]:
        if not keys:
            return set()
        test, values = self._dialect.among("paragraph_hash", list(dict.fromkeys(keys)))
        rows = self._rows(
            f"SELECT paragraph_hash FROM paragraphs_seen WHERE user_id = {self._dialect.mark} "
            f"AND sessions > 1 AND {test}", (user_id, *values))
        return {str(r[0]) for r in rows}


class Responses(Part):
    """The sessions of answers kept upstream (memd.backends.roles.ResponseStore)."""

    def link_response(self, user_id: str, response_id: str, session_id: str,
                      now: float) -> None:
        d = self._dialect
        self._write(d.sql(f"{d.ignore_prefix} response_sessions (user_id, response_id, "
                          f"session_id, created_at) VALUES (?, ?, ?, ?){d.ignore_suffix}"),
                    (user_id, response_id, session_id, now))

    def response_session(self, user_id: str, response_id: str) -> str | None:
        rows = self._rows(self._sql(
            "SELECT session_id FROM response_sessions WHERE user_id = ? AND response_id = ?"),
            (user_id, response_id))
        return str(rows[0][0]) if rows else None
