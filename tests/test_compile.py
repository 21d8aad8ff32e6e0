"""Property and example tests of the prefill context compiler (memd.engine.block.compile)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from memd.engine.block.compile import (
    TASK_SPLITS,
    Candidate,
    CompileInput,
    classify_task,
    compile_context,
    history_blocks,
)
from memd.models.tokens import count_text, message_tokens
from memd.types import Context, Message

OPENAI_MESSAGE = pydantic.TypeAdapter(ChatCompletionMessageParam)
WORDS = st.text(alphabet="abcdefghij klmnop,.?!\n", max_size=40)
ITEM_TEXT = st.one_of(WORDS, st.text(alphabet="abcdefghij klmnop,.?!\n-#", max_size=600))
PROPS = settings(max_examples=200, deadline=None)


def msg(i: int, role: str, tokens: int, content: str | None = "x", **kw: Any) -> Message:
    return Message(
        id=f"m{i}", session_id="s", user_id="u", turn_index=i, role=role, content=content,
        token_count=tokens, created_at=0.0, **kw,
    )


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


@dataclass
class Case:
    """A random input plus what the generator knows about its history's structure."""

    inp: CompileInput
    blocks: list[list[str]]  # message ids of each keep-together block, in order
    orphans: set[str]  # ids of tool messages that answer nothing adjacent


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Message], list[list[str]], set[str]]:
    history: list[Message] = []
    blocks: list[list[str]] = []
    orphans: set[str] = set()
    earlier_calls: list[str] = []  # call ids of all groups before the latest one
    latest_calls: list[str] = []

    def add(role: str, content: str | None, **kw: Any) -> Message:
        m = msg(len(history), role, draw(st.integers(1, 400)), content, **kw)
        history.append(m)
        return m

    for kind in draw(st.lists(st.sampled_from(["user", "assistant", "call", "orphan"]),
                              max_size=30)):
        if kind in ("user", "assistant"):
            blocks.append([add(kind, draw(st.one_of(WORDS, st.none()))).id])
        elif kind == "call":
            n = draw(st.integers(1, 3))
            ids = [f"call_{len(history)}_{k}" for k in range(n)]
            a = add("assistant", draw(st.one_of(st.none(), WORDS)),
                    tool_calls=[call(i) for i in ids])
            answered = draw(st.one_of(st.just(ids), st.permutations(ids),
                                      st.lists(st.sampled_from(ids), unique=True)))
            blocks.append([a.id] + [add("tool", draw(WORDS), tool_call_id=i).id
                                    for i in answered])
            earlier_calls += latest_calls
            latest_calls = ids
        else:  # answers a call that does not exist or is not adjacent
            target = draw(st.sampled_from([f"ghost_{len(history)}", *earlier_calls]))
            orphans.add(add("tool", draw(WORDS), tool_call_id=target).id)
    return history, blocks, orphans


Candidates = st.SearchStrategy[list[Candidate]]


def candidates(prefix: str, kinds: list[str], min_size: int = 0) -> Candidates:
    item = st.tuples(st.sampled_from(kinds), ITEM_TEXT, st.floats(0, 10, allow_nan=False))
    return st.lists(item, min_size=min_size, max_size=15).map(lambda xs: [
        Candidate(k, f"{prefix}{i}", text, count_text(text), score)
        for i, (k, text, score) in enumerate(xs)
    ])


@st.composite
def cases(draw: st.DrawFn, crowded: bool = False) -> Case:
    """A random input; ``crowded`` ones have many candidates and a tight memory budget."""
    history, blocks, orphans = draw(histories())
    system = draw(st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer"]), "content": WORDS},
        optional={"name": st.sampled_from(["acme", "bot"])},
    ), max_size=3))
    summary = draw(st.one_of(st.none(), ITEM_TEXT.filter(str.strip)))
    r = draw(st.integers(0, 4000))
    t = draw(st.one_of(st.just(0), st.integers(0, 2000)))
    room = st.integers(300, 14000).map(lambda x: min(20000, r + t + x))  # mostly B > 0
    c = draw(st.one_of(st.integers(0, 20000), room))
    if crowded:
        hist = draw(st.integers(0, sum(m.token_count for m in history)))  # often cut
        c = min(20000, r + t + draw(st.integers(50, 1500)) + hist)
    inp = CompileInput(
        system=system,
        history=history,
        facts=draw(candidates("f", ["fact"], 3 if crowded else 0)),
        memories=draw(candidates("mem", ["memory", "summary"], 8 if crowded else 0)),
        context_window=c,
        max_response_tokens=r,
        tool_tokens=t,
        session_summary=summary,
        session_summary_tokens=count_text(summary) if summary else 0,
        task_type=draw(st.one_of(st.none(), st.sampled_from(sorted(TASK_SPLITS)))),
        model=draw(st.sampled_from([None, "gpt-4", "llama3"])),
    )
    return Case(inp, blocks, orphans)


def split(ctx: Context, inp: CompileInput) -> tuple[list[dict[str, Any]], list[str]]:
    """The memd-made middle messages and the ids of the emitted history messages."""
    hist_ids = [i.id for i in ctx.report.items if i.section == "history"]
    middle = ctx.messages[len(inp.system):len(ctx.messages) - len(hist_ids)]
    return middle, hist_ids


@given(st.one_of(cases(), cases(crowded=True)))
@PROPS
def test_tokens_within_budget(case: Case) -> None:
    inp = case.inp
    ctx = compile_context(inp)
    rep = ctx.report
    middle, hist_ids = split(ctx, inp)
    by_id = {m.id: m for m in inp.history}
    hist_tokens = sum(by_id[i].token_count for i in hist_ids)
    real = sum(message_tokens(m, inp.model) for m in inp.system + middle) + hist_tokens
    assert real <= max(inp.context_window - inp.max_response_tokens - inp.tool_tokens,
                       rep.budget["S"])
    assert rep.total_tokens == real == rep.tokens["total"]
    assert hist_tokens == rep.tokens["history"] <= rep.budget["B_hist"]
    memory = [m for m in middle if m["content"].startswith("## Memory")]
    assert len(memory) <= 1
    mem_real = sum(message_tokens(m, inp.model) for m in memory)
    assert mem_real == rep.tokens["memory"]
    leftover = rep.budget["B_mem"] + rep.budget["B_hist"] - hist_tokens - rep.tokens["summary"]
    assert mem_real <= leftover <= rep.budget["B"] - hist_tokens - rep.tokens["summary"]


@given(cases())
@PROPS
def test_history_is_a_maximal_contiguous_suffix_of_whole_blocks(case: Case) -> None:
    inp = case.inp
    ctx = compile_context(inp)
    _, hist_ids = split(ctx, inp)
    ids = [m.id for m in inp.history]
    assert any(hist_ids == [i for i in ids[j:] if i not in case.orphans]
               for j in range(len(ids) + 1))
    assert [[m.id for m in b] for b in history_blocks(inp.history)] == case.blocks
    n_kept = next(k for k in range(len(case.blocks) + 1)
                  if [i for b in case.blocks[len(case.blocks) - k:] for i in b] == hist_ids)
    assert ctx.report.history_cut == (n_kept < len(case.blocks))
    if ctx.report.history_cut:  # the next older block would not have fitted
        tokens = {m.id: m.token_count for m in inp.history}
        nxt = case.blocks[len(case.blocks) - n_kept - 1]
        assert ctx.report.tokens["history"] + sum(tokens[i] for i in nxt) \
            > ctx.report.budget["B_hist"]


@given(st.one_of(cases(), cases(crowded=True)))
@PROPS
def test_summary_only_when_history_cut_and_it_fits(case: Case) -> None:
    inp = case.inp
    ctx = compile_context(inp)
    rep = ctx.report
    middle, _ = split(ctx, inp)
    emitted = [m for m in middle if m["content"].startswith("[Session summary]\n")]
    if not (rep.history_cut and inp.session_summary):
        assert emitted == [] and rep.tokens["summary"] == 0
        return
    wrapped = {"role": "system", "content": "[Session summary]\n" + inp.session_summary}
    cost = message_tokens(wrapped, inp.model)
    fits = cost <= rep.budget["B_mem"] + rep.budget["B_hist"] - rep.tokens["history"]
    assert emitted == ([wrapped] if fits else [])
    assert rep.tokens["summary"] == (cost if fits else 0)
    assert [i.section for i in rep.items].count("summary") == int(fits)


@given(cases())
@PROPS
def test_no_orphaned_tool_message(case: Case) -> None:
    inp = case.inp
    out = compile_context(inp).messages[len(inp.system):]
    answers = {m.tool_call_id for m in inp.history if m.role == "tool" and m.id not in case.orphans}
    for k, m in enumerate(out):
        if m["role"] == "tool":
            owner = next(p for p in reversed(out[:k]) if p["role"] != "tool")
            assert m["tool_call_id"] in {c["id"] for c in owner.get("tool_calls", [])}
        if m.get("tool_calls"):
            run = []
            for n in out[k + 1:]:
                if n["role"] != "tool":
                    break
                run.append(n["tool_call_id"])
            assert sorted(run) == sorted(c["id"] for c in m["tool_calls"] if c["id"] in answers)


@given(cases())
@PROPS
def test_output_accepted_by_openai_types(case: Case) -> None:
    for m in compile_context(case.inp).messages:
        OPENAI_MESSAGE.validate_python(m)
        assert all(v is not None for k, v in m.items() if k != "content")


@given(st.one_of(cases(), cases(crowded=True)), st.randoms(use_true_random=False))
@PROPS
def test_deterministic_and_independent_of_candidate_order(case: Case, rnd: Any) -> None:
    inp = case.inp
    first = compile_context(inp)
    assert compile_context(inp) == first
    facts, memories = list(inp.facts), list(inp.memories)
    rnd.shuffle(facts)
    rnd.shuffle(memories)
    assert compile_context(replace(inp, facts=facts, memories=memories)) == first


@given(cases())
@PROPS
def test_system_messages_first_and_unchanged(case: Case) -> None:
    inp = case.inp
    before = json.dumps(inp.system, sort_keys=True)
    ctx = compile_context(inp)
    assert ctx.messages[:len(inp.system)] == inp.system
    assert all(a is b for a, b in zip(ctx.messages, inp.system, strict=False))
    assert json.dumps(inp.system, sort_keys=True) == before
    middle, _ = split(ctx, inp)
    assert all(m["role"] == "system" for m in middle)
    assert [m["content"].split("\n")[0] for m in middle] in (
        [], ["## Memory"], ["[Session summary]"], ["## Memory", "[Session summary]"])


# --- examples -----------------------------------------------------------------------

def long_history(n: int, tokens: int) -> list[Message]:
    return [msg(i, "user" if i % 2 == 0 else "assistant", tokens, f"turn {i}") for i in range(n)]


def test_cut_history_emits_summary_between_memory_and_history() -> None:
    summary = "The user is building a CLI in Rust."
    inp = CompileInput(
        system=[{"role": "system", "content": "Be brief."}], history=long_history(10, 100),
        facts=[Candidate("fact", "f1", "name: Ada", count_text("name: Ada"), 1.0)],
        memories=[], context_window=1000, max_response_tokens=200, task_type="continuation",
        session_summary=summary, session_summary_tokens=count_text(summary),
    )
    ctx = compile_context(inp)
    contents = [m["content"] for m in ctx.messages]
    assert ctx.report.history_cut
    assert contents[1].startswith("## Memory")
    assert contents[2] == "[Session summary]\n" + summary
    assert contents[3:] == [f"turn {i}" for i in range(4, 10)]  # B_hist = 675: 6 turns
    assert [i.section for i in ctx.report.items][:3] == ["fact", "summary", "history"]
    uncut = compile_context(replace(inp, history=long_history(3, 100)))
    assert not uncut.report.history_cut
    assert not any("[Session summary]" in m["content"] for m in uncut.messages)


def test_summary_tokens_come_out_of_the_memory_budget() -> None:
    summary = "The user is migrating a Django app to FastAPI. " * 4
    text = "Prefers pytest fixtures over setUp methods."
    inp = CompileInput(
        system=[], history=long_history(10, 100), facts=[],
        memories=[Candidate("memory", f"x{i}", text, count_text(text), 1.0) for i in range(40)],
        context_window=1000, max_response_tokens=0, task_type="knowledge",
        session_summary=summary, session_summary_tokens=count_text(summary),
    )
    rep = compile_context(inp).report
    assert rep.history_cut and rep.tokens["summary"] > 40
    assert rep.tokens["memory"] + rep.tokens["summary"] <= 1000 - rep.tokens["history"]
    assert rep.total_tokens <= 1000


def test_facts_precede_memories_whatever_the_scores() -> None:
    inp = CompileInput(
        system=[], history=long_history(1, 10),
        facts=[Candidate("fact", "f1", "editor: vim", count_text("editor: vim"), 0.1)],
        memories=[Candidate("memory", "m1", "Likes tea", count_text("Likes tea"), 50.0)],
        context_window=4000, max_response_tokens=0,
    )
    ctx = compile_context(inp)
    block = ctx.messages[0]["content"]
    assert block == (
        "## Memory\nWhat you know about the user from earlier conversations. Use it when "
        "relevant.\n### Facts\n- editor: vim\n### Memories\n- Likes tea"
    )
    assert [(i.section, i.id) for i in ctx.report.items] == [
        ("fact", "f1"), ("memory", "m1"), ("history", "m0")]


def test_too_large_item_is_skipped_and_a_smaller_later_one_kept() -> None:
    big_text = "alpha " * 300
    inp = CompileInput(
        system=[], history=[], facts=[],
        memories=[
            Candidate("memory", "big", big_text, count_text(big_text), 10_000.0),  # best ratio
            Candidate("memory", "small", "Uses Linux", count_text("Uses Linux"), 1.0),
        ],
        context_window=200, max_response_tokens=0, task_type="new_session",
    )
    ctx = compile_context(inp)
    assert [i.id for i in ctx.report.items] == ["small"]
    assert ctx.messages[0]["content"].endswith("### Memories\n- Uses Linux")
    assert ctx.report.tokens["memory"] <= 200


def test_orphans_dropped_and_tool_blocks_kept_whole() -> None:
    history = [
        msg(0, "tool", 5, "stale", tool_call_id="gone"),
        msg(1, "user", 5, "weather?"),
        msg(2, "assistant", 5, None, tool_calls=[call("a"), call("b")]),
        msg(3, "tool", 5, "sunny", tool_call_id="a"),
        msg(4, "tool", 5, "dup", tool_call_id="zzz"),
        msg(5, "tool", 5, "windy", tool_call_id="b"),
        msg(6, "user", 5, "thanks"),
    ]
    full = CompileInput(system=[], history=history, facts=[], memories=[],
                        context_window=100, max_response_tokens=0, task_type="continuation")
    ctx = compile_context(full)
    assert [i.id for i in ctx.report.items] == ["m1", "m2", "m3", "m5", "m6"]
    assert not ctx.report.history_cut
    # B_hist = 17: the 15-token tool block does not fit beside m6, so only m6 is kept.
    ctx = compile_context(replace(full, context_window=20))
    assert [i.id for i in ctx.report.items] == ["m6"]
    assert ctx.report.history_cut


def test_tool_message_without_call_id_is_an_orphan() -> None:
    bad_call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}  # no id
    history = [msg(0, "user", 5, "hi"), msg(1, "assistant", 5, None, tool_calls=[bad_call]),
               msg(2, "tool", 5, "r")]
    inp = CompileInput(system=[], history=history, facts=[], memories=[],
                       context_window=100, max_response_tokens=0)
    assert [i.id for i in compile_context(inp).report.items] == ["m0", "m1"]


def test_none_content_becomes_empty_string_where_openai_requires_it() -> None:
    inp = CompileInput(system=[], history=[msg(0, "user", 3, None)], facts=[], memories=[],
                       context_window=100, max_response_tokens=0)
    (m,) = compile_context(inp).messages
    assert m == {"role": "user", "content": ""}
    OPENAI_MESSAGE.validate_python(m)


@pytest.mark.parametrize(("task", "b_mem", "b_hist"), [
    ("continuation", 150, 850), ("knowledge", 400, 600),
    ("new_session", 500, 500), ("tool_heavy", 100, 700),
])
def test_budget_split(task: str, b_mem: int, b_hist: int) -> None:
    inp = CompileInput(system=[], history=[], facts=[], memories=[], context_window=1500,
                       max_response_tokens=300, tool_tokens=200, task_type=task)
    assert compile_context(inp).report.budget == {
        "C": 1500, "S": 0, "R": 300, "T": 200, "B": 1000, "B_mem": b_mem, "B_hist": b_hist}


def test_tool_heavy_leaves_headroom_unused_by_memories() -> None:
    texts = [" ".join(f"word{i}" for _ in range(40)) for i in range(20)]  # all different
    mems = [Candidate("memory", f"x{i}", t, count_text(t), 1.0) for i, t in enumerate(texts)]
    inp = CompileInput(system=[], history=[], facts=[], memories=mems, context_window=1000,
                       max_response_tokens=0, task_type="tool_heavy")
    rep = compile_context(inp).report
    assert 700 < rep.tokens["memory"] <= 800  # B_mem + B_hist, not B


def test_classify_task_rules() -> None:
    def conv(*texts: str) -> list[Message]:
        return [msg(i, "user" if i % 2 == 0 else "assistant", 1, t) for i, t in enumerate(texts)]

    assert classify_task(conv("hi", "hello", "What is my dog called?"), has_tools=True) \
        == "tool_heavy"
    tools = [*conv("hi"), msg(1, "assistant", 1, None, tool_calls=[call("a")]),
             msg(2, "tool", 1, "r", tool_call_id="a"),
             msg(3, "user", 1, "next"), msg(4, "assistant", 1, "x"),
             msg(5, "user", 1, "more"), msg(6, "assistant", 1, "y"),
             msg(7, "user", 1, "fine"), msg(8, "assistant", 1, "z"), msg(9, "user", 1, "go")]
    assert classify_task(tools, has_tools=False) == "continuation"  # 2 of 10 < 30%
    tools.insert(3, msg(10, "tool", 1, "r2", tool_call_id="a"))
    assert classify_task(tools, has_tools=False) == "tool_heavy"  # 3 of last 10
    assert classify_task(conv("What is my dog called?"), has_tools=False) == "new_session"
    assert classify_task([], has_tools=False) == "new_session"
    assert classify_task(conv("hi", "hello", "Do you remember my dog"), False) == "knowledge"
    assert classify_task(conv("hi", "hello", "is it blue?"), False) == "knowledge"
    assert classify_task(conv("hi", "hello", "And why is that?"), False) == "continuation"
    assert classify_task(conv("hi", "hello", "Fix line 3 please"), False) == "continuation"


def test_unknown_task_type_is_rejected() -> None:
    inp = CompileInput(system=[], history=[], facts=[], memories=[], context_window=10,
                       max_response_tokens=0, task_type="chitchat")
    with pytest.raises(ValueError, match="chitchat"):
        compile_context(inp)
