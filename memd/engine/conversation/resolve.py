"""Which session a proxied chat call continues (memd.engine.conversation.chat's first step).

Plugins resend the whole history on every call and few send a session
id. Every stored message carries a chain hash: SHA-256 over the session's non-system
messages up to and including it, in a canonical form that ignores what clients rewrite
when they resend (tool-call arguments compared as parsed JSON, text parts joined, line
endings: :mod:`memd.engine.conversation.chains`). The incoming history's chain hashes are looked up.
A match counts only in a session of the same workspace whose identity agrees with the
call's: the client family (from the User-Agent), the model family and a sketch of the
system prompt that tolerates its volatile parts, the date and file listings agents put
there (:mod:`memd.engine.conversation.identity`); two clients that open with the same words get a
session each. The deepest such match decides:

- it is the last message of its session: the call continues that session and only the
  messages after the match are stored (exactly once, however often the history is
  resent);
- every incoming message is already stored and only assistant replies follow the match:
  a retry; nothing is stored again, and the new reply is stored only if no reply is;
- otherwise the client edited or regenerated an earlier turn: a new session branches off
  with ``parent_session_id`` and holds the incoming history;
- no match: a new session, which records the call's identity in its metadata, unless
  the client names its conversation in a header (opencode, Claude Code, Codex do:
  :data:`CONVERSATION_HEADERS`) and memd linked that name to a session of the same
  workspace and identity: the client rewrote its history (it compacted it), and the
  conversation goes on in that session.

System messages are not part of the chain (their volatile parts would split a
conversation at every call); they are passed through to the model first and unchanged.
A client pinning ``X-Memd-Session`` names its session: no inference, no identity check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from memd.engine.conversation.identity import Identity
from memd.types import Message, Session

if TYPE_CHECKING:
    from memd.backends.base import Store

#: Headers in which clients name their conversation, the first one sent counts: opencode's
#: ``x-session-id`` (and ``x-session-affinity``), Claude Code's
#: ``x-claude-code-session-id``, Codex's ``session-id``. The same name after a history
#: that chains to nothing is the same conversation, compacted by its client.
CONVERSATION_HEADERS = ("x-session-id", "x-claude-code-session-id", "session-id",
                        "x-session-affinity")
#: How a conversation's name is kept beside the Responses answers' ids
#: (``Store.link_response``): both name a conversation the client goes on with.
_CONVERSATION = "conversation:"


class CreateSession(Protocol):
    """How a call starts a session: the engine's checked
    :meth:`memd.engine.memory.Memd.create_session`."""

    def __call__(self, user_id: str, *, workspace: str | None = ..., model: str | None = ...,
                 session_id: str | None = ..., parent_session_id: str | None = ...,
                 metadata: Mapping[str, Any] | None = ...) -> Session: ...


def resolve(
    store: Store, create_session: CreateSession, now: Callable[[], float], user_id: str,
    workspace: str | None, history: list[dict[str, Any]],
    hashes: list[str], session_id: str | None, model: str | None, identity: Identity,
    new: int = 0, conversation: str | None = None,
) -> tuple[Session, list[dict[str, Any]], bool, bool]:
    """(session, messages to store, is_retry, client_owns_history) for an incoming
    non-system history and its chain hashes. A client pinning a session that already
    holds turns, and sending none of them, sends only its newest turn: memd owns that
    history. Without a pin, only a session of the same workspace whose identity agrees
    with the call's (memd.engine.conversation.identity) is continued, retried or branched from.

    ``hashes[new:]`` are those of the messages the client had not sent before (in an
    agent's tool loop, the model's reply that ends the stored session, then the tool
    results): they are looked up first, and the rest only when they continue no session.
    The deepest match decides, so a session continued or retried from one of the newest
    hashes is the one all of them would give. A new session is made by
    ``create_session``; ``now`` dates a conversation name's link to it."""
    depth = {h: i for i, h in enumerate(hashes)}
    metadata = {"identity": identity.to_metadata()}
    if session_id is not None:
        session = store.get_session(user_id, session_id)
        if session is None:
            session = create_session(user_id, workspace=workspace, model=model,
                                            session_id=session_id, metadata=metadata)
        mine: list[Message] = []
        for part in _lookups(hashes, new):
            mine = [m for m in _matches(store, user_id, part, depth)
                    if m.session_id == session.id]
            if mine:
                break
        start = depth[mine[0].chain_hash or ""] + 1 if mine else 0
        retry = bool(mine) and start == len(history)
        return session, history[start:], retry, bool(mine) or session.turn_count == 0
    sessions: dict[str, Session | None] = {}
    matches: list[Message] = []
    for part in _lookups(hashes, new):
        matches = _matches(store, user_id, part, depth)
        for m in matches:
            if m.session_id not in sessions:
                s = store.get_session(user_id, m.session_id)
                sessions[m.session_id] = s if s is not None and s.workspace == workspace \
                    and identity.agrees(Identity.of_session(s.metadata)) else None
            s = sessions[m.session_id]
            if s is None:
                continue
            start = depth[m.chain_hash or ""] + 1
            if m.turn_index == s.turn_count:
                return _keep(store, s, identity), history[start:], False, True
            if start == len(history):
                after = store.get_messages(user_id, s.id, after_turn=m.turn_index)
                if all(x.role == "assistant" for x in after):
                    return _keep(store, s, identity), [], True, True
    if conversation is not None and not matches:
        named = _named(store, user_id, workspace, conversation, identity)
        if named is not None:  # the client rewrote its history: stored as it now reads
            return _keep(store, named, identity), history, False, True
    parent = matches[0].session_id if matches else None
    if parent is not None and sessions.get(parent) is None:
        parent = None
    session = create_session(user_id, workspace=workspace, model=model,
                                    parent_session_id=parent, metadata=metadata)
    if conversation is not None:
        store.link_response(user_id, _CONVERSATION + conversation, session.id, now())
    return session, history, False, True


def _named(store: Store, user_id: str, workspace: str | None, conversation: str,
           identity: Identity) -> Session | None:
    """The session the client's name for its conversation was linked to, if it is of
    the same workspace and its identity agrees with the call's (a sub-agent that shares
    its parent's name has a system prompt of its own: a session of its own)."""
    sid = store.response_session(user_id, _CONVERSATION + conversation)
    session = store.get_session(user_id, sid) if sid is not None else None
    if session is None or session.workspace != workspace \
            or not identity.agrees(Identity.of_session(session.metadata)):
        return None
    return session


def conversation_of(headers: Mapping[str, str]) -> str | None:
    """The client's name for its conversation (:data:`CONVERSATION_HEADERS`), or None
    when it sends none, or one too long or with control characters to be a name."""
    for name in CONVERSATION_HEADERS:
        value = headers.get(name)
        if value:
            value = value.strip()
            if 0 < len(value) <= 200 and value.isprintable():
                return value
            return None
    return None


def _lookups(hashes: list[str], new: int) -> list[list[str]]:
    """The hashes to look up in turn: from ``new`` on, then all of them."""
    return [hashes[new:], hashes] if 0 < new < len(hashes) else [hashes]


def _matches(store: Store, user_id: str, hashes: list[str],
             depth: Mapping[str, int]) -> list[Message]:
    """The stored messages with these chain hashes, the deepest first (then the newest)."""
    return sorted(store.find_chain(user_id, hashes),
                  key=lambda m: (-depth[m.chain_hash or ""], -m.created_at, m.id))


def _keep(store: Store, session: Session, identity: Identity) -> Session:
    """``session``, its stored identity brought up to the call's: a system prompt that
    changes a little at every call is compared with its newest form, and never drifts
    away from its conversation. Writes only when something changed."""
    stored = Identity.of_session(session.metadata)
    newest = identity.over(stored)
    if newest != stored:
        store.update_session(session.user_id, session.id, metadata={
            **session.metadata, "identity": newest.to_metadata()})
    return session
