"""A bulk import is searchable before the passages of its messages are embedded: the
messages' own vectors and full-text rows are written by the time
``import_conversations(..., passages_later=True)`` returns, the passages (which only
refine how a found message ranks) are left to ``embed_passages`` jobs, and once those
have run the store holds what the plain import stores. The texts the import's jobs
embed go to the model in one call per batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pg import open_engine
from test_import_equivalence import CONVERSATIONS, T0, USER, learnt

from memd.engine.background.jobs import passage_texts
from memd.engine.memory import Memd
from memd.imports import Conversation, Turn, import_conversations
from memd.types import MemoryFilter

CHATTY = Conversation("fixture", "c4", (
    Turn("user", "We spent the whole weekend repainting the kitchen walls in pale green. "
                 "By the way, I just canceled my Forbes subscription since I never read it.",
         T0 + 20 * 86_400),
    Turn("assistant", "Pale green sounds calm.", T0 + 20 * 86_400 + 5),
), client="fixture")
HISTORY = [*CONVERSATIONS, CHATTY]


def stored_user_messages(engine: Memd) -> list[Any]:
    return [m for s in engine.store.list_sessions(USER) for m in engine.messages(s.id, USER)
            if m.role == "user"]


def test_an_import_is_searchable_before_its_passages(backend: str, tmp_path: Path) -> None:
    with open_engine(backend, tmp_path / "plain") as plain:
        import_conversations(plain, USER, HISTORY, run_jobs=True)
        want = learnt(plain)
    with open_engine(backend, tmp_path / "later") as engine:
        import_conversations(engine, USER, HISTORY, run_jobs=True, passages_later=True)
        messages = stored_user_messages(engine)
        passages = passage_texts(messages)
        assert len(passages) == 2  # the chatty turn's two sentences
        assert engine.embedder.cached(passages) == [None, None]  # not embedded yet
        assert engine.store.messages_missing_embedding(USER, 100) == []  # all have one
        pending = engine.store.list_jobs("pending", USER, 100)
        assert [q.job.kind for q in pending] == ["embed_passages"]
        hits = engine.search("kitchen walls repainting", USER, k=3, kinds=["message"])
        assert hits and "kitchen" in hits[0].text
        while engine.jobs.run_due():
            pass
        assert all(v is not None for v in engine.embedder.cached(passages))
        assert learnt(engine) == want  # then it holds what the plain import holds


@pytest.mark.parametrize("later", [False, True])
def test_a_batch_goes_to_the_model_in_one_call(later: bool, tmp_path: Path) -> None:
    with open_engine("sqlite", tmp_path / "d") as engine:
        calls: list[list[str]] = []
        inner = engine.embedder.inner
        real = inner.embed

        def counted(texts: Any) -> Any:
            calls.append(list(texts))
            return real(texts)

        inner.embed = counted
        import_conversations(engine, USER, HISTORY, run_jobs=True, passages_later=later)
        memories = [m.text for m in engine.store.list_memories(USER, MemoryFilter())]
        assert memories  # extraction found something, which its jobs embedded
        assert len(calls) == 1  # messages, memories (and passages unless later) at once
        assert set(memories) <= set(calls[0])
        assert (set(passage_texts(stored_user_messages(engine))) <= set(calls[0])) \
            is not later
