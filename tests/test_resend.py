"""What an agent sends again (memd.engine.conversation.resend): the checked copies, chain hashes and
token counts of its last request are reused for the messages it resends, and equal
what reading the request afresh gives; the session lookup asks for the newest hashes
first and still finds a session an old message branches from."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from memd.engine import validate as v
from memd.engine.conversation import chains
from memd.engine.conversation.chat import WindowInfo, finish_chat, prepare_chat
from memd.engine.conversation.resend import ResendCache
from memd.engine.memory import Memd
from memd.errors import InvalidInput
from memd.models.tokens import message_tokens

BASE: list[dict[str, Any]] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "read a.py"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n" * 1000},
]
STEP = [*BASE, {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]


def fresh(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str | None]]:
    """The request read without any cache: each message checked, then hashed."""
    clean = [v.check_message(v.sanitized(m), i) for i, m in enumerate(messages)]
    return clean, chains.chain_hashes(clean, None)


def test_a_resent_prefix_is_taken_from_the_last_request_and_equals_a_fresh_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the new messages are checked and hashed; an edited message and what follows
    it are read again; another user's requests are not looked at."""
    hashed: list[int] = []
    checked: list[int] = []
    real_hashes, real_check = chains.chain_hashes, v.check_message

    def counting_hashes(messages: list[dict[str, Any]], previous: str | None
                        ) -> list[str | None]:
        hashed.append(len(messages))
        return real_hashes(messages, previous)

    def counting_check(raw: Any, index: int | None = None) -> dict[str, Any]:
        checked.append(-1 if index is None else index)
        return real_check(raw, index)

    cache = ResendCache(max_requests=2)
    monkeypatch.setattr(chains, "chain_hashes", counting_hashes)
    monkeypatch.setattr(v, "check_message", counting_check)
    first = cache.read("u", copy.deepcopy(BASE))
    step = cache.read("u", copy.deepcopy(STEP))
    assert hashed == [4, 2] and checked == [0, 1, 2, 3, 4, 5]
    monkeypatch.undo()
    assert (first.clean, first.hashes) == fresh(BASE)
    assert (step.clean, step.hashes) == fresh(STEP)
    edited = copy.deepcopy(STEP)
    edited[3]["content"] = "x = 2\n"
    again = cache.read("u", edited)
    assert (again.clean, again.hashes) == fresh(edited)
    assert again.clean[:3] == step.clean[:3] and again.hashes[4] != step.hashes[4]
    monkeypatch.setattr(chains, "chain_hashes", counting_hashes)
    other = cache.read("other", copy.deepcopy(STEP))
    assert hashed[-1] == 6 and (other.clean, other.hashes) == fresh(STEP)


def test_token_counts_per_model_equal_a_fresh_count() -> None:
    cache = ResendCache()
    cache.read("u", copy.deepcopy(BASE)).tokens("gpt-4")  # counted, then reused
    step = cache.read("u", copy.deepcopy(STEP))
    for model in ("gpt-4", "llama-3", None):
        assert step.tokens(model) == sum(message_tokens(m, model) for m in STEP)
        assert step.counts(model) == [message_tokens(m, model) for m in STEP]


def test_what_was_cleaned_is_cleaned_again_and_bad_input_is_named() -> None:
    """A message whose stored copy had a NUL replaced does not equal that copy, so it is
    read again; a message that cannot be stored is refused by its index, however much of
    the request was seen before."""
    cache = ResendCache()
    with_nul = [{"role": "user", "content": "a\x00b"}]
    assert cache.read("u", with_nul).clean[0]["content"] == "a\ufffdb"
    resent = cache.read("u", [*with_nul, {"role": "assistant", "content": "ok"}])
    assert resent.clean[0]["content"] == "a\ufffdb"
    assert (resent.clean, resent.hashes) == fresh(
        [{"role": "user", "content": "a\ufffdb"}, {"role": "assistant", "content": "ok"}])
    cache.read("u", copy.deepcopy(STEP))
    with pytest.raises(InvalidInput, match=r"messages\[6\]\.content"):
        cache.read("u", [*copy.deepcopy(STEP), {"role": "user", "content": 7}])


def test_a_caller_changing_its_messages_after_a_call_changes_nothing_kept() -> None:
    cache = ResendCache()
    sent = copy.deepcopy(BASE)
    cache.read("u", sent)
    sent[1]["content"] = "read b.py"
    changed = cache.read("u", sent)
    assert (changed.clean, changed.hashes) == fresh(sent)


WINDOW = WindowInfo(128_000, "config")


def _turn(engine: Memd, messages: list[dict[str, Any]], reply: str) -> str:
    call = prepare_chat(engine, "local", None, copy.deepcopy(messages), model="gpt-4o",
                        window=WINDOW, client="opencode/1.18.0")
    finish_chat(engine, call, status=200, reply={"role": "assistant", "content": reply},
                finish_reason="stop", usage=None, model="gpt-4o")
    assert call.session is not None
    return call.session.id


def test_the_session_is_found_by_the_new_hashes_and_a_branch_by_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long history's next step is matched by the hashes of the messages new since
    the previous request alone; an edit of an early turn, which none of them match,
    still branches from its session."""
    engine = Memd.open(tmp_path / "d")
    asked: list[int] = []
    find_chain = engine.store.find_chain

    def counting(user_id: str, hashes: list[str]) -> Any:
        asked.append(len(hashes))
        return find_chain(user_id, hashes)

    monkeypatch.setattr(engine.store, "find_chain", counting)
    history: list[dict[str, Any]] = [{"role": "user", "content": "turn 0 about deploys"}]
    sid = _turn(engine, history, "answer 0")
    for i in range(1, 8):
        history += [{"role": "assistant", "content": f"answer {i - 1}"},
                    {"role": "user", "content": f"turn {i} about deploys"}]
        assert _turn(engine, history, f"answer {i}") == sid
    assert asked[0] == 1 and asked[1:] == [2] * 7  # the reply and the new turn
    assert [m.content for m in engine.messages(sid, "local")][-2:] == ["turn 7 about deploys",
                                                                        "answer 7"]
    edited = [*copy.deepcopy(history[:2]), {"role": "user", "content": "another turn 1"}]
    for i in range(2, 7):
        edited += [{"role": "assistant", "content": f"other answer {i - 1}"},
                   {"role": "user", "content": f"another turn {i}"}]
    branch = _turn(engine, edited, "other answer")
    assert branch != sid and engine.session(branch, "local").parent_session_id == sid
    assert asked[-2:] == [len(edited) - 2, len(edited)]
    engine.close()


def test_the_query_is_the_newest_user_words_and_resent_messages_are_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool loop whose results come as user messages (as Cline sends them) keeps the
    query of the user's request; each message is read for user words once per
    conversation, not at every step."""
    from memd.engine.conversation import resend, turns

    read: list[str] = []
    real = turns.message_words

    def counting(raw: Any, max_chars: int, redact: Any = None) -> str:
        read.append(str(raw.get("content")))
        return real(raw, max_chars, redact)

    monkeypatch.setattr(resend, "message_words", counting)
    cache = ResendCache()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the failing deploy script please"}]
    for i in range(3):
        resent = cache.read("u", copy.deepcopy(messages))
        got = resent.query(100_000, None)
        assert resent.previous_query == (None if i == 0 else got)  # nothing to embed again
        assert got == turns.last_user_text(messages, 100_000)
        assert got == "Fix the failing deploy script please"
        messages += [{"role": "assistant", "content": f"<read_file>f{i}.py</read_file>"},
                     {"role": "user", "content": f"[read_file for 'f{i}.py'] Result:\nx = {i}"}]
    assert len(read) == len(set(read)) == 5  # the request, then 2 new messages a step
    messages.append({"role": "user", "content": "Now also run the tests"})
    assert cache.read("u", copy.deepcopy(messages)).query(100_000, None) \
        == "Now also run the tests"


def test_an_append_stores_the_counts_and_hashes_the_request_was_read_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step's new messages are counted and hashed once, when the request is read: the
    append stores those, equal to what it would work out itself; a message stored in
    another form than it came in (content parts become their text) is counted again in
    the form stored, its hash (over the same text) taken."""
    from memd.engine.conversation import sessions

    engine = Memd.open(tmp_path / "d")
    worked: list[str] = []

    def count(m: Any, model: str | None = None) -> int:
        worked.append("count")
        return message_tokens(m, model)

    def chain(ms: Any, previous: str | None) -> list[str | None]:
        worked.append("hash")
        return chains.chain_hashes(ms, previous)

    monkeypatch.setattr(sessions, "message_tokens", count)
    monkeypatch.setattr(sessions, "chain_hashes", chain)
    sid = _turn(engine, BASE, "done")
    assert worked  # the model's reply came in no request: worked out when stored
    step = [*BASE, {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks, now b.py"}]
    worked.clear()
    call = prepare_chat(engine, "local", None, copy.deepcopy(step), model="gpt-4o",
                        window=WINDOW, client="opencode/1.18.0")
    assert call.session is not None and call.session.id == sid and worked == []
    parts = [*step, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": [
                 {"type": "text", "text": "and c.py:"},
                 {"type": "text", "text": "".join(f"def f{i}(x): return x * {i}\n"
                                                  for i in range(300))},
                 {"type": "image_url", "image_url": {"url": "x"}}]}]
    finish_chat(engine, call, status=200, reply={"role": "assistant", "content": "ok"},
                finish_reason="stop", usage=None, model="gpt-4o")
    worked.clear()
    prepare_chat(engine, "local", None, copy.deepcopy(parts), model="gpt-4o",
                 window=WINDOW, client="opencode/1.18.0")
    # the parts' message is counted in its stored form from its parts' counts: no
    # second count in the append, and the same count (below)
    assert worked == []
    stored = [m for m in engine.messages(sid, "local") if m.role != "system"]
    forms = [{"role": m.role, "content": m.content, **({"tool_calls": m.tool_calls}
                                                      if m.tool_calls else {}),
              **({"tool_call_id": m.tool_call_id} if m.tool_call_id else {})}
             for m in stored]
    assert [m.chain_hash for m in stored] == chains.chain_hashes(forms, None)
    assert [m.token_count for m in stored] == [message_tokens(f, "gpt-4o") for f in forms]
    engine.close()
