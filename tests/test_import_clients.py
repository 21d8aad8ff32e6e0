"""An imported conversation lists the client whose history it was read from, and a
listing filtered by client finds it, as it finds a live session by its identity."""

from __future__ import annotations

from pathlib import Path

from history_files import WRITERS
from pg import open_engine

from memd.engine.conversation.identity import Identity
from memd.engine.conversation.overview import sessions_page
from memd.imports import SOURCES, import_conversations

USER = "alex"


def test_imported_sessions_list_and_filter_by_their_client(backend: str,
                                                           tmp_path: Path) -> None:
    with open_engine(backend, tmp_path / "d") as engine:
        for source in ("chatgpt", "claude-code"):
            path, _ = WRITERS[source](tmp_path / source)
            import_conversations(engine, USER, SOURCES[source].conversations([path]),
                                 run_jobs=True)
        live = engine.create_session(USER, metadata={
            "identity": Identity("opencode", "gpt-4o", None).to_metadata()})
        rows = sessions_page(engine.store, USER)["data"]
        clients = {r["id"]: r["client"] for r in rows}
        assert clients.pop(live.id) == "opencode"
        assert sorted(set(clients.values())) == ["chatgpt", "claude-code"]
        for client in ("chatgpt", "claude-code"):
            found = sessions_page(engine.store, USER, client=client)["data"]
            assert found and {r["client"] for r in found} == {client}
            assert {r["id"] for r in found} == {i for i, c in clients.items()
                                                if c == client}
        only = sessions_page(engine.store, USER, client="opencode")["data"]
        assert [r["id"] for r in only] == [live.id]


def test_an_identity_that_names_its_client_wins_over_the_metadata(backend: str,
                                                                  tmp_path: Path) -> None:
    with open_engine(backend, tmp_path / "d") as engine:
        session = engine.create_session(USER, metadata={
            "client": "chatgpt", "identity": Identity("aider", None, None).to_metadata()})
        assert sessions_page(engine.store, USER)["data"][0]["client"] == "aider"
        assert sessions_page(engine.store, USER, client="chatgpt")["data"] == []
        found = sessions_page(engine.store, USER, client="aider")["data"]
        assert [r["id"] for r in found] == [session.id]
