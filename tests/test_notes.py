"""The notes folder: each Markdown file a standing instruction of the user (top level)
or of a workspace (a subfolder), kept in step with a running daemon and given to every
compiled context of its scope.

Checks against the running daemon poll until the change is visible, failing after a
generous deadline; how soon a change is seen (the target is 2 s) is measured by
bench/bench_watch.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from pg import open_engine
from sanitizer_corpus import GHP
from servers import FakeUpstream, poll, serve

import memd
from memd.config import load_settings
from memd.engine.block.compile import NOTE_KIND, Candidate, fit_notes, pack_memory_block
from memd.engine.learning.notes import NoteCache, NotesFolder, split, stored_notes
from memd.engine.learning.write import NOTE_TAG
from memd.engine.memory import Memd
from memd.server.app import create_app
from memd.types import Memory, Tier


def save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")  # hidden: the watcher skips it
    tmp.write_text(text)
    os.replace(tmp, path)


class Running:
    def __init__(self, base: str, upstream: FakeUpstream, engine: Memd, notes: Path) -> None:
        self.base = base
        self.upstream = upstream
        self.engine = engine
        self.notes = notes

    def search(self, query: str, workspace: str | None = None) -> list[str]:
        prefix = f"/w/{workspace}" if workspace else ""
        r = httpx.post(f"{self.base}{prefix}/v1/search", json={"query": query})
        assert r.status_code == 200, r.text
        return [h["text"] for h in r.json()["hits"]]

    def sent(self, question: str, workspace: str | None = None) -> str:
        """The notes in the memory block the model received for a new conversation
        asking ``question``. (The fake model echoes its prompt, so a past answer,
        recalled, may hold a note's words: the call's report tells notes apart.)"""
        prefix = f"/w/{workspace}" if workspace else ""
        body = {"model": "m", "messages": [{"role": "user", "content": question}]}
        r = httpx.post(f"{self.base}{prefix}/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        report = httpx.get(f"{self.base}/v1/calls/{r.headers['x-memd-call']}").json()
        injected = str(report["report"]["injected"] or "")
        assert injected in str(self.upstream.requests[-1]["messages"][-1]["content"])
        notes = [i["text"] for i in report["report"]["items"] if i["kind"] == "note"]
        assert all(line in injected for text in notes for line in text.splitlines())
        return "\n".join(notes)

    def context(self, question: str, workspace: str | None = None) -> str:
        """The notes in the native compiled context for ``question``."""
        prefix = f"/w/{workspace}" if workspace else ""
        r = httpx.post(f"{self.base}{prefix}/v1/context",
                       json={"messages": [{"role": "user", "content": question}]})
        assert r.status_code == 200, r.text
        ids = [i["id"] for i in r.json()["report"]["items"] if i["kind"] == "note"]
        texts = [m.text for m in (self.engine.store.get_memory("local", i) for i in ids) if m]
        block = "\n".join(str(m.get("content")) for m in r.json()["messages"])
        assert all(text.splitlines()[-1] in block for text in texts)
        return "\n".join(texts)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Running]:
    upstream = FakeUpstream()
    with serve(upstream.app) as up:
        settings = replace(load_settings(data_dir=tmp_path / "data"),
                           upstream_url=f"{up}/v1", job_interval=0.05)
        engine = memd.open(settings=settings)
        try:
            with serve(create_app(engine, settings, watch_notes=True)) as base:
                yield Running(base, upstream, engine, settings.notes_path)
        finally:
            engine.close()


RULE = "Always answer in British English and cite the file you changed."
RULE2 = "Always answer in French and never use emoji."


def test_adding_editing_and_deleting_a_note_reaches_context_and_search(
    daemon: Running,
) -> None:
    note = daemon.notes / "style.md"
    save(note, f"# Style\n\n{RULE}\n")
    # the question shares no word with the note: it comes through its own channel
    poll(lambda: RULE in daemon.sent("what is the capital of Peru"),
         "the new note in the proxied context")
    assert RULE in daemon.context("what is the capital of Peru")
    assert any(RULE in t for t in daemon.search("British English"))

    save(note, f"# Style\n\n{RULE2}\n")
    poll(lambda: RULE2 in daemon.sent("name a large river"),
         "the edited note in the proxied context")
    sent = daemon.sent("name a large river")
    assert RULE not in sent and sent.count(RULE2) == 1  # once: not also by retrieval
    assert any(RULE2 in t for t in daemon.search("French emoji"))
    assert not any(RULE in t for t in daemon.search("British English"))

    note.unlink()
    poll(lambda: RULE2 not in daemon.sent("how tall is Everest"),
         "the deleted note gone from the proxied context")
    assert not any(RULE2 in t for t in daemon.search("French emoji"))
    assert stored_notes(daemon.engine.store, "local") == []


def test_a_workspace_note_reaches_only_its_workspace(daemon: Running) -> None:
    rule = "Run the tests with make check before every commit."
    save(daemon.notes / "proj" / "AGENTS.md", f"# Agents\n\n{rule}\n")
    poll(lambda: rule in daemon.sent("hello there", workspace="proj"),
         "the workspace note in its workspace's context")
    assert rule in daemon.context("hello there", workspace="proj")
    assert rule not in daemon.sent("hello there", workspace="other")
    assert rule not in daemon.sent("hello there")
    assert rule not in daemon.context("hello there")
    [mem] = stored_notes(daemon.engine.store, "local")
    assert mem.workspace == "proj" and mem.tier == Tier.PROCEDURAL
    assert mem.metadata["note_path"] == "proj/AGENTS.md" and NOTE_TAG in mem.tags


def test_a_secret_in_a_note_is_stored_as_a_placeholder(daemon: Running) -> None:
    save(daemon.notes / "deploy.md", f"Deploy with the token {GHP} from CI.\n")
    poll(lambda: bool(stored_notes(daemon.engine.store, "local")), "the note stored")
    [mem] = stored_notes(daemon.engine.store, "local")
    assert GHP not in mem.text and "[API_KEY_1]" in mem.text
    assert "[API_KEY_1]" in daemon.sent("how do I deploy")
    assert GHP not in str(daemon.upstream.requests[-1])


def test_startup_sync_catches_what_changed_while_the_daemon_was_down(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    notes = settings.notes_path
    save(notes / "keep.md", "Keep answers short.")
    save(notes / "gone.md", "Use tabs.")
    with memd.open(settings=settings) as engine:
        assert NotesFolder(engine).sync() == {"added": 2, "updated": 0, "retired": 0}
        assert NotesFolder(engine).sync() == {"added": 0, "updated": 0, "retired": 0}
    (notes / "gone.md").unlink()
    save(notes / "keep.md", "Keep answers very short.")
    save(notes / "bad name!" / "x.md", "not a workspace")  # left out, with a warning
    save(notes / ".hidden.md", "left out")
    with memd.open(settings=settings) as engine:
        assert NotesFolder(engine).sync() == {"added": 0, "updated": 1, "retired": 1}
        assert [m.text for m in stored_notes(engine.store, "local")] == [
            "Keep answers very short."]


def test_the_notes_channel_and_write_path_on_each_backend(tmp_path: Path,
                                                         backend: str) -> None:
    notes = tmp_path / "notes"
    save(notes / "tabs.md", "I prefer tabs over spaces")
    save(notes / "proj" / "rules.md", "Run make check before committing.")
    with open_engine(backend, tmp_path / "data", notes_dir=notes) as engine:
        NotesFolder(engine).sync()
        # the channel: the scope's notes first, whatever the query, and only once
        ctx = engine.context("local", messages=[{"role": "user", "content": "tabs?"}],
                             workspace="proj")
        block = str(ctx.messages[0]["content"])
        assert block.count("I prefer tabs over spaces") == 1
        assert "Run make check" in block
        other = engine.context("local", messages=[{"role": "user", "content": "tabs?"}])
        assert "Run make check" not in str(other.messages)
        [tabs] = [m for m in stored_notes(engine.store, "local") if m.workspace is None]
        engine.store.delete_memory("local", [m.id for m in stored_notes(
            engine.store, "local") if m.workspace == "proj"][0])
        # the same words, and the opposite: neither touches the note
        engine.add("I prefer tabs over spaces", "local")
        engine.add("I don't prefer tabs over spaces", "local")
        [note] = stored_notes(engine.store, "local")
        assert note.id == tabs.id and note.is_active and note.superseded_by is None
        assert note.access_count == tabs.access_count


def test_a_demoted_note_is_restored_by_the_next_sync(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    save(settings.notes_path / "n.md", "Answer in haiku.")
    with memd.open(settings=settings) as engine:
        folder = NotesFolder(engine)
        folder.sync()
        [note] = stored_notes(engine.store, "local")
        engine.store.update_memory("local", note.id, tier=Tier.EPISODIC, expires_at=1.0)
        assert folder.sync()["updated"] == 1
        [again] = stored_notes(engine.store, "local")
        assert again.id == note.id and again.tier == Tier.PROCEDURAL
        assert again.expires_at is None


def _note(i: int, words: int) -> Candidate:
    text = " ".join(f"word{i}x{j}" for j in range(words))
    from memd.models.tokens import count_text

    return Candidate(NOTE_KIND, f"n{i}", text, count_text(text), 1.0)


def test_notes_over_their_share_are_cut_fairly_and_come_first() -> None:
    small, big1, big2 = _note(0, 5), _note(1, 400), _note(2, 400)
    memory = Candidate("memory", "m", "a retrieved memory", 4, 0.9)
    fitted = fit_notes([small, big1, big2, memory], 300, None)
    by_id = {c.id: c for c in fitted}
    assert by_id["n0"] == small  # fits its share: whole
    assert by_id["n1"].text.endswith(" [...]") and by_id["n2"].text.endswith(" [...]")
    assert abs(by_id["n1"].tokens - by_id["n2"].tokens) <= 8  # equal shares, cut at words
    budget = 1200
    facts, mems, lines, tokens = pack_memory_block(
        [Candidate("fact", "f", "name: Ada", 3, 1.0)], [small, big1, big2, memory], budget, None,
        share=0.25)
    assert tokens <= budget
    assert lines[1].startswith("### Standing instructions")
    # the notes come first, within their share of the budget: the rest is what was found
    assert [m.id for m in mems] == ["n0", "n1", "n2", "m"] and [f.id for f in facts] == ["f"]
    notes_tokens = sum(m.tokens + 2 for m in mems if m.kind == NOTE_KIND)
    assert notes_tokens <= budget // 4 < sum(c.tokens for c in (small, big1, big2))


def test_a_long_note_is_split_at_headings() -> None:
    text = "# A\n" + "a " * 30 + "\n# B\n" + "b " * 30 + "\n# C\n" + "c " * 30
    parts = split(text, 80)
    assert len(parts) == 3 and [p[:3] for p in parts] == ["# A", "# B", "# C"]
    assert split("short", 80) == ["short"] and split("", 80) == []
    assert all(len(p) <= 80 for p in split("x" * 500, 80))


class _NotesStore:
    """A store whose notes scan answers ``notes`` and records which thread read them,
    each read first waiting for ``go`` (set: no wait); it holds no style rule."""

    concurrent_reads = True

    def __init__(self, mem: Memory) -> None:
        self.notes = [mem]
        self.reads: list[str] = []
        self.go = threading.Event()
        self.go.set()

    def in_transaction(self) -> bool:
        return False

    def side_reads(self) -> nullcontext[None]:
        return nullcontext()

    def list_memories(self, user_id: str, flt: object, limit: int = 100,
                      order: str = "created_at") -> list[Memory]:
        if order != "created_at":
            return []  # the style rules' read, after the notes'
        self.go.wait(10)
        self.reads.append(threading.current_thread().name)
        return list(self.notes)


def test_the_notes_channel_is_read_again_aside_while_calls_go_on() -> None:
    """Past its TTL the channel's answer is read again in a side worker; calls meanwhile
    get the answer at hand without waiting for the scan; a clear during that read keeps
    it from being kept; past STALE a call reads for itself."""
    now = [100.0]
    cache = NoteCache(clock=lambda: now[0])
    first = memory_note("Answer in British English.")
    store = _NotesStore(first)
    ids = lambda: [c.id for c in cache.candidates(store, "u", ("",))]  # noqa: E731
    assert ids() == [first.id] and store.reads == ["MainThread"]
    assert ids() == [first.id] and len(store.reads) == 1  # within the TTL: kept
    second = memory_note("Answer in French.")
    store.notes = [second]
    store.go.clear()
    now[0] += NoteCache.TTL
    assert ids() == [first.id]  # the read aside waits on go: the call does not
    assert ids() == [first.id] and len(store.reads) == 1  # one read at a time
    store.go.set()
    poll(lambda: ids() == [second.id], "the answer read aside")
    assert store.reads[1].startswith("memd-side") and len(store.reads) == 2
    # a clear while a read is under way: what it read is not kept
    third = memory_note("Answer in German.")
    store.notes = [third]
    store.go.clear()
    now[0] += NoteCache.TTL
    assert ids() == [second.id]
    cache.clear()
    store.go.set()
    poll(lambda: len(store.reads) == 3, "the read aside done")
    assert ids() == [third.id] and store.reads[3] == "MainThread"  # cleared: read in line
    # an answer older than STALE is read in line, not served
    store.notes = [first]
    now[0] += NoteCache.STALE
    assert ids() == [first.id] and store.reads[4] == "MainThread"


def memory_note(text: str) -> Memory:
    return Memory(id=text.split()[2].lower(), user_id="u", text=text, content_hash="h",
                  token_count=5, created_at=1.0, updated_at=1.0, tier=Tier.PROCEDURAL,
                  tags=(NOTE_TAG,), metadata={"note_path": "a.md"})
