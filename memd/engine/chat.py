"""One proxied chat call, engine side: find the session, store what is new, compile the
context, and later store the reply. No HTTP here; memd/server/proxy.py wires it in.

Session inference. Plugins resend the whole history on every call and few send a session
id. Every stored message carries a chain hash: SHA-256 over the session's non-system
messages up to and including it (canonical role, content, name, tool calls and
tool_call_id). The incoming history's chain hashes are looked up; the deepest stored
match decides:

- it is the last message of its session: the call continues that session and only the
  messages after the match are stored (exactly once, however often the history is
  resent);
- every incoming message is already stored and only assistant replies follow the match:
  a retry; nothing is stored again, and the new reply is stored only if no reply is;
- otherwise the client edited or regenerated an earlier turn: a new session branches off
  with ``parent_session_id`` and holds the incoming history;
- no match: a new session.

System messages are not part of the chain (clients often put the date in them); they are
passed through to the model first and unchanged.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memd.engine import validate as v
from memd.errors import InvalidInput
from memd.models.tokens import count_text
from memd.types import Context, Session, Usage

if TYPE_CHECKING:
    from memd.engine.memory import Memd

SYSTEM_ROLES = ("system", "developer")


def canonical(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content
                            if isinstance(p, Mapping) and p.get("type") == "text")
    calls = [
        [c.get("id"), (c.get("function") or {}).get("name"),
         (c.get("function") or {}).get("arguments")]
        for c in message.get("tool_calls") or () if isinstance(c, Mapping)
    ]
    return json.dumps([message.get("role"), (content or "").strip(), message.get("name"),
                       calls, message.get("tool_call_id")], ensure_ascii=False)


def chain_hashes(messages: Sequence[Mapping[str, Any]], previous: str | None) -> list[str | None]:
    """The chain hash of each message (None for system messages, which are skipped)."""
    out: list[str | None] = []
    head = previous or ""
    for m in messages:
        if m.get("role") in SYSTEM_ROLES:
            out.append(None)
            continue
        head = hashlib.sha256((head + "\x1e" + canonical(m)).encode("utf-8")).hexdigest()
        out.append(head)
    return out


@dataclass
class PreparedCall:
    call_id: str
    session: Session
    context: Context
    store_reply: bool
    turn: int = 0  # the session's turn count the reply answers
    started: float = field(default_factory=time.monotonic)


def _resolve(
    engine: Memd, user_id: str, workspace: str | None, history: list[dict[str, Any]],
    session_id: str | None, model: str | None,
) -> tuple[Session, list[dict[str, Any]], bool]:
    """(session, messages to store, is_retry) for an incoming non-system history."""
    store = engine.store
    hashes = [h for h in chain_hashes(history, None) if h is not None]
    depth = {h: i for i, h in enumerate(hashes)}
    matches = sorted(store.find_chain(user_id, hashes),
                     key=lambda m: (-depth[m.chain_hash or ""], -m.created_at, m.id))
    if session_id is not None:
        session = store.get_session(user_id, session_id)
        if session is None:
            session = engine.create_session(user_id, workspace=workspace, model=model,
                                            session_id=session_id)
        mine = [m for m in matches if m.session_id == session.id]
        start = depth[mine[0].chain_hash or ""] + 1 if mine else 0
        retry = bool(mine) and start == len(history)
        return session, history[start:], retry
    sessions: dict[str, Session] = {}
    for m in matches:
        s = sessions.get(m.session_id) or store.get_session(user_id, m.session_id)
        if s is None or s.workspace != workspace:
            continue
        sessions[s.id] = s
        start = depth[m.chain_hash or ""] + 1
        if m.turn_index == s.turn_count:
            return s, history[start:], False
        if start == len(history):
            after = store.get_messages(user_id, s.id, after_turn=m.turn_index)
            if all(x.role == "assistant" for x in after):
                return s, [], True
    parent = matches[0].session_id if matches else None
    if parent is not None and parent not in sessions:
        parent = None
    session = engine.create_session(user_id, workspace=workspace, model=model,
                                    parent_session_id=parent)
    return session, history, False


def prepare_chat(
    engine: Memd, user_id: str, workspace: str | None, messages: Sequence[Any],
    *, session_id: str | None = None, model: str | None = None,
    max_response_tokens: int | None = None, tools: Any = None,
) -> PreparedCall:
    """Resolve the session, store the new messages, compile the context to forward."""
    from memd.engine.sessions import last_user_text  # sessions imports this module
    uid = v.check_id(user_id, "user_id")
    ws = v.check_optional_id(workspace, "workspace")
    sid = v.check_optional_id(session_id, "session_id")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("messages must be a non-empty list")
    if not all(isinstance(m, Mapping) for m in messages):
        raise InvalidInput("each message must be an object")
    for m in messages:
        v.check_role(m.get("role"))
    system = [dict(m) for m in messages if m.get("role") in SYSTEM_ROLES]
    history = [dict(m) for m in messages if m.get("role") not in SYSTEM_ROLES]
    if not history:
        raise InvalidInput("messages must contain at least one non-system message")
    with engine.store.transaction():
        session, new, retry = _resolve(engine, uid, ws, history, sid, model)
        if new:
            engine.append(session.id, uid, new)
        session = engine.session(session.id, uid)
    tool_tokens = count_text(json.dumps(tools, sort_keys=True)) if tools else 0
    # The query is the request's last user message, which is the session's newest now
    # (named here, so that the compile can read the history while it retrieves).
    ctx = engine.context(
        uid, session_id=session.id, messages=system, model=model,
        max_response_tokens=max_response_tokens, tool_tokens=tool_tokens,
        use_session_prompt=False,
        query=last_user_text(history, engine.settings.max_text_chars),
    )
    call_id = "call-" + uuid.uuid4().hex
    engine.store.record_call(call_id, uid, session.id, session.workspace, model,
                             engine.now(), ctx.report.to_dict())
    return PreparedCall(call_id, session, ctx, store_reply=not retry,
                        turn=session.turn_count)


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
    incomplete: bool = False,
) -> None:
    """Store the assistant's reply, usage and cost, and close the call record."""
    latency = int((time.monotonic() - call.started) * 1000)
    session = call.session
    prompt = int((usage or {}).get("prompt_tokens") or 0)
    completion = int((usage or {}).get("completion_tokens") or 0)
    with engine.store.transaction():
        # Store the reply only if nothing was appended since the call was prepared: a
        # concurrent retry of the same request may have stored its reply already.
        current = engine.store.get_session(session.user_id, session.id)
        fresh = current is not None and current.turn_count == call.turn
        if reply is not None and call.store_reply and fresh and (reply.get("content") or
                                                                 reply.get("tool_calls")):
            meta: dict[str, Any] = {"call_id": call.call_id}
            if incomplete:
                meta["incomplete"] = True
            engine.append(session.id, session.user_id, [{
                "role": "assistant", "content": reply.get("content"),
                "tool_calls": reply.get("tool_calls") or None, "metadata": meta,
                "model": model, "finish_reason": finish_reason, "prompt_tokens": prompt or None,
                "completion_tokens": completion or None, "latency_ms": latency,
            }])
        if usage:
            cost = cost_microcents(engine.settings.prices, model, prompt, completion)
            engine.store.record_usage(Usage(
                id=uuid.uuid4().hex, user_id=session.user_id, created_at=engine.now(),
                session_id=session.id, workspace=session.workspace, model=model,
                prompt_tokens=prompt, completion_tokens=completion, cost_microcents=cost,
                latency_ms=latency, metadata={"call_id": call.call_id},
            ))
            engine.store.add_session_usage(session.user_id, session.id, prompt, completion,
                                           cost, engine.now())
        engine.store.finish_call(call.call_id, status, {
            "latency_ms": latency, "finish_reason": finish_reason, "incomplete": incomplete,
            "usage": dict(usage or {}),
        })
