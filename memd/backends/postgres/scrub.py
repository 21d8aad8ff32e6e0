"""``memd forget --scrub`` on PostgreSQL: rewrite the database's files so that no deleted
row's bytes remain in them.

A DELETE only marks a row dead. Its bytes stay in the table's pages, its TOAST and its
indexes until a VACUUM reuses the space, and a plain VACUUM marks the space free without
overwriting it; the WAL holds the row as inserted (and, with full-page writes, whole
pages as they were); the planner's statistics (``pg_statistic``) keep sampled column
values. So, in order:

1. ``ANALYZE``: the statistics are sampled again from the rows that remain (the old
   ones become dead rows of ``pg_statistic``).
2. ``VACUUM (FULL)`` of the whole database: every table, each partition, its TOAST
   table and indexes (and the catalogs, ``pg_statistic`` among them) are rewritten into
   new files; the old files are emptied at once and unlinked at the next checkpoint.
3. ``CHECKPOINT``, then as many rounds of ``pg_switch_wal()`` and ``CHECKPOINT`` as
   ``pg_wal`` holds segment files, plus one. A checkpoint recycles the segments it no
   longer needs by renaming them for later use, with their old bytes; a switch ends the
   current segment and fills its rest with zeros. After those rounds every segment that
   existed has been written over whole or removed.

What this cannot reach is reported, not hidden: tables the connecting role may not
vacuum (VACUUM skips them with a warning), and WAL kept elsewhere (an archive, a
replication slot, ``wal_keep_size``: those segments stay until their retention ends),
besides backups, replicas' own files and free blocks of the disk. It needs a role that
may run ``CHECKPOINT`` and ``pg_switch_wal()`` and list ``pg_wal`` (a superuser, or one
granted ``pg_checkpoint``, ``pg_monitor`` and EXECUTE on ``pg_switch_wal``), and it
locks each table while it rewrites it, so it is a maintenance step, not part of every
erasure.
"""

from __future__ import annotations

from typing import Any

import psycopg

from memd.errors import StorageError

#: What pg_ls_waldir() lists that is a WAL segment (not a .history or .partial file).
SEGMENT = "^[0-9A-F]{24}$"
NEEDS = ("a superuser, or a role granted pg_checkpoint and pg_monitor with EXECUTE on "
         "pg_switch_wal()")


def deep_scrub(conn: Any) -> list[str]:
    """Run the steps of the module docstring on autocommit connection ``conn``; what was
    done and what remains, one line each. StorageError when a step is refused."""
    skipped: list[str] = []

    def notice(diag: Any) -> None:
        said = diag.message_primary or ""
        if "skipping" in said and "vacuum" in said:  # a table the role may not vacuum
            skipped.append(said)

    done: list[str] = []
    conn.add_notice_handler(notice)
    try:
        conn.execute("ANALYZE")
        done.append("statistics sampled again (ANALYZE)")
        conn.execute("VACUUM (FULL)")
        done.append("every table, partition, TOAST table and index rewritten "
                    "(VACUUM FULL)")
        conn.execute("CHECKPOINT")
        [segments] = conn.execute("SELECT count(*) FROM pg_ls_waldir() WHERE name ~ %s",
                                  (SEGMENT,)).fetchone()
        for _ in range(int(segments) + 1):
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
        done.append(f"WAL written over: {int(segments) + 1} segment switches and "
                    "checkpoints")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StorageError(f"PostgreSQL refused a scrub step ({exc}); it needs {NEEDS}. "
                           f"Done before: {'; '.join(done) or 'nothing'}") from exc
    except psycopg.Error as exc:
        raise StorageError(f"PostgreSQL: the scrub failed: {exc}") from exc
    finally:
        conn.remove_notice_handler(notice)
    if skipped:
        done.append(f"NOT rewritten, the role may not vacuum them ({len(skipped)}): "
                    + "; ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return done + kept_wal(conn)


def kept_wal(conn: Any) -> list[str]:
    """What keeps WAL segments beyond this server's ``pg_wal`` recycling, one line each
    (nothing when the scrub reached every copy the server keeps)."""
    out = []
    row = conn.execute(
        "SELECT current_setting('archive_mode'), current_setting('wal_keep_size'), "
        "(SELECT count(*) FROM pg_replication_slots), "
        "current_setting('summarize_wal', true)").fetchone()
    archive, keep, slots, summaries = row
    if archive != "off":
        out.append("NOT reached: archive_mode is on: the WAL archive keeps its copies "
                   "until its retention removes them")
    if keep not in ("0", "0MB", "0kB"):
        out.append(f"NOT reached: wal_keep_size = {keep} keeps that much older WAL "
                   "(further CHECKPOINTs after as much new WAL pass it)")
    if int(slots):
        out.append(f"NOT reached: {slots} replication slot(s) keep WAL until their "
                   "consumers confirm it; replicas keep their own copies")
    if summaries == "on":
        out.append("summarize_wal is on: WAL summaries name changed blocks, not their "
                   "contents")
    return out
