"""``memd export`` and ``memd import`` on real stores: SQLite with sqlite-vec, and the test
run's embedded PostgreSQL.

The data dir is memd migrate's test store (sessions, messages with embeddings and
secrets, memories with vectors, supersession chains, facts, jobs, calls, usage, cached
embeddings, auth rows, unicode) plus a message holding an OpenAI-style project key. The
PostgreSQL store is that data dir copied by ``memd migrate``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pg
import pytest
from click.testing import CliRunner, Result
from test_migrate import DIM, TOKEN, build, migrated_template

import memd
from memd.backends.sqlite import SQLiteStore
from memd.cli import main
from memd.config import Settings
from memd.engine.memory import Memd
from memd.models.embedder import FakeEmbedder
from memd.types import MemoryFilter

PROJECT_KEY = "sk-proj-" + "Xq7vB2nR9kLm4TzW8yHc3FgJ6dPa5sEu1iOb0VtQxZr" * 2


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def ok(*args: str) -> Result:
    res = run(*args)
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("source")
    build(data_dir, 6, 24, 100)
    m = Memd(SQLiteStore(data_dir / "memd.db", dim=DIM), FakeEmbedder(DIM),
             Settings(data_dir=data_dir))
    try:
        s = m.create_session("alice", model="gpt-x")
        m.append(s.id, "alice", [{"role": "user",
                                  "content": f"deploy with OPENAI_API_KEY={PROJECT_KEY} please"}])
    finally:
        m.close()
    return data_dir


def export(tmp_path: Path, name: str, *where: str, originals: bool = False) -> bytes:
    out = tmp_path / name
    res = ok(*where, "export", str(out), *(["--originals"] if originals else []))
    assert "exported" in res.stderr
    return out.read_bytes()


def parse(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(x) for x in data.decode().splitlines()]
    return lines[0], lines[1:-1], lines[-1]


def sqlite_dir(tmp_path: Path, name: str) -> tuple[str, ...]:
    return ("--data-dir", str(tmp_path / name))


def pg_store(tmp_path: Path, name: str, dsn: str) -> tuple[str, ...]:
    return ("--data-dir", str(tmp_path / name), "--db", dsn)


@pytest.fixture
def pg_source(source_dir: Path) -> str:
    """A new database holding the source data dir (cloned from one migrated once)."""
    def setup(dsn: str) -> None:
        res = run("migrate", "--from", str(source_dir / "memd.db"), "--to", dsn,
                  "--partitions", "4,4,4", "--json")
        assert res.exit_code == 0, res.output

    return pg.database(("export-source", str(source_dir)), setup)


def check_round_trip(tmp_path: Path, src: tuple[str, ...],
                     target_for: Callable[[str], tuple[str, ...]]) -> None:
    for originals in (False, True):
        tag = "full" if originals else "redacted"
        first = export(tmp_path, f"{tag}-1.jsonl", *src, originals=originals)
        target = target_for(tag)  # an empty store for each form
        res = ok(*target, "import", str(tmp_path / f"{tag}-1.jsonl"))
        assert "the store matches the file's checksums" in res.stdout
        assert ("no original message contents" in res.stdout) is not originals
        second = export(tmp_path, f"{tag}-2.jsonl", *target, originals=originals)
        assert second == first  # byte for byte
        head, rows, end = parse(first)
        assert head["originals"] is originals
        counts = {t["name"]: 0 for t in head["tables"]}
        for line in rows:
            counts[line["table"]] += 1
        assert {t: e["rows"] for t, e in end["tables"].items()} == counts
        for table in ("users", "sessions", "messages", "memories", "facts", "jobs", "calls",
                      "usage_log", "embedding_cache", "memory_entities", "forgotten"):
            assert counts[table] > 0, table
        vectors = [r["row"]["embedding"] for r in rows
                   if r["table"] in ("messages", "memories") and r["row"]["embedding"]]
        assert len(vectors) > 100
        # rerunning the import writes nothing and says so
        res = ok(*target, "import", str(tmp_path / f"{tag}-1.jsonl"))
        assert "nothing to import" in res.stdout


def test_sqlite_round_trip_is_byte_identical(source_dir: Path, tmp_path: Path) -> None:
    check_round_trip(tmp_path, ("--data-dir", str(source_dir)),
                     lambda tag: sqlite_dir(tmp_path, f"copy-{tag}"))


def test_postgres_round_trip_is_byte_identical(pg_source: str, tmp_path: Path) -> None:
    check_round_trip(tmp_path, pg_store(tmp_path, "src", pg_source),
                     lambda tag: pg_store(tmp_path, f"dst-{tag}", migrated_template()))


def test_postgres_full_export_has_migrates_checksums(source_dir: Path, tmp_path: Path) -> None:
    dsn = migrated_template()
    report = json.loads(ok("migrate", "--from", str(source_dir / "memd.db"), "--to", dsn,
                           "--json").stdout)
    _, _, end = parse(export(tmp_path, "pg.jsonl", *pg_store(tmp_path, "x", dsn),
                             originals=True))
    assert end["tables"].keys() == report["tables"].keys()
    for name, t in report["tables"].items():
        assert end["tables"][name] == {"rows": t["target_rows"],
                                       "checksum": t["target_checksum"]}, name


def test_secrets_only_with_originals(backend: str, source_dir: Path, pg_source: str,
                                     tmp_path: Path) -> None:
    src = (("--data-dir", str(source_dir)) if backend == "sqlite"
           else pg_store(tmp_path, "src", pg_source))
    redacted = export(tmp_path, "redacted.jsonl", *src)
    head, rows, _ = parse(redacted)
    assert head["originals"] is False and "sanitized" in head["note"]
    for secret in (PROJECT_KEY, "sk-proj-", TOKEN):
        assert secret.encode() not in redacted
    mine = [r["row"] for r in rows if r["table"] == "messages"
            and "OPENAI_API_KEY=" in (r["row"]["content"] or "")]
    assert len(mine) == 1 and mine[0]["content"] == mine[0]["sanitized"]
    full = export(tmp_path, "full.jsonl", *src, originals=True)
    assert PROJECT_KEY.encode() in full and TOKEN.encode() in full
    assert parse(full)[0]["originals"] is True


def test_stdout_export_is_the_file_export(source_dir: Path, tmp_path: Path) -> None:
    res = ok("--data-dir", str(source_dir), "export")
    assert res.stdout_bytes == export(tmp_path, "a.jsonl", "--data-dir", str(source_dir))


def test_search_works_after_import(backend: str, source_dir: Path, pg_source: str,
                                   tmp_path: Path) -> None:
    src: tuple[str, ...] = ("--data-dir", str(source_dir))
    dst = sqlite_dir(tmp_path, "copy")
    if backend == "postgres":
        src = pg_store(tmp_path, "src", pg_source)
        dst = pg_store(tmp_path, "copy", migrated_template())
    export(tmp_path, "a.jsonl", *src)
    ok(*dst, "import", str(tmp_path / "a.jsonl"))
    m = memd.open(tmp_path / "copy", embedder="fake",
                  **({"db": dst[-1]} if backend == "postgres" else {}))
    try:
        hits = m.search("Alice prefers tabs", "alice", k=5)
        assert any("Alice prefers tabs" in h.text for h in hits)
        store, flt = m.store, MemoryFilter()
        keyword = store.keyword_memories("alice", "prefers tabs", 5, flt)
        assert any("Alice prefers tabs" in x.text for x, _ in keyword)
        q = m.embedder.embed(["memory 3 about topic 3"])[0]
        assert store.nearest_memories("alice", q, 3, flt)
        found = store.keyword_messages("alice", "OPENAI_API_KEY deploy", 5)
        assert found and all(PROJECT_KEY not in (x.content or "") for x, _ in found)
    finally:
        m.close()


def corrupt(good: bytes, how: str) -> bytes:
    lines = good.decode().splitlines(keepends=True)
    if how == "not json":
        return b"this is not json\n"
    if how == "format":
        return good.replace(b'"format":"memd-export"', b'"format":"other"', 1)
    if how == "version":
        return good.replace(b'"version":1', b'"version":99', 1)
    if how == "checksum":  # one row changed, its line still valid JSON
        i = next(i for i, x in enumerate(lines) if '"table":"memories"' in x)
        line = json.loads(lines[i])
        line["row"]["content_text"] += "!"
        lines[i] = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        return "".join(lines).encode()
    if how == "no trailer":
        return "".join(lines[:-1]).encode()
    if how == "cut":
        return good[: len(good) // 2]
    if how == "cut in a character":  # a file cut inside a multi-byte character
        at = good.index("é".encode()) + 1
        return good[:at]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["not json", "format", "version", "checksum", "no trailer",
                                 "cut", "cut in a character"])
def test_bad_files_are_refused_before_writing(how: str, source_dir: Path,
                                              tmp_path: Path) -> None:
    good = export(tmp_path, "good.jsonl", "--data-dir", str(source_dir))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(corrupt(good, how))
    res = run("--data-dir", str(tmp_path / "copy"), "import", str(bad))
    assert res.exit_code == 2, res.output
    assert any(line.startswith("error: ") for line in res.stderr.splitlines())  # its own line
    assert "nothing was imported" in res.stderr
    assert {"checksum": "checksum", "cut": "truncated", "no trailer": "truncated",
            "cut in a character": "truncated",
            "version": "version 99", "format": "not a memd export",
            "not json": "not JSON"}[how] in res.stderr
    assert not (tmp_path / "copy").exists()  # not even an empty store


def test_bad_file_into_postgres_writes_nothing(pg_source: str, tmp_path: Path) -> None:
    good = export(tmp_path, "good.jsonl", *pg_store(tmp_path, "src", pg_source))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(corrupt(good, "checksum"))
    dsn = migrated_template()
    res = run(*pg_store(tmp_path, "dst", dsn), "import", str(bad))
    assert res.exit_code == 2 and "checksum" in res.stderr
    res = ok(*pg_store(tmp_path, "dst", dsn), "export", str(tmp_path / "empty.jsonl"))
    assert len((tmp_path / "empty.jsonl").read_text().splitlines()) == 2  # header, trailer


def count_rows(db: Path, table: str) -> int:
    conn = apsw.Connection(str(db))
    try:
        ((n,),) = conn.execute(f"SELECT count(*) FROM {table}").fetchall()
        assert isinstance(n, int)
        return n
    finally:
        conn.close()


def test_a_different_row_stops_the_import(source_dir: Path, tmp_path: Path) -> None:
    good = export(tmp_path, "good.jsonl", "--data-dir", str(source_dir))
    head, rows, _ = parse(good)
    ok("--data-dir", str(tmp_path / "copy"), "import", str(tmp_path / "good.jsonl"))
    db = tmp_path / "copy" / "memd.db"
    conn = apsw.Connection(str(db))
    with conn:  # one stored fact changed, one memory removed
        conn.execute("UPDATE facts SET value = 'emacs' WHERE rowid = (SELECT min(rowid) "
                     "FROM facts)")
        conn.execute("DELETE FROM memories WHERE rowid = (SELECT max(rowid) FROM memories)")
    conn.close()
    before = count_rows(db, "memories")
    res = run("--data-dir", str(tmp_path / "copy"), "import", str(tmp_path / "good.jsonl"))
    assert res.exit_code == 1, res.output
    assert "different data for 1 row(s)" in res.stderr and "facts" in res.stderr
    assert count_rows(db, "memories") == before  # the missing memory was not written


def test_an_export_imports_into_its_own_backend_only(source_dir: Path, tmp_path: Path) -> None:
    export(tmp_path, "a.jsonl", "--data-dir", str(source_dir))
    res = run(*pg_store(tmp_path, "dst", migrated_template()), "import",
              str(tmp_path / "a.jsonl"))
    assert res.exit_code == 2 and "memd migrate" in res.stderr


def test_help() -> None:
    for command in ("export", "import"):
        res = ok(command, "--help")
        assert "Usage:" in res.output and "--data-dir" in res.output
    assert "--originals" in ok("export", "--help").output


def test_a_sanitized_backup_imports_into_its_store_as_nothing(source_dir: Path,
                                                              tmp_path: Path) -> None:
    """The store's rows are compared in the file's form: the originals it holds do not
    make the backup's sanitized rows a conflict."""
    shutil.copytree(source_dir, tmp_path / "store")
    export(tmp_path, "a.jsonl", "--data-dir", str(tmp_path / "store"))
    res = ok("--data-dir", str(tmp_path / "store"), "import", str(tmp_path / "a.jsonl"))
    assert "nothing to import" in res.stdout
    full = export(tmp_path, "full.jsonl", "--data-dir", str(tmp_path / "store"),
                  originals=True)
    assert PROJECT_KEY.encode() in full  # the originals are still there


def test_import_refuses_while_a_daemon_serves(source_dir: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    export(tmp_path, "a.jsonl", "--data-dir", str(source_dir))
    monkeypatch.setattr("memd.cli.transfer.daemon_for", lambda ctx: object())
    res = run("--data-dir", str(tmp_path / "copy"), "import", str(tmp_path / "a.jsonl"))
    assert res.exit_code == 2 and "stop it before importing" in res.stderr
    assert not (tmp_path / "copy").exists()


def test_a_different_row_stops_a_postgres_import(pg_source: str, tmp_path: Path) -> None:
    import psycopg

    export(tmp_path, "a.jsonl", *pg_store(tmp_path, "src", pg_source))
    dsn = migrated_template()
    ok(*pg_store(tmp_path, "dst", dsn), "import", str(tmp_path / "a.jsonl"))
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE facts SET value = 'emacs' WHERE fact_id = "
                     "(SELECT min(fact_id) FROM facts)")
        conn.execute("DELETE FROM memories WHERE memory_id = "
                     "(SELECT max(memory_id) FROM memories)")
        conn.commit()
        before = conn.execute("SELECT count(*) FROM memories").fetchone()
    res = run(*pg_store(tmp_path, "dst", dsn), "import", str(tmp_path / "a.jsonl"))
    assert res.exit_code == 1 and "different data for 1 row(s)" in res.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == before
