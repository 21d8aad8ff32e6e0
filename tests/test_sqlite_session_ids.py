"""SQLite keeps session ids per user, as PostgreSQL does, and a data dir made before
that migrates with every message, its full-text entry and its vector kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import memd
from memd.backends.common import migrations
from memd.backends.sqlite import schema


def test_two_users_may_pin_the_same_session_id(tmp_path: Path) -> None:
    with memd.open(tmp_path, embedder="fake") as m:
        for user in ("alice", "bob"):
            m.create_session(user, session_id="work")
            m.append("work", user, [{"role": "user", "content": f"{user} deploys on Friday"}])
        for user in ("alice", "bob"):
            stored = m.store.get_messages(user, "work")
            assert [x.content for x in stored] == [f"{user} deploys on Friday"]


def test_an_older_data_dir_keeps_its_messages_and_their_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = migrations.pending

    def before_007(dialect: str, applied: set[int], where: str) -> list[migrations.Migration]:
        return [x for x in real(dialect, applied, where) if x.version < 7]

    monkeypatch.setattr(schema, "pending", before_007)
    with memd.open(tmp_path, embedder="fake") as m:
        assert m.store.schema_version() == 6
        # Today's code writes a message's sanitized copy (009), a job's update time
        # (010) and a session's title (011): the old schema gets those columns for these
        # writes only (007 rebuilds messages without the first; the others go again
        # before 010 and 011 add them).
        m.store.connection.write("ALTER TABLE messages ADD COLUMN sanitized TEXT")  # type: ignore[attr-defined]
        m.store.connection.write("ALTER TABLE jobs ADD COLUMN updated_at REAL")  # type: ignore[attr-defined]
        m.store.connection.write("ALTER TABLE sessions ADD COLUMN title TEXT")  # type: ignore[attr-defined]
        s = m.create_session("alice", session_id="work")
        m.append(s.id, "alice", [{"role": "user", "content": "the cluster runs kubernetes"},
                                 {"role": "assistant", "content": "noted"}])
        m.run_jobs()
        before = m.search("kubernetes cluster", "alice", kinds=("message",))
        m.store.connection.write("ALTER TABLE jobs DROP COLUMN updated_at")  # type: ignore[attr-defined]
        m.store.connection.write("ALTER TABLE sessions DROP COLUMN title")  # type: ignore[attr-defined]
    monkeypatch.setattr(schema, "pending", real)
    with memd.open(tmp_path, embedder="fake") as m:
        assert m.store.schema_version() == real("sqlite", set(), "latest")[-1].version
        assert [x.content for x in m.store.get_messages("alice", "work")] == [
            "the cluster runs kubernetes", "noted"]
        found = m.store.keyword_messages("alice", "kubernetes", 5)
        assert [x.content for x, _ in found] == ["the cluster runs kubernetes"]
        after = m.search("kubernetes cluster", "alice", kinds=("message",))
        assert [h.id for h in after] == [h.id for h in before] and after
        m.create_session("bob", session_id="work")  # a conflict before the migration
        m.append("work", "alice", [{"role": "user", "content": "and uses helm"}])
        assert m.session("work", "alice").turn_count == 3
