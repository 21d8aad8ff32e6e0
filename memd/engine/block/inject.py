"""Memory added to a history the client owns: how much, in what words, and where.

A client that sends its whole history (every editor plugin and agent) owns it: memd
forwards every message it sent, unchanged and in order, and only adds memory blocks
within what the model's window leaves free. This module holds the three decisions, as
pure functions and one small cache; :mod:`memd.engine.conversation.chat` wires them into a call.

**How much.** ``headroom = window - request - reserve - margin``: the request's own
tokens (messages and tool definitions), the response reserve (the request's
``max_tokens`` / ``max_completion_tokens``, else ``default_max_response_tokens``) and a
safety margin for the model's chat template and counting error (``MARGIN_SHARE`` of the
window, at least ``MARGIN_MIN`` tokens). The block gets at most the smallest of the
headroom, ``memory_max_tokens`` and ``memory_window_share`` of the window; an unknown
window gets ``memory_unknown_window_tokens``. No headroom, no block: the request goes out
as the client sent it. A request that is over the window by itself goes out unchanged too.

**Where.** Model servers reuse the longest unchanged prefix of the previous request
(llama.cpp's KV cache, vLLM's prefix cache, hosted prompt caching). A block placed right
after the system prompt changes that prefix on every call, and a local model re-reads the
whole history each turn. So by default (``"user"``) the block goes inside the newest
user message, as a text before the user's own text, which stays intact: an agent's tool
loop repeats that user message on every step, the retrieval query is that message, so
the block and everything before it are the same bytes from one step to the next, and a
new user turn changes the prompt only from the previous user turn on. Inside the user
message and not as a message of its own, because chat templates of several open models
refuse a system message after the first, or two user messages in a row.
``"before-user"`` puts it in a system message right before the newest user message (for
servers whose templates allow it); ``"system"`` right after the client's system messages.

**Stable words, stable places.** A block, once sent, stays byte for byte in the user
message it was put in, on every later call of the session that still holds that message
(:class:`StableBlocks`): the prompt's prefix stays what the model server has cached.
A new user turn gets a block of its own only with what the blocks before it do not hold
already, within what they leave of the budget; when the budget shrinks as the
conversation grows, the newest blocks go first (the least of the prompt after them to
re-read), and blocks already sent may use the safety margin before they go. A call with
the same query as the previous one, soon after it (an agent's
tool loop repeats its user message on every step), retrieves nothing: it sends the same
blocks. With placement "system" there is one place, and one block, replaced when the
retrieved items change.
"""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine.block.compile import INSTRUCTION_SHARE, Candidate, pack_memory_block
from memd.models.tokens import MESSAGE_OVERHEAD, count_text

MARGIN_SHARE = 0.02
MARGIN_MIN = 32
MIN_BLOCK_TOKENS = 48  # below this no memory line would fit with the block's header

BLOCK_HEADER = ("## Memory\nWhat memd remembers about the user from earlier "
                "conversations. Use it when relevant.")
USER_OPEN = "<memory source=\"memd\">\n"
USER_CLOSE = "\n</memory>\n\n"


@dataclass(frozen=True, slots=True)
class Room:
    """How many tokens a call's memory block may take, and why (the call report)."""

    window: int | None
    request: int
    reserve: int
    margin: int
    headroom: int | None  # None: the window is unknown
    cap: int
    budget: int  # what a new block may use; 0 = no new block
    over_window: bool  # the client's request alone does not fit the window

    @property
    def keep(self) -> int:
        """What the blocks sent on earlier calls may keep using: the headroom with the
        safety margin given up, within the cap (dropping a block the model server has
        cached makes it re-read the whole prompt after it; a refusal as too long is
        retried without memory)."""
        if self.headroom is None:
            return self.cap
        return max(0, min(self.cap, self.headroom + self.margin))

    def to_dict(self) -> dict[str, Any]:
        return {"window": self.window, "request": self.request, "reserve": self.reserve,
                "margin": self.margin, "headroom": self.headroom, "cap": self.cap,
                "budget": self.budget, "keep": self.keep, "over_window": self.over_window}


def room(window: int | None, request_tokens: int, reserve: int, *, max_tokens: int,
         window_share: float, unknown_tokens: int) -> Room:
    """The memory budget of a call (see the module docstring)."""
    if window is None:
        cap = unknown_tokens
        return Room(None, request_tokens, reserve, 0, None, cap, cap, False)
    margin = max(MARGIN_MIN, int(window * MARGIN_SHARE))
    headroom = window - request_tokens - reserve - margin
    cap = min(max_tokens, int(window * window_share))
    budget = max(0, min(headroom, cap))
    over = request_tokens + reserve > window
    return Room(window, request_tokens, reserve, margin, headroom, cap,
                budget if budget >= MIN_BLOCK_TOKENS else 0, over)


def wrap(lines: Sequence[str], placement: str) -> str:
    """The block's text as it is inserted: inside a user message it is fenced off from
    the user's own words."""
    body = "\n".join(lines)
    return USER_OPEN + body + USER_CLOSE if placement == "user" else body


def text_tokens(text: str, placement: str, model: str | None) -> int:
    """What inserting ``text`` costs: its tokens, plus a message's overhead when it is a
    message of its own."""
    n = count_text(text, model)
    return n if placement == "user" else n + MESSAGE_OVERHEAD


def newest_user(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the newest user message, or None."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def place(messages: Sequence[dict[str, Any]], text: str, placement: str,
          at: int | None = None) -> list[dict[str, Any]]:
    """``messages`` with the block added at the user message ``at`` (default: the newest);
    every message is the client's own object except the one the block goes into (a
    copy). Without a user message the block goes after the system messages."""
    out = list(messages)
    if at is None or messages[at].get("role") != "user":
        at = newest_user(messages)
    if at is None or placement == "system":
        first = next((i for i, m in enumerate(messages)
                      if m.get("role") not in ("system", "developer")), len(messages))
        out.insert(first, {"role": "system", "content": text})
    elif placement == "before-user":
        out.insert(at, {"role": "system", "content": text})
    else:
        msg = dict(messages[at])
        content = msg.get("content")
        if isinstance(content, list):
            msg["content"] = [{"type": "text", "text": text}, *content]
        else:
            msg["content"] = text + (content or "")
        out[at] = msg
    return out


#: How many of the items left out of a block for want of room its call's report names.
NEAR_MISSES = 5
#: How much of a near miss's text the call's report keeps.
MISSED_CHARS = 200


def near_misses(missed: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """The best-scored of ``missed``, at most :data:`NEAR_MISSES`, each once."""
    seen = {(c.kind, c.id): c for c in missed}
    return tuple(heapq.nlargest(NEAR_MISSES, seen.values(), key=lambda c: c.score))


@dataclass(frozen=True, slots=True)
class Block:
    """A rendered memory block: its text as inserted, its cost, what is in it."""

    text: str
    tokens: int
    facts: tuple[Candidate, ...]
    memories: tuple[Candidate, ...]
    # the best-scored items left out for want of room, at most NEAR_MISSES of them
    missed: tuple[Candidate, ...] = ()

    @property
    def key(self) -> frozenset[tuple[str, str]]:
        return frozenset((c.kind, c.id) for c in (*self.facts, *self.memories))

    @property
    def texts(self) -> tuple[str, ...]:
        """The texts of its items."""
        return tuple(c.text for c in (*self.facts, *self.memories))


def build(facts: Sequence[Candidate], memories: Sequence[Candidate], budget: int,
          placement: str, model: str | None, *, held: Sequence[str] = (),
          share: float = INSTRUCTION_SHARE) -> Block | None:
    """The block of the best facts and memories that fits ``budget`` as inserted, or None
    when none does; nothing in it says again what a text of ``held`` (the items of the
    blocks sent before) says, and standing instructions take at most ``share`` of it."""
    wrapper = count_text(USER_OPEN + USER_CLOSE, model) if placement == "user" else 0
    inner = budget - wrapper
    while inner > 0:
        missed: list[Candidate] = []
        f, m, lines, _ = pack_memory_block(facts, memories, inner, model, BLOCK_HEADER,
                                           held=held, share=share, missed=missed)
        if not lines:
            return None
        text = wrap(lines, placement)
        tokens = text_tokens(text, placement, model)
        if tokens <= budget:
            return Block(text, tokens, tuple(f), tuple(m), near_misses(missed))
        inner -= tokens - budget  # the wrapper merged differently: shrink and retry
    return None


def missed_json(blocks: Sequence[Anchored]) -> list[dict[str, Any]]:
    """The best items that did not fit ``blocks`` (none that a block holds), as a call's
    report names them."""
    held = {(c.kind, c.id) for a in blocks for c in (*a.block.facts, *a.block.memories)}
    return [{"kind": c.kind, "id": c.id, "tokens": c.tokens, "score": round(c.score, 6),
             "text": c.text[:MISSED_CHARS]}
            for a in blocks for c in a.block.missed if (c.kind, c.id) not in held]


@dataclass(frozen=True, slots=True)
class Anchored:
    """A block and the user message it sits in (the message's chain hash; "" for the
    fixed place after the system messages)."""

    anchor: str
    block: Block


@dataclass(frozen=True, slots=True)
class _Kept:
    query: str
    made_at: float
    blocks: tuple[Anchored, ...]


class StableBlocks:
    """Each session's blocks and where they sit, so that its next calls send the same
    bytes before the newest message (see the module docstring). :meth:`forget_user`
    drops a user's blocks when their memories or facts change in this process. Bounded:
    least recently used sessions go first."""

    def __init__(self, max_sessions: int = 4096, reuse_seconds: float = 60.0) -> None:
        self.max_sessions = max_sessions
        self.reuse_seconds = reuse_seconds
        self._kept: OrderedDict[tuple[str, str, str], _Kept] = OrderedDict()
        self._lock = threading.Lock()
        # how often each user's blocks were forgotten, and all of them cleared
        self._forgotten: dict[str, int] = {}
        self._cleared = 0

    def epoch(self, user_id: str) -> int:
        """A number that grows whenever the user's blocks are forgotten or cleared: read
        it before retrieving, and hand it to :meth:`settle`, so that blocks built from
        what was read before a change are not kept after it."""
        with self._lock:
            return self._epoch(user_id)

    def _epoch(self, user_id: str) -> int:
        """:meth:`epoch`; the caller holds the lock."""
        return self._cleared + self._forgotten.get(user_id, 0)

    def recall(self, user_id: str, session_id: str, placement: str, query: str,
               budget: int, now: float, present: Mapping[str, int]
               ) -> tuple[list[Anchored], bool]:
        """(kept, fresh): the session's blocks whose message is still in the request
        (``present``: chain hash -> index) and that fit ``budget`` together (the newest go
        first when they do not); ``fresh`` when they were settled for ``query`` less than
        ``reuse_seconds`` ago and all of them are kept, so nothing needs retrieving."""
        with self._lock:
            kept = self._kept.get((user_id, session_id, placement))
        if kept is None:
            return [], False
        out = [a for a in kept.blocks if a.anchor == "" or a.anchor in present]
        while out and sum(a.block.tokens for a in out) > budget:
            out.pop()
        fresh = (kept.query == query and now - kept.made_at < self.reuse_seconds
                 and len(out) == len(kept.blocks))
        return out, fresh

    def settle(self, user_id: str, session_id: str, placement: str, query: str,
               blocks: Sequence[Anchored], now: float, epoch: int | None = None) -> None:
        """Remember the blocks a call sent, for ``query``, unless the user's blocks were
        forgotten since :meth:`epoch` gave ``epoch`` (the memories they were built from
        changed meanwhile: the next call retrieves again)."""
        key = (user_id, session_id, placement)
        with self._lock:
            if epoch is not None and epoch != self._epoch(user_id):
                return
            self._kept[key] = _Kept(query, now, tuple(blocks))
            self._kept.move_to_end(key)
            while len(self._kept) > self.max_sessions:
                self._kept.popitem(last=False)

    def forget_user(self, user_id: str) -> None:
        with self._lock:
            for key in [k for k in self._kept if k[0] == user_id]:
                del self._kept[key]
            self._forgotten[user_id] = self._forgotten.get(user_id, 0) + 1

    def clear(self) -> None:
        """Drop every session's blocks (the rules that chose them changed)."""
        with self._lock:
            self._kept.clear()
            self._cleared += 1


def place_all(messages: Sequence[dict[str, Any]], blocks: Sequence[Anchored],
              placement: str, present: Mapping[str, int]) -> list[dict[str, Any]]:
    """``messages`` with every block at its anchor (see :func:`place`)."""
    out = list(messages)
    at = [(present.get(a.anchor), a.block.text) for a in blocks]
    # from the last place to the first, so that inserting shifts no place still to come
    for index, text in sorted(at, key=lambda x: -1 if x[0] is None else x[0], reverse=True):
        out = place(out, text, placement, index)
    return out
