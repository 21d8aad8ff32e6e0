"""The prefill context compiler (docs/design.md, "Context compilation"): a pure function.

``compile_context`` turns what a client sent (system messages, tool definitions, the
session's stored history) and what retrieval found (facts, memories, episodic summaries)
into the message list sent upstream, plus a report of what went in and why. It does no
I/O and reads no clock: the same :class:`CompileInput` always gives an equal
:class:`~memd.types.Context`. Design decisions:

**Budget.** ``S`` is the exact cost of the client's system messages (``message_tokens``),
``B = max(0, C - S - R - T)`` is what memd may fill, split into ``B_mem`` / ``B_hist`` by
task type (:data:`TASK_SPLITS`, integer percentages). ``B_mem`` is rounded down and, for
the task types whose split sums to 100%, ``B_hist = B - B_mem`` so no token is lost to
rounding; ``tool_heavy`` leaves its 20% unallocated as headroom for tool results.

**Task classifier.** Deterministic rules, first match wins (see :func:`classify_task`):
tools sent or tool-dense recent history -> ``tool_heavy``; at most one user message ->
``new_session``; a recall/explain question that is not a follow-up -> ``knowledge``;
anything else -> ``continuation``. Rules rather than a model: they are free, explainable in
the report, and the split only shifts a budget between two sections.

**History first.** History is packed before memories: the longest contiguous suffix of
whole *blocks* whose stored ``token_count`` sum fits ``B_hist``. A block is one message,
or an assistant message with ``tool_calls`` together with the tool messages right after it
that answer those calls, so a tool call is never separated from its results. Any other
tool message is an orphan (it answers nothing in the history, or answers a call it is not
adjacent to, or answers one twice) and is never emitted, since providers reject it. The
walk stops at the first block that does not fit, so the kept history is gap-free.

**Memories get the leftovers.** The memory budget is ``B_mem + B_hist - history_used``:
whatever history did not use flows to memories (for ``tool_heavy`` the headroom stays
untouched). When history was cut, or compressed turns (folded into the session summary
by compaction, memd.engine.background.compact) precede it, the session summary (if given and if it
fits) is taken out of that budget first and emitted right before the history.

**Memory block.** The user's notes first (standing instructions, memd.engine.learning.notes: given
whatever the query; when together over the budget, each is cut to a fair share by
:func:`fit_notes`), then facts (score desc), then memories and episodic summaries by greedy
knapsack on ``score / max(tokens, 1)`` (desc); every sort ends with the id and the text so
input order never matters, and an item that does not fit is skipped, not a stop. Item costs
are estimated from stored counts (``tokens + LINE_OVERHEAD``, headers counted once); the
rendered block is then measured exactly with ``message_tokens`` and the lowest-efficiency
memories (then the lowest-scored facts) are dropped until it fits. So the budget is a hard
guarantee: ``report.total_tokens <= max(C - R - T, S)``.

**Output.** System messages unchanged and first, then the memory block, the summary and
the history (``Message.to_openai()``, with a ``None`` content replaced by ``""`` for roles
whose OpenAI type requires a string).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from memd.engine.retrieval.relevance import content_words
from memd.models.tokens import MESSAGE_OVERHEAD, count_lines, count_text, message_tokens
from memd.types import Context, ContextReport, Message, ReportItem, quick_init

CONTINUATION: Final = "continuation"
KNOWLEDGE: Final = "knowledge"
NEW_SESSION: Final = "new_session"
TOOL_HEAVY: Final = "tool_heavy"

#: (memory, history) shares of ``B`` in percent per task type: a knowledge question or a
#: new session leans on memory, a continuation on its own history; integer percentages
#: keep the split exact (no float rounding).
TASK_SPLITS: Final[Mapping[str, tuple[int, int]]] = {
    CONTINUATION: (15, 85),
    KNOWLEDGE: (40, 60),
    NEW_SESSION: (50, 50),
    TOOL_HEAVY: (10, 70),
}

#: Estimated tokens a bullet adds to an item: ``"- "`` and the newline.
LINE_OVERHEAD: Final = 2
MEMORY_HEADER: Final = (
    "## Memory\nWhat you know about the user from earlier conversations. Use it when relevant."
)
FACTS_HEADER: Final = "### Facts"
MEMORIES_HEADER: Final = "### Memories"
RECALL_HEADER: Final = ("### From earlier conversations (the user's words; the assistant's "
                        "replies there may be wrong)")
RECALL_KIND: Final = "recall"  # a past message recalled (memd.engine.retrieval.recall)
NOTES_HEADER: Final = "### Standing instructions (the user's notes)"
NOTE_KIND: Final = "note"  # a file of the notes folder (memd.engine.learning.notes)
RULES_HEADER: Final = "### Instructions the user gave"
STYLE_RULE: Final = "style"  # Candidate.rule: a style or format rule, whatever the query
TOPIC_RULE: Final = "topic"  # Candidate.rule: an instruction about a topic, when relevant
#: The share of a block's budget that standing instructions (notes and rules) may take
#: together: they are given before what was retrieved, and must not crowd it out.
INSTRUCTION_SHARE: Final = 0.25
#: Two lines whose content words overlap this much (of the smaller set) say the same thing.
SAME_LINE_OVERLAP: Final = 0.8
NOTE_MIN_TOKENS: Final = 16  # a note cut shorter than this says nothing: left out
NOTE_CUT: Final = " [...]"
SUMMARY_PREFIX: Final = "[Session summary]\n"

TOOL_WINDOW: Final = 10  # recent messages the tool_heavy rule looks at
TOOL_PERCENT: Final = 30  # percentage of them that makes a session tool_heavy

_QUESTION_START = re.compile(
    r"^(what|who|whom|whose|when|where|which|how|why|do you remember|did i|recall|remind me"
    r"|explain|tell me about)\b"
)
_FOLLOW_UP_START = re.compile(
    r"^(and|also|then|so|ok|okay|now|next|continue|go on|what about|how about|what else)\b"
)
# Roles whose OpenAI message type requires a string content.
_CONTENT_REQUIRED = frozenset({"system", "developer", "user", "tool"})


@quick_init
@dataclass(frozen=True, slots=True)
class Candidate:
    """A scored item to pack into the memory block."""

    kind: str  # "fact" | "memory" | "summary" | "recall" | "note"
    id: str
    text: str
    tokens: int  # stored token count of ``text`` (computed at write time)
    score: float  # retrieval score (facts typically get a high fixed score)
    similarity: float = 1.0  # cosine with the query (1.0: given whatever the query)
    rule: str = ""  # a standing instruction: STYLE_RULE (always) or TOPIC_RULE


@dataclass(frozen=True, slots=True)
class CompileInput:
    """Everything the compiler needs; see the module docstring for how each part is used.

    ``session_summary_tokens`` is the stored count of ``session_summary``; it is only a
    quick reject, the emitted summary message is measured exactly.
    """

    system: list[dict[str, Any]]  # the client's system/developer messages, passed through
    history: list[Message]  # the session's active messages, ascending turn_index
    facts: list[Candidate]
    memories: list[Candidate]  # memories and episodic summaries, already scored
    context_window: int  # C
    max_response_tokens: int  # R
    tool_tokens: int = 0  # T: tokens of the tool definitions the client sent
    # injected when history was cut, or when compressed turns precede it
    session_summary: str | None = None
    session_summary_tokens: int = 0
    compressed_before: bool = False  # the session has compressed turns before history
    task_type: str | None = None  # None -> classify_task
    model: str | None = None  # for token counting
    instruction_share: float = INSTRUCTION_SHARE  # of the memory block's budget


def classify_task(history: Sequence[Message], has_tools: bool) -> str:
    """The task type of a request, by deterministic rules (first match wins).

    1. ``tool_heavy``: the client sent tool definitions, or at least 30% of the last 10
       history messages are tool messages or messages carrying ``tool_calls``.
    2. ``new_session``: the history holds at most one user message (the current query).
    3. ``knowledge``: the last user message asks to recall or explain something - after
       lower-casing and stripping it starts with what/who/whom/whose/when/where/which/how/
       why/"do you remember"/"did i"/recall/"remind me"/explain/"tell me about", or ends
       with ``?`` - and it is not a follow-up, i.e. does not start with
       and/also/then/so/ok/okay/now/next/continue/"go on"/"what about"/"how about"/
       "what else".
    4. ``continuation`` otherwise.
    """
    recent = history[-TOOL_WINDOW:]
    tool_like = sum(1 for m in recent if m.role == "tool" or bool(m.tool_calls))
    if has_tools or (recent and 100 * tool_like >= TOOL_PERCENT * len(recent)):  # integer math
        return TOOL_HEAVY
    users = [m for m in history if m.role == "user"]
    if len(users) <= 1:
        return NEW_SESSION
    text = (users[-1].content or "").strip().lower()
    is_question = bool(_QUESTION_START.match(text)) or text.endswith("?")
    if is_question and not _FOLLOW_UP_START.match(text):
        return KNOWLEDGE
    return CONTINUATION


def history_budget_bound(context_window: int, max_response_tokens: int,
                         tool_tokens: int) -> int:
    """The most tokens of history any task type's split can keep (``compile_context``'s
    B_hist, before system messages are counted): older history could never be sent, so
    the engine reads no further back."""
    b = max(0, context_window - max_response_tokens - tool_tokens)
    return max(_split(b, task)[1] for task in TASK_SPLITS)


def _split(b: int, task: str) -> tuple[int, int]:
    """(B_mem, B_hist): budget ``b`` split as ``task``'s shares say; a split that sums to
    100 % gives the history what the memory's rounding leaves."""
    mem_share, hist_share = TASK_SPLITS[task]
    b_mem = b * mem_share // 100
    return b_mem, b - b_mem if mem_share + hist_share == 100 else b * hist_share // 100


def history_blocks(history: Sequence[Message]) -> list[list[Message]]:
    """Group ``history`` into blocks that must be kept or cut together; orphans are left out.

    An assistant message with ``tool_calls`` and the tool messages directly after it that
    answer one of its calls (each call once) form a block; any other non-tool message is
    a block of its own; every other tool message is an orphan and appears in no block.
    """
    blocks: list[list[Message]] = []
    i = 0
    while i < len(history):
        msg = history[i]
        i += 1
        if msg.role == "tool":
            continue  # not directly after the assistant message whose call it answers
        block = [msg]
        if msg.role == "assistant" and msg.tool_calls:
            open_ids = {c["id"] for c in msg.tool_calls if isinstance(c, Mapping) and c.get("id")}
            while i < len(history) and history[i].role == "tool":
                if history[i].tool_call_id in open_ids:
                    open_ids.discard(history[i].tool_call_id)
                    block.append(history[i])
                i += 1
        blocks.append(block)
    return blocks


def compile_context(inp: CompileInput) -> Context:
    """Compile the prefill context for one request; pure and deterministic."""
    model = inp.model
    task = inp.task_type or classify_task(inp.history, inp.tool_tokens > 0)
    if task not in TASK_SPLITS:
        raise ValueError(f"unknown task type {task!r}; expected one of {sorted(TASK_SPLITS)}")
    s_tokens = sum(message_tokens(m, model) for m in inp.system)
    c, r, t = inp.context_window, inp.max_response_tokens, inp.tool_tokens
    b = max(0, c - s_tokens - r - t)
    b_mem, b_hist = _split(b, task)

    blocks = history_blocks(inp.history)
    kept: list[list[Message]] = []
    hist_used = 0
    for block in reversed(blocks):
        cost = sum(max(0, m.token_count) for m in block)
        if hist_used + cost > b_hist:
            break
        kept.append(block)
        hist_used += cost
    kept.reverse()
    history_cut = len(kept) < len(blocks)
    hist_msgs = [m for block in kept for m in block]

    remaining = b_mem + b_hist - hist_used
    summary_msg: dict[str, Any] | None = None
    summary_tokens = 0
    precedes = history_cut or inp.compressed_before  # turns older than those kept
    if precedes and inp.session_summary and inp.session_summary_tokens <= remaining:
        candidate = {"role": "system", "content": SUMMARY_PREFIX + inp.session_summary}
        n = message_tokens(candidate, model)
        if n <= remaining:
            summary_msg, summary_tokens = candidate, n
            remaining -= n

    facts, mems, lines, mem_tokens = pack_memory_block(inp.facts, inp.memories, remaining,
                                                       model, share=inp.instruction_share)
    block_msg = {"role": "system", "content": "\n".join(lines)} if lines else None

    messages: list[dict[str, Any]] = list(inp.system)
    items: list[ReportItem] = []
    if block_msg is not None:
        messages.append(block_msg)
        items += [ReportItem("fact", f.kind, f.id, f.tokens, f.score) for f in facts]
        items += [ReportItem("memory", m.kind, m.id, m.tokens, m.score) for m in mems]
    if summary_msg is not None:
        messages.append(summary_msg)
        sid = inp.history[0].session_id if inp.history else ""
        items.append(ReportItem("summary", "session_summary", sid, summary_tokens))
    messages += [_wire(m) for m in hist_msgs]
    items += [ReportItem("history", m.role, m.id, max(0, m.token_count)) for m in hist_msgs]

    total = s_tokens + mem_tokens + summary_tokens + hist_used
    report = ContextReport(
        task_type=task,
        budget={"C": c, "S": s_tokens, "R": r, "T": t, "B": b, "B_mem": b_mem, "B_hist": b_hist},
        tokens={
            "system": s_tokens,
            "memory": mem_tokens,
            "summary": summary_tokens,
            "history": hist_used,
            "total": total,
        },
        items=items,
        history_cut=history_cut,
        total_tokens=total,
    )
    return Context(messages=messages, report=report)


def pack_memory_block(
    facts: Sequence[Candidate], memories: Sequence[Candidate], budget: int,
    model: str | None, header: str = MEMORY_HEADER, *, held: Sequence[str] = (),
    share: float = INSTRUCTION_SHARE, missed: list[Candidate] | None = None,
) -> tuple[list[Candidate], list[Candidate], list[str], int]:
    """The memory block that fits ``budget`` tokens as one chat message: (facts, memories,
    its lines, its exact ``message_tokens``); no lines and 0 tokens when nothing fits.

    Items are chosen greedily by estimated cost (:func:`_pack`), standing instructions
    within ``share`` of the budget, and none that says what a chosen item or a text of
    ``held`` (the lines blocks sent earlier hold) says already; the rendered block is
    then measured exactly, and while it is over, the lowest-efficiency memories (then
    the lowest-scored facts) are dropped until their estimated cost covers the excess.
    ``missed``, when given, gets the items left out for want of room (the near misses
    a call's report shows)."""
    cap = int(budget * share)
    memories = fit_notes(memories, cap, model, header)
    chosen_facts, chosen_mems = _pack(facts, memories, budget, model, header, held, cap,
                                      missed)
    while chosen_facts or chosen_mems:
        lines = memory_block_lines(chosen_facts, chosen_mems, header)
        tokens = MESSAGE_OVERHEAD + count_lines(lines, model)  # = message_tokens
        if tokens <= budget:
            return chosen_facts, chosen_mems, lines, tokens
        excess = tokens - budget
        while excess > 0 and (chosen_mems or chosen_facts):
            dropped = (chosen_mems or chosen_facts).pop()
            excess -= max(0, dropped.tokens) + LINE_OVERHEAD
            if missed is not None:
                missed.append(dropped)
    return [], [], [], 0


def memory_block_lines(facts: Sequence[Candidate], memories: Sequence[Candidate],
                       header: str = MEMORY_HEADER) -> list[str]:
    """The memory block's content, by line (a multi-line item is one line); a
    subsection with no items is left out. Notes keep their order (their paths'); every
    other section is in score order, best first."""
    lines = [header]
    for section, group in _sections(facts, memories):
        if group:
            lines.append(section)
            ordered = group if section == NOTES_HEADER else sorted(group, key=_by_score)
            lines += ["- " + _bullet(c.text) for c in ordered]
    return lines


def _section(c: Candidate, is_fact: bool = False) -> str:
    """The header of the section ``c`` is shown under."""
    if is_fact:
        return FACTS_HEADER
    if c.kind == NOTE_KIND:
        return NOTES_HEADER
    if c.kind == RECALL_KIND:
        return RECALL_HEADER
    return RULES_HEADER if c.rule else MEMORIES_HEADER


def _sections(facts: Sequence[Candidate], memories: Sequence[Candidate]
              ) -> list[tuple[str, list[Candidate]]]:
    """The block's sections in the order they are shown, each with its items."""
    groups: dict[str, list[Candidate]] = {h: [] for h in (
        NOTES_HEADER, RULES_HEADER, FACTS_HEADER, MEMORIES_HEADER, RECALL_HEADER)}
    for f in facts:
        groups[FACTS_HEADER].append(f)
    for m in memories:
        groups[_section(m)].append(m)
    return list(groups.items())


def _by_score(c: Candidate) -> tuple[float, str, str]:
    return (-_finite(c.score), c.id, c.text)


@lru_cache(maxsize=64)
def _constant_tokens(text: str, model: str | None) -> int:
    return count_text(text, model)


def _pack(
    facts: Sequence[Candidate], memories: Sequence[Candidate], budget: int, model: str | None,
    header: str = MEMORY_HEADER, held: Sequence[str] = (), cap: int | None = None,
    missed: list[Candidate] | None = None,
) -> tuple[list[Candidate], list[Candidate]]:
    """Greedy selection under ``budget`` by estimated cost; skips what does not fit (into
    ``missed`` when given), the standing instructions past ``cap`` tokens, and what a
    chosen item or a text of ``held`` says already (:func:`same_line`)."""
    base = MESSAGE_OVERHEAD + _constant_tokens(header, model) + 1  # + its newline
    section_cost = {h: _constant_tokens(h, model) + 1 for h, _ in _sections((), ())}
    ordered_notes = sorted((m for m in memories if m.kind == NOTE_KIND and m.text.strip()),
                           key=lambda m: (m.text, m.id, m.tokens))
    ordered_rules = sorted((m for m in memories if m.rule and m.kind != NOTE_KIND
                            and m.text.strip()), key=_by_score)
    ordered_facts = sorted(
        (f for f in facts if f.text.strip()),
        key=lambda f: (-_finite(f.score), f.id, f.text, f.tokens, f.kind),
    )
    ordered_mems = sorted(
        (m for m in memories if m.text.strip() and m.kind != NOTE_KIND and not m.rule),
        key=lambda m: (-_efficiency(m), m.id, m.text, m.tokens, m.kind),
    )
    cap = budget if cap is None else cap
    used = ruled = 0
    chosen: tuple[list[Candidate], list[Candidate]] = ([], [])
    sections: set[str] = set()
    said = [content_words(t) for t in held]
    # standing instructions first (notes, then rules), within their cap; then the rest
    for group, out, capped in ((ordered_notes, chosen[1], True),
                               (ordered_rules, chosen[1], True),
                               (ordered_facts, chosen[0], False),
                               (ordered_mems, chosen[1], False)):
        for item in group:
            cost = max(0, item.tokens) + LINE_OVERHEAD
            section = _section(item, out is chosen[0])
            if section not in sections:
                cost += section_cost[section]
            if not sections:
                cost += base
            if used + cost > budget or capped and ruled + cost > cap:
                if missed is not None:
                    missed.append(item)
                continue
            words = content_words(item.text)
            if any(same_line(words, other) for other in said):
                continue
            out.append(item)
            said.append(words)
            used += cost
            ruled += cost if capped else 0
            sections.add(section)
    return chosen


def same_line(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two lines' content words say the same thing: at least
    ``SAME_LINE_OVERLAP`` of the smaller set is in the other, or, for lines of under
    three such words, the same words."""
    if not a or not b:
        return False
    if min(len(a), len(b)) < 3:
        return a == b
    return len(a & b) >= SAME_LINE_OVERLAP * min(len(a), len(b))


def fit_notes(memories: Sequence[Candidate], budget: int, model: str | None,
              header: str = MEMORY_HEADER) -> list[Candidate]:
    """``memories`` with the notes among them cut to fit ``budget`` together, fairly:
    the notes that fit an equal share stay whole, the others share what they leave
    equally, each cut at its end (a note left under ``NOTE_MIN_TOKENS`` goes)."""
    notes = [m for m in memories if m.kind == NOTE_KIND]
    base = (MESSAGE_OVERHEAD + _constant_tokens(header, model) + 1
            + _constant_tokens(NOTES_HEADER, model) + 1)
    costs = [max(0, n.tokens) + LINE_OVERHEAD for n in notes]
    left = budget - base
    if not notes or sum(costs) <= left:
        return list(memories)
    shares: dict[int, int] = {}
    for rank, i in enumerate(sorted(range(len(notes)), key=lambda i: (costs[i], i))):
        shares[i] = min(costs[i], max(0, left) // (len(notes) - rank))
        left -= shares[i]
    fitted = []
    for i, note in enumerate(notes):
        cut = note if shares[i] >= costs[i] else _cut(note, shares[i] - LINE_OVERHEAD, model)
        if cut is not None:
            fitted.append(cut)
    return fitted + [m for m in memories if m.kind != NOTE_KIND]


def _cut(c: Candidate, tokens: int, model: str | None) -> Candidate | None:
    """``c`` with its text cut to at most ``tokens``, or None under ``NOTE_MIN_TOKENS``."""
    if tokens < NOTE_MIN_TOKENS:
        return None
    keep = len(c.text) * tokens // max(c.tokens, 1)
    while keep > 0:
        text = c.text[:keep].rstrip() + NOTE_CUT
        n = count_text(text, model)
        if n <= tokens:
            return Candidate(c.kind, c.id, text, n, c.score)
        keep = min(keep - 1, keep * tokens // n)
    return None


def _efficiency(c: Candidate) -> float:
    return _finite(c.score) / max(c.tokens, 1)


def _finite(x: float) -> float:
    """NaN sorts as the lowest score, so sorting stays a total order."""
    return -math.inf if math.isnan(x) else x


def _bullet(text: str) -> str:
    """One list item: continuation lines indented so a multi-line item stays one bullet."""
    return text.strip().replace("\n", "\n  ")


def _wire(msg: Message) -> dict[str, Any]:
    """``msg.to_openai()``, with a ``None`` content made ``""`` where OpenAI requires a string."""
    out = msg.to_openai()
    if out.get("content") is None and msg.role in _CONTENT_REQUIRED:
        out["content"] = ""
    return out
