"""One proxied chat call, engine side: find the session, store what is new, build what
goes upstream, and later store the reply. No HTTP here; memd/server/proxy.py wires it in.

Two kinds of client. One that sends its whole history (every editor plugin and agent)
owns it: what goes upstream is exactly what it sent, plus one memory block within the
headroom of the model's window (:mod:`memd.engine.block.inject`); the history memd stores is a
record, never a source of what is forwarded. One that pins a session with
``X-Memd-Session`` and sends only its newest turn lets memd own the history: it gets the
compiled context of :mod:`memd.engine.block.compile` (memory, summary and stored history
within the window).

Which session a call continues, and how it is told: :mod:`memd.engine.conversation.resolve`.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memd.engine import validate as v
from memd.engine.block.inject import (
    Anchored,
    build,
    missed_json,
    newest_user,
    place_all,
    room,
)
from memd.engine.conversation.chains import SYSTEM_ROLES
from memd.engine.conversation.identity import Identity, client_family, client_of
from memd.engine.conversation.resend import Resent
from memd.engine.conversation.resolve import resolve
from memd.engine.conversation.side import system_hash
from memd.engine.conversation.step import StepWrites
from memd.engine.learning.pause import is_paused
from memd.engine.retrieval.retrieve import SIDE
from memd.engine.virtual import Virtualized
from memd.engine.virtual.call import engages_for, for_call
from memd.errors import InvalidInput
from memd.models.tokens import tool_tokens
from memd.types import Session, Usage, WindowInfo

if TYPE_CHECKING:
    from memd.engine.memory import Memd


@dataclass
class PreparedCall:
    call_id: str
    session: Session | None  # None: a side request (memd.engine.conversation.side), of no session
    forward: list[dict[str, Any]]  # the messages to send upstream
    plain: list[dict[str, Any]]  # the same without memory: what a retry sends
    report: dict[str, Any]  # what went in and why (the call record)
    store_reply: bool
    turn: int = 0  # the session's turn count the reply answers
    started: float = field(default_factory=time.monotonic)
    user_id: str = ""
    workspace: str | None = None
    # ``plain`` is the client's own messages: its request, without memory, goes upstream
    # as the client's own bytes (a side request's, or a history memd adds nothing to)
    plain_as_sent: bool = False
    # why the block the engine placed was not sent (a door had no place for it in the
    # client's own format); None: it was, or there was none
    dropped: str | None = None
    # when virtualization rewrote the request: the index in the client's messages of
    # each message of ``plain`` (what a door needs to rewrite its own format alike)
    kept: list[int] | None = None
    # a tool-loop step's writes, when they wait for the answer (see
    # memd.engine.conversation.step): finish_chat stores them before the reply
    step: StepWrites | None = None

    @property
    def memory_added(self) -> bool:
        return self.forward is not self.plain

    @property
    def side(self) -> bool:
        return self.session is None


def prepare_chat(
    engine: Memd, user_id: str, workspace: str | None, messages: list[dict[str, Any]],
    *, session_id: str | None = None, model: str | None = None,
    max_response_tokens: int | None = None, tools: Any = None,
    window: WindowInfo | None = None, placement: str | None = None,
    client: str | None = None, note: Mapping[str, Any] | None = None,
    virtualize: str | None = None, conversation: str | None = None,
    restorable: bool = False, defer: bool = False,
) -> PreparedCall:
    """Resolve the session, store the new messages, and build what to forward.
    ``client`` names the caller (its User-Agent, or a client family's name): with the
    model and the system prompt, it tells apart conversations that open with the same
    words (memd.engine.conversation.identity). ``note`` is added to the call's report (a door's word
    on how it read the request). ``virtualize``: the mode the request's
    ``X-Memd-Virtualize`` header asks for (memd.engine.virtual). ``conversation``: the
    client's name for its conversation (:func:`conversation_of`). ``defer``: the
    caller finishes the call with :func:`finish_chat`, so a tool-loop step's writes may
    wait for it (memd.engine.conversation.step).

    A client that sends its history gets it forwarded unchanged plus one memory block
    within the window's headroom (:mod:`memd.engine.block.inject`); a client that sends only its
    newest turn gets the whole compiled context (:mod:`memd.engine.block.compile`)."""
    uid = v.check_id(user_id, "user_id")
    ws = v.check_optional_id(workspace, "workspace")
    sid = v.check_optional_id(session_id, "session_id")
    # An agent's tool output may hold a NUL or a lone surrogate: the request still goes
    # upstream as sent, and memd hashes, stores and searches a copy with U+FFFD there.
    # What the agent sent before is not checked again (memd.engine.conversation.resend).
    resent = engine.resent.read(uid, messages)
    clean = resent.clean
    model = None if model is None else v.clean_chars(model)
    window = window or WindowInfo(None)
    system = [m for m in clean if m.get("role") in SYSTEM_ROLES]
    history = [m for m in clean if m.get("role") not in SYSTEM_ROLES]
    if not history:
        raise InvalidInput("messages must contain at least one non-system message")
    query = resent.query(engine.settings.max_message_chars, engine.redact)
    if is_paused(engine.store, uid, ws):
        return _paused(engine, uid, ws, messages, resent, tools, query, model,
                       max_response_tokens, window, placement, note)
    # The query's vector is computed while the messages are hashed and stored (the model
    # releases the GIL); retrieval then finds it in the embedder's query cache. The query
    # of the request this one resends was embedded then (an agent's tool loop keeps its
    # query, and retrieves nothing again).
    vector = (SIDE.submit(engine.query_vector, query)
              if query and query != resent.previous_query else None)
    hashes = resent.hashes
    with ExitStack() as step:
        step.enter_context(engine.store.transaction())
        session, new, retry, client_owns = resolve(
            engine.store, engine.create_session, engine.now, uid, ws, history,
            [h for h in hashes if h is not None], sid, model,
            Identity.of_request(client, model, system),
            new=sum(1 for h in hashes[:resent.reused] if h is not None),
            conversation=conversation)
        counted = (resent.tokens(model) + tool_tokens(tools, model)) if client_owns else 0
        # A tool-loop step's writes may wait for its answer
        # (memd.engine.conversation.step): nothing of them changes what is forwarded.
        later = (defer and bool(new) and vector is None and client_owns
                 and session.turn_count > 0
                 and not engages_for(engine.settings, session, counted, window,
                                     max_response_tokens, virtualize))
        if later:
            new = [v.check_message(m, i) for i, m in enumerate(new)]  # refused before
        else:
            if new:  # counted and hashed already, and the session just read
                engine.append(session.id, uid, new, session=session,
                              known=resent.known(new, session.model))
            session = engine.session(session.id, uid)
        if query and vector is not None:
            # A new query: its vector is awaited, and its memory retrieved, with the
            # step's messages committed. A step that asks nothing new (an agent's tool
            # loop) keeps the transaction to its call record: one commit for the step.
            step.close()
            vector.result()
            # a side call that quotes this turn is told apart by it
            # (memd.engine.conversation.side); a tool loop repeats the turn noted already
            engine.recent_turns.note(uid, client_family(client) or "", system_hash(system),
                                     query, engine.now())
        call_id = "call-" + uuid.uuid4().hex
        window_report = {"tokens": window.tokens, "source": window.source,
                         "detail": window.detail}
        virtual = None
        if client_owns:
            # _augment hands ``plain`` itself back when it adds nothing (memory_added)
            plain = list(messages)
            virtual = for_call(engine.store, engine.settings, engine.now,
                               engine.jobs.llm_enabled, session, plain, counted, window,
                               max_response_tokens, virtualize, model, call_id, restorable,
                               engine.redact)
            if virtual is not None:
                plain = virtual.messages
            forward, report = _augment(engine, uid, session, plain, resent, counted,
                                       query, model, max_response_tokens, window, placement,
                                       virtual)
            if virtual is not None:
                report["virtual"] = virtual.report
        else:
            ctx = engine.context(
                uid, session_id=session.id, messages=system, model=model,
                context_window=window.tokens, max_response_tokens=max_response_tokens,
                tool_tokens=tool_tokens(tools, None), use_session_prompt=False, query=query,
                original_history=True,  # the client's own conversation, forwarded as sent
            )
            forward = plain = ctx.messages
            report = {"mode": "compiled", **ctx.report.to_dict()}
        report["window"] = window_report
        report.update(note or {})
        writes = None
        if later:
            writes = _step_writes(engine, uid, session, new, resent, call_id, model, report)
        else:
            engine.store.record_call(call_id, uid, session.id, session.workspace, model,
                                     engine.now(), report)
        return PreparedCall(call_id, session, forward, plain, report,
                            store_reply=not retry, turn=session.turn_count, user_id=uid,
                            workspace=session.workspace,
                            plain_as_sent=client_owns and virtual is None,
                            kept=virtual.kept if virtual is not None else None,
                            step=writes)


def _step_writes(engine: Memd, user_id: str, session: Session, new: list[dict[str, Any]],
                 resent: Resent, call_id: str, model: str | None,
                 report: dict[str, Any]) -> StepWrites:
    """The writes of a step whose messages are stored with its answer: the call's record
    and the new messages, in one transaction, timed as the call."""
    at = engine.now()

    def record() -> None:
        engine.store.record_call(call_id, user_id, session.id, session.workspace, model,
                                 at, report)

    def write() -> int | None:
        with engine.store.transaction():
            record()
            if engine.session(session.id, user_id).turn_count != session.turn_count:
                return None  # another call of the conversation stored them meanwhile
            stored = engine.sessions.append(session.id, user_id, new, session=session,
                                            known=resent.known(new, session.model))
            return session.turn_count + len(stored)  # each stored message is a turn

    return StepWrites(write, record, call_id)


def _paused(
    engine: Memd, user_id: str, workspace: str | None, messages: list[Any], resent: Resent,
    tools: Any, query: str | None, model: str | None, max_response_tokens: int | None,
    window: WindowInfo, placement: str | None, note: Mapping[str, Any] | None,
) -> PreparedCall:
    """A call while learning is paused (memd.engine.learning.pause): forwarded with its memory
    block as any other, but of no stored session: an unsaved one stands in for
    retrieval, no message is stored and the reply is not kept (only the call's report
    and its usage are)."""
    now = engine.now()
    standin = Session(id="paused-" + uuid.uuid4().hex, user_id=user_id, workspace=workspace,
                      created_at=now, updated_at=now, model=model)
    plain = list(messages)
    counted = resent.tokens(model) + tool_tokens(tools, model)
    forward, report = _augment(engine, user_id, standin, plain, resent, counted, query,
                               model, max_response_tokens, window, placement)
    report.update(paused=True, window={"tokens": window.tokens, "source": window.source,
                                       "detail": window.detail}, **(note or {}))
    call_id = "call-" + uuid.uuid4().hex
    engine.store.record_call(call_id, user_id, None, workspace, model, now, report)
    return PreparedCall(call_id, None, forward, plain, report, store_reply=False,
                        user_id=user_id, workspace=workspace, plain_as_sent=True)


def prepare_side(engine: Memd, user_id: str, workspace: str | None, model: str | None,
                 messages: list[dict[str, Any]] | None, reason: str,
                 window: WindowInfo | None = None,
                 note: Mapping[str, Any] | None = None) -> PreparedCall:
    """A side request (:mod:`memd.engine.conversation.side`): forwarded as sent, of no session, with
    nothing stored or retrieved; only its call record (and later its usage) is kept.
    ``messages`` None: a call that has none (a text completion)."""
    uid = v.check_id(user_id, "user_id")
    ws = v.check_optional_id(workspace, "workspace")
    if messages is None:
        messages = []
    window = window or WindowInfo(None)
    report = {"mode": "side", "reason": reason,
              "window": {"tokens": window.tokens, "source": window.source,
                         "detail": window.detail}, **(note or {})}
    call_id = "call-" + uuid.uuid4().hex
    engine.store.record_call(call_id, uid, None, ws,
                             None if model is None else v.clean_chars(model), engine.now(),
                             report)
    return PreparedCall(call_id, None, messages, messages, report, store_reply=False,
                        workspace=ws, user_id=uid, plain_as_sent=True)


def _augment(
    engine: Memd, user_id: str, session: Session, messages: list[dict[str, Any]],
    resent: Resent, counted: int, query: str | None, model: str | None,
    max_response_tokens: int | None, window: WindowInfo, placement: str | None,
    virtual: Virtualized | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The client's messages (``counted`` tokens with their tools) plus a memory block
    where there is room, and the report; ``virtual``: how memd rewrote them
    (memd.engine.virtual)."""
    settings = engine.settings
    placement = placement or settings.memory_placement
    if virtual is None:
        hashes = resent.hashes
    else:
        hashes = [resent.hashes[i] for i in virtual.kept]
        counted = virtual.tokens
    scaled = math.ceil(counted * window.token_scale)
    reserve = (max_response_tokens if max_response_tokens is not None
               else settings.default_max_response_tokens)
    space = room(window.tokens, scaled, reserve, max_tokens=settings.memory_max_tokens,
                 window_share=settings.memory_window_share,
                 unknown_tokens=settings.memory_unknown_window_tokens)
    blocks: list[Anchored] = []
    present: dict[str, int] = {}
    reason = None
    if space.over_window:
        reason = "the request alone is over the model's window: forwarded unchanged"
    elif not query:
        reason = "no user message to retrieve for"
    else:
        # Blocks are built in memd's counts; the budget is in the model's.
        budget = math.floor(space.budget / window.token_scale)
        keep = math.floor(space.keep / window.token_scale)
        present = {h: i for i, h in enumerate(hashes)
                   if h is not None and messages[i].get("role") == "user"}
        blocks = _blocks(engine, user_id, session, messages, hashes, present, query,
                         budget, keep, model, placement)
        if not blocks:
            reason = ("nothing relevant to add" if space.budget
                      else "no room for memory in the model's window")
    memory = sum(a.block.tokens for a in blocks)
    added = math.ceil(memory * window.token_scale)
    report: dict[str, Any] = {
        "mode": "transparent", "placement": placement, "room": space.to_dict(),
        "token_scale": window.token_scale, "reason": reason,
        "tokens": {"request": scaled, "memory": added, "total": scaled + added},
        "injected": "\n".join(a.block.text for a in blocks) or None,
        "blocks": [{"at": present.get(a.anchor), "tokens": a.block.tokens,
                    "text": a.block.text} for a in blocks],
        "items": [
            {"section": "fact" if c.kind == "fact" else "memory", "kind": c.kind, "id": c.id,
             "tokens": c.tokens, "score": round(c.score, 6), "text": c.text}
            for a in blocks for c in (*a.block.facts, *a.block.memories)
        ],
        "near_misses": missed_json(blocks),
    }
    if not blocks:
        return messages, report
    return place_all(messages, blocks, placement, present), report


def _blocks(
    engine: Memd, user_id: str, session: Session, messages: list[dict[str, Any]],
    hashes: Sequence[str | None], present: dict[str, int], query: str, budget: int,
    keep: int, model: str | None, placement: str,
) -> list[Anchored]:
    """The session's blocks for this call: those sent before that still stand, plus one
    for the newest user message with what they do not hold (memd.engine.block.inject)."""
    now = engine.now()
    epoch = engine.blocks.epoch(user_id)  # a change to the memories meanwhile: not kept
    kept, fresh = engine.blocks.recall(user_id, session.id, placement, query, keep, now,
                                       present)
    kept_tokens = sum(a.block.tokens for a in kept)
    if fresh or budget <= kept_tokens and placement != "system":
        return kept
    newest = newest_user(messages)
    anchor = hashes[newest] or "" if newest is not None and placement != "system" else ""
    held: tuple[str, ...] = ()
    if placement == "system":  # one place: its one block follows what is retrieved
        taken: set[tuple[str, str]] = set()
        room_left = budget
    elif any(a.anchor == anchor for a in kept):  # the newest user message has its block
        return kept
    else:
        taken = {k for a in kept for k in a.block.key}
        held = tuple(t for a in kept for t in a.block.texts)
        room_left = budget - kept_tokens
    facts, mems = engine.memory_candidates(user_id, query, session=session,
                                           exclude_session=True,
                                           sent_chains=[h for h in hashes if h]
                                           if engine.settings.memory_recall else None)
    new = build([f for f in facts if ("fact", f.id) not in taken],
                [m for m in mems if (m.kind, m.id) not in taken], room_left, placement, model,
                held=held, share=engine.settings.instruction_share)
    if new is not None and not (placement == "system" and kept
                                and kept[0].block.key == new.key):
        kept = [Anchored("", new)] if placement == "system" else [*kept, Anchored(anchor, new)]
        engine.record_used(user_id, new.memories)
    engine.blocks.settle(user_id, session.id, placement, query, kept, now, epoch)
    return kept


def cost_microcents(prices: Mapping[str, Sequence[float]], model: str | None,
                    prompt_tokens: int, completion_tokens: int) -> int:
    """Cost from a price table of USD per million tokens, ``[input, output]``."""
    price = prices.get(model or "") or prices.get("*")
    if not price:
        return 0
    # 1 USD = 1e8 microcents; per-million price -> tokens * price * 100
    return round(prompt_tokens * price[0] * 100 + completion_tokens * price[1] * 100)


def finish_chat(
    engine: Memd, call: PreparedCall, *, status: int, reply: Mapping[str, Any] | None,
    finish_reason: str | None, usage: Mapping[str, Any] | None, model: str | None,
    incomplete: bool = False, retried: bool = False,
) -> None:
    """Store the assistant's reply, usage and cost, and close the call record
    (``retried``: the model server refused the request with memory as too long, and got
    it again without)."""
    if call.step is not None:  # the step's messages first, if still to store
        call.step.run()
    latency = int((time.monotonic() - call.started) * 1000)
    session = call.session
    prompt = int((usage or {}).get("prompt_tokens") or 0)
    completion = int((usage or {}).get("completion_tokens") or 0)
    with engine.store.transaction():
        if session is not None:
            _store_reply(engine, call, session, reply, finish_reason, model, incomplete,
                         latency, prompt, completion)
            # an answer the model server keeps by its id (an OpenAI Responses one) is
            # continued by naming the id alone: the session of the turn it answers
            for key in ("response_id", "shown_response_id"):
                answered = (reply or {}).get(key)
                if isinstance(answered, str) and 0 < len(answered) <= 256:
                    engine.store.link_response(session.user_id, v.clean_chars(answered),
                                               session.id, engine.now())
        if usage:
            cost = cost_microcents(engine.settings.prices, model, prompt, completion)
            engine.store.record_usage(Usage(
                id=uuid.uuid4().hex, user_id=call.user_id, created_at=engine.now(),
                session_id=session.id if session else None, workspace=call.workspace,
                model=model, prompt_tokens=prompt, completion_tokens=completion,
                cost_microcents=cost, latency_ms=latency, metadata={
                    "call_id": call.call_id,  # the client, so usage sums per client
                    "client": client_of(session.metadata) if session else None},
            ))
            if session is not None:
                engine.store.add_session_usage(session.user_id, session.id, prompt,
                                               completion, cost, engine.now())
        engine.store.finish_call(call.call_id, status, {
            "latency_ms": latency, "finish_reason": finish_reason, "incomplete": incomplete,
            "retried": retried, "usage": dict(usage or {}),
        }, without_memory(call.report) if retried
            else without_memory(call.report, call.dropped) if call.dropped
            # the faults served (memd.server.faults) are listed in the report as they go
            else call.report if (call.report.get("virtual") or {}).get("faults") else None)


def without_memory(report: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    """The report of a call sent without its memory block (by default: the model server
    refused it as too long, and it went again without): what the forwarded request
    carried, the block it dropped kept apart under ``dropped``."""
    tokens = report.get("tokens") or {}
    return {
        **report, "injected": None, "blocks": [], "items": [],
        "reason": reason or "the model server refused the request with memory as too "
                            "long; it was sent again without",
        "tokens": {**tokens, "memory": 0, "total": tokens.get("request")},
        "dropped": {"tokens": tokens.get("memory"), "items": report.get("items", [])},
    }


def _store_reply(engine: Memd, call: PreparedCall, session: Session,
                 reply: Mapping[str, Any] | None, finish_reason: str | None,
                 model: str | None, incomplete: bool, latency: int, prompt: int,
                 completion: int) -> None:
    """Store the model's reply to a turn, only if nothing was appended since the call
    was prepared: a concurrent retry of the same request may have stored its reply."""
    current = engine.store.get_session(session.user_id, session.id)
    turn = call.turn if call.step is None else call.step.turn  # None: the step failed
    fresh = current is not None and turn is not None and current.turn_count == turn
    if reply is None or not call.store_reply or not fresh or not (
            reply.get("content") or reply.get("tool_calls")):
        return
    meta: dict[str, Any] = {"call_id": call.call_id}
    if incomplete:
        meta["incomplete"] = True
    if isinstance(reply.get("shown_response_id"), str):  # see memd.server.responses
        meta.update(shown_response_id=reply["shown_response_id"],
                    response_id=reply.get("response_id"))
    engine.append(session.id, session.user_id, [{
        "role": "assistant", "content": reply.get("content"),
        "tool_calls": reply.get("tool_calls") or None, "metadata": meta,
        "model": model, "finish_reason": finish_reason, "prompt_tokens": prompt or None,
        "completion_tokens": completion or None, "latency_ms": latency,
    }], session=current)
