"""The memory block added to a client's own history: its budget, its placement, its
stable text (memd.engine.block.inject), and the engine's side of a transparent call."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from memd.engine.block.compile import Candidate
from memd.engine.block.inject import (
    MIN_BLOCK_TOKENS,
    NEAR_MISSES,
    USER_CLOSE,
    USER_OPEN,
    Anchored,
    StableBlocks,
    build,
    place,
    room,
)
from memd.engine.conversation.chat import WindowInfo, finish_chat, prepare_chat
from memd.engine.memory import Memd
from memd.models.tokens import count_text, message_tokens


def test_room_is_the_smallest_of_headroom_and_caps() -> None:
    big = room(128_000, 30_000, 1000, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert big.budget == 2000 and big.margin == 2560 and not big.over_window
    share = room(16_000, 1000, 1000, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert share.budget == 800  # 5 % of the window is below memory_max_tokens
    tight = room(8192, 6800, 1000, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert tight.headroom == 8192 - 6800 - 1000 - 163
    assert tight.budget == tight.headroom < 400


def test_no_room_no_block_and_over_window_is_flagged() -> None:
    none = room(2048, 2004, 0, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert none.budget == 0 and not none.over_window
    tiny = room(2048, 1900, 70, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert 0 < tiny.headroom < MIN_BLOCK_TOKENS and tiny.budget == 0
    over = room(2048, 3000, 100, max_tokens=2000, window_share=0.05, unknown_tokens=400)
    assert over.over_window and over.budget == 0
    unknown = room(None, 500_000, 100, max_tokens=2000, window_share=0.05,
                   unknown_tokens=400)
    assert unknown.budget == 400 and unknown.headroom is None and not unknown.over_window


MESSAGES = [
    {"role": "system", "content": "rules"},
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "result"},
    {"role": "user", "content": [{"type": "text", "text": "second"},
                                 {"type": "image_url", "image_url": {"url": "data:x"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "more", "x_unknown": 1},
]


@pytest.mark.parametrize("placement", ["user", "before-user", "system"])
def test_place_changes_nothing_the_client_sent(placement: str) -> None:
    before = copy.deepcopy(MESSAGES)
    out = place(MESSAGES, "BLOCK", placement)
    assert before == MESSAGES  # the client's objects are not mutated
    if placement == "user":
        assert len(out) == len(MESSAGES)
        assert out[4]["content"] == [{"type": "text", "text": "BLOCK"}, *before[4]["content"]]
        assert [m for i, m in enumerate(out) if i != 4] == [
            m for i, m in enumerate(before) if i != 4]
    else:
        at = 4 if placement == "before-user" else 1
        assert out[at] == {"role": "system", "content": "BLOCK"}
        assert out[:at] + out[at + 1:] == before


def test_place_in_a_string_user_message_keeps_its_text_at_the_end() -> None:
    out = place([{"role": "user", "content": "hello"}], USER_OPEN + "x\n</memory>\n\n", "user")
    assert out[0]["content"].endswith("</memory>\n\nhello")
    only_tools = [{"role": "system", "content": "s"}, {"role": "tool", "tool_call_id": "a",
                                                       "content": "r"}]
    assert place(only_tools, "B", "user")[1] == {"role": "system", "content": "B"}


def _cands(n: int) -> list[Candidate]:
    return [Candidate("memory", f"m{i}", f"memory number {i} about the build system", 9,
                      1.0 - i / 100) for i in range(n)]


@pytest.mark.parametrize("placement", ["user", "system"])
def test_build_fits_the_budget_exactly_as_inserted(placement: str) -> None:
    for budget in (60, 90, 150, 400):
        block = build([], _cands(30), budget, placement, "gpt-4o")
        assert block is not None
        if placement == "user":
            assert block.tokens == count_text(block.text, "gpt-4o") <= budget
        else:
            assert block.tokens == message_tokens(
                {"role": "system", "content": block.text}, "gpt-4o") <= budget
    assert build([], _cands(3), 10, placement, "gpt-4o") is None


def test_stable_blocks_keep_what_still_stands_and_drop_the_newest_first() -> None:
    stable = StableBlocks(reuse_seconds=60)
    a = build([], _cands(3), 400, "user", None)
    b = build([], _cands(2), 400, "user", None)
    assert a is not None and b is not None
    blocks = [Anchored("h1", a), Anchored("h2", b)]
    stable.settle("u", "s", "user", "q", blocks, 100.0)
    both = {"h1": 1, "h2": 3}
    assert stable.recall("u", "s", "user", "q", 400, 159.0, both) == (blocks, True)
    assert stable.recall("u", "s", "user", "q", 400, 160.0, both) == (blocks, False)
    assert stable.recall("u", "s", "user", "q2", 400, 120.0, both) == (blocks, False)
    # an anchor gone from the request: its block goes, the rest stays, not fresh
    assert stable.recall("u", "s", "user", "q", 400, 120.0, {"h1": 1}) == (blocks[:1],
                                                                              False)
    # a budget that no longer holds both: the newest goes first
    assert stable.recall("u", "s", "user", "q", a.tokens, 120.0, both) == (blocks[:1],
                                                                              False)
    assert stable.recall("u", "s2", "user", "q", 400, 120.0, both) == ([], False)
    stable.forget_user("u")
    assert stable.recall("u", "s", "user", "q", 400, 120.0, both) == ([], False)


def test_blocks_built_before_a_change_to_the_memories_are_not_kept() -> None:
    """A call that read the memories before another thread changed them (a note edited,
    a memory forgotten) does not keep its blocks: the next call with the same question
    would reuse them as fresh."""
    stable = StableBlocks(reuse_seconds=60)
    a = build([], _cands(3), 400, "user", None)
    assert a is not None
    blocks, present = [Anchored("h1", a)], {"h1": 1}
    for change in (lambda: stable.forget_user("u"), stable.clear):
        seen = stable.epoch("u")
        change()  # while the call built its blocks
        stable.settle("u", "s", "user", "q", blocks, 100.0, seen)
        assert stable.recall("u", "s", "user", "q", 400, 110.0, present) == ([], False)
    seen = stable.epoch("u")
    stable.forget_user("v")  # another user's change: this one's blocks stand
    stable.settle("u", "s", "user", "q", blocks, 100.0, seen)
    assert stable.recall("u", "s", "user", "q", 400, 110.0, present) == (blocks, True)


def test_forgetting_a_memory_drops_the_block_that_holds_it(tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    mem = engine.add("The user prefers tabs over spaces in Python code.", "local").memory
    sent = [{"role": "user", "content": "format the python code with tabs"}]
    window = WindowInfo(128_000, "config")
    call = prepare_chat(engine, "local", None, sent, model="gpt-4o", window=window)
    assert "tabs over spaces" in (call.report["injected"] or "")
    again = prepare_chat(engine, "local", None, sent, model="gpt-4o", window=window)
    assert again.report["injected"] == call.report["injected"]
    engine.forget(mem.id, "local")
    after = prepare_chat(engine, "local", None, sent, model="gpt-4o", window=window)
    assert "tabs over spaces" not in (after.report["injected"] or "")
    engine.close()


def test_a_transparent_call_forwards_the_client_messages_plus_one_block(
        tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    engine.add("The user prefers tabs over spaces in Python code.", "local")
    engine.run_jobs()
    sent = copy.deepcopy(MESSAGES)
    sent[4] = {"role": "user", "content": "format the python code with tabs"}
    call = prepare_chat(engine, "local", None, sent, model="gpt-4o",
                        window=WindowInfo(128_000, "config", "gpt-4o*"))
    assert call.memory_added and call.plain == sent
    assert [m for i, m in enumerate(call.forward) if i != 4] == [
        m for i, m in enumerate(sent) if i != 4]
    assert call.forward[4]["content"].endswith("format the python code with tabs")
    assert "tabs over spaces" in call.forward[4]["content"]
    assert call.report["mode"] == "transparent"
    assert call.report["window"] == {"tokens": 128_000, "source": "config",
                                     "detail": "gpt-4o*"}
    assert call.report["items"][0]["text"].startswith("The user prefers tabs")
    assert call.report["injected"] in call.forward[4]["content"]
    finish_chat(engine, call, status=200, reply={"role": "assistant", "content": "done"},
                finish_reason="stop", usage=None, model="gpt-4o")
    # every non-system message the client sent is stored once, and the reply
    stored = engine.messages(call.session.id, "local")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "user", "assistant",
                                        "tool", "assistant"]
    # a small window with no headroom: the request goes out as sent, and the report says
    # (without context virtualization, which takes a request past the window's caution
    # line: tests/test_virtual.py)
    tight = prepare_chat(engine, "local", None, sent, model="gpt-4o",
                         window=WindowInfo(300, "header"), virtualize="off")
    assert not tight.memory_added and tight.forward == sent
    assert tight.report["reason"] and tight.report["tokens"]["memory"] == 0
    engine.close()


def test_memory_from_the_calls_own_session_is_not_added_again(tmp_path: Path) -> None:
    # the fake embedder's cosines are not MiniLM's, on which the floor of a question's
    # likeliest answer was chosen: here the test is which session's lines come back
    engine = Memd.open(tmp_path / "m", embedder="fake", recall_question_floor=0)
    first = [{"role": "user", "content": "I prefer pytest over unittest for all tests."}]
    call = prepare_chat(engine, "local", None, first, model="gpt-4o",
                        window=WindowInfo(128_000, "config"))
    finish_chat(engine, call, status=200, reply={"role": "assistant", "content": "Noted."},
                finish_reason="stop", usage=None, model="gpt-4o")
    engine.run_jobs()  # the preference becomes a memory of this session
    follow = [*first, {"role": "assistant", "content": "Noted."},
              {"role": "user", "content": "which test runner do I prefer, pytest?"}]
    same = prepare_chat(engine, "local", None, follow, model="gpt-4o",
                        window=WindowInfo(128_000, "config"))
    assert same.session.id == call.session.id
    assert all("pytest over unittest" not in i["text"] for i in same.report["items"]
               if i["section"] == "memory")
    other = prepare_chat(engine, "local", None,
                         [{"role": "user", "content": "which test runner do I prefer, pytest?"}],
                         model="gpt-4o", window=WindowInfo(128_000, "config"))
    assert other.session.id != call.session.id
    assert other.report["injected"] and "pytest" in other.report["injected"]
    engine.close()


def test_a_new_user_turn_adds_a_block_and_the_old_one_stays_in_place(tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake")
    engine.add("The user prefers tabs over spaces in Python code.", "local")
    engine.add("The service deploys with Docker on Fridays.", "local")
    window = WindowInfo(128_000, "config")
    turn1 = [{"role": "system", "content": "agent rules"},
             {"role": "user", "content": "format the python code with tabs"}]
    one = prepare_chat(engine, "local", None, turn1, model="gpt-4o", window=window)
    first_block = one.report["blocks"][0]["text"]
    assert "tabs over spaces" in first_block and "Docker" not in first_block
    turn2 = [*turn1, {"role": "assistant", "content": "Done."},
             {"role": "user", "content": "now deploy the service with Docker"}]
    two = prepare_chat(engine, "local", None, turn2, model="gpt-4o", window=window)
    assert two.session.id == one.session.id
    # the first block is still in the first user message, byte for byte: the prompt's
    # prefix up to the newest message is the previous call's
    assert two.forward[1]["content"] == one.forward[1]["content"]
    assert two.forward[:3] == [*one.forward, turn2[2]]
    ids = [i["id"] for i in two.report["items"]]
    assert len(ids) == len(set(ids))  # the new block holds only what is new
    assert [b["at"] for b in two.report["blocks"]] == [1, 3]
    new_block = two.forward[3]["content"].split(USER_CLOSE)[0]
    assert "Docker" in new_block and "tabs over spaces" not in new_block
    assert two.forward[3]["content"].endswith("now deploy the service with Docker")
    engine.close()


def test_a_block_names_the_best_items_that_did_not_fit() -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
             "india", "juliet", "kilo", "lima"]
    cands = [Candidate("memory", f"m{i}", f"{w} {w}s {w}ed {w}ing", 9, 1.0 - i / 100)
             for i, w in enumerate(words)]
    # a line saying what a chosen one says already is skipped, not missed
    cands.append(Candidate("memory", "dup", "alpha alphas alphaed alphaing", 9, 0.999))
    block = build([], cands, 90, "user", "gpt-4o")
    assert block is not None
    chosen = {c.id for c in block.memories}
    left = sorted((c for c in cands if c.id not in chosen | {"dup"}),
                  key=lambda c: -c.score)
    assert [c.id for c in block.missed] == [c.id for c in left[:NEAR_MISSES]]
    assert len(block.missed) == NEAR_MISSES
    everything = build([], _cands(2), 400, "user", "gpt-4o")
    assert everything is not None and everything.missed == ()


def test_a_calls_report_keeps_its_near_misses(tmp_path: Path) -> None:
    engine = Memd.open(tmp_path / "m", embedder="fake", memory_max_tokens=60)
    for i in range(8):
        engine.add(f"The build system of project {i} uses tabs in python code", "local")
    engine.run_jobs()
    call = prepare_chat(engine, "local", None,
                        [{"role": "user", "content": "format the python code with tabs"}],
                        model="gpt-4o", window=WindowInfo(128_000, "config"))
    report = call.report
    assert report["items"] and report["near_misses"]
    shown = {i["id"] for i in report["items"]}
    assert not shown & {m["id"] for m in report["near_misses"]}
    first = report["near_misses"][0]
    assert set(first) == {"kind", "id", "tokens", "score", "text"}
    assert "uses tabs in python code" in first["text"] and first["tokens"] > 0
    engine.close()
