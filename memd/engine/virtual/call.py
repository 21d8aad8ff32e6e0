"""Virtualization wired into a proxied chat call (memd.engine.conversation.chat): the call's mode,
budget and, when it engages, the rewritten request."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memd.engine.virtual import summaries
from memd.engine.virtual.engage import Budget, Virtualized, engages, virtualize
from memd.engine.virtual.faults import TOOLS, pinned
from memd.engine.virtual.keep import remember_fixes
from memd.engine.virtual.modes import call_mode
from memd.models.tokens import tool_tokens

RESERVE_SHARE = 0.25  # of the window: the most of it a response reserve holds back

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.config import Settings
    from memd.types import Session, WindowInfo


def engages_for(settings: Settings, session: Session, request_tokens: int,
                window: WindowInfo, max_response_tokens: int | None,
                asked: str | None) -> bool:
    """Whether :func:`for_call` would rewrite a request of ``request_tokens``: decided
    before the store is read."""
    return _plan(settings, session.workspace, request_tokens, window, max_response_tokens,
                 asked) is not None


def _plan(settings: Settings, workspace: str | None, request_tokens: int,
          window: WindowInfo, max_response_tokens: int | None, asked: str | None,
          ) -> tuple[str, int, int, Budget] | None:
    """The call's mode, window, response reserve and budget when virtualization engages,
    else None (see :func:`for_call`)."""
    mode = call_mode(settings, workspace, asked)
    tokens = window.tokens
    if tokens is None and mode == "on":
        tokens = settings.default_context_window
    if mode == "off" or tokens is None:
        return None
    reserve = (max_response_tokens if max_response_tokens is not None
               else settings.default_max_response_tokens)
    # A client's answer limit is often set for the largest models (opencode asks 32,000
    # tokens of any model): held back whole from a small window, it would leave the
    # prompt nothing, and even the result the model just asked for would be evicted. A
    # model server answers within what its window leaves, so the reserve counts at most
    # a share of the window.
    reserve = min(reserve, int(tokens * RESERVE_SHARE))
    budget = Budget.of(tokens, reserve, request_tokens, window.token_scale)
    if not engages(mode, budget, settings.virtual_zones):
        return None
    return mode, tokens, reserve, budget


def for_call(store: Store, settings: Settings, now: Callable[[], float], llm_enabled: bool,
             session: Session, messages: Sequence[Mapping[str, Any]],
             request_tokens: int, window: WindowInfo, max_response_tokens: int | None,
             asked: str | None, model: str | None, call_id: str,
             restorable: bool = False, redact: Callable[[str], str] | None = None,
             ) -> Virtualized | None:
    """The call's request virtualized, or None when virtualization does not engage
    (mode "off"; "auto" below the caution line or with the window unknown; "on" with
    the window unknown measures against ``default_context_window``). ``restorable``:
    the call offers the model ``memory_restore``, so even the result it just asked for
    may be admitted below full. ``redact``: how a memory's text loses its secrets; with
    it (and ``virtual_keep`` on) an error the call shows fixed becomes a memory
    (memd.engine.virtual.keep). ``llm_enabled``: a helper model runs, and summarizes
    the objects held out in the background."""
    plan = _plan(settings, session.workspace, request_tokens, window, max_response_tokens,
                 asked)
    if plan is None:
        return None
    mode, tokens, reserve, budget = plan
    if restorable and any(m.get("role") == "tool" for m in messages):
        # memd's memory tools go with the request when it holds results out (a request
        # with none has nothing to hold): they count in what has to fit
        budget = Budget.of(tokens, reserve, request_tokens + tool_tokens(list(TOOLS), model),
                           window.token_scale)
    done = virtualize(store, session.user_id, session.id, messages, budget,
                      settings.virtual_zones, mode=mode, model=model, call_id=call_id,
                      now=now(), restorable=restorable,
                      pinned=pinned(store, settings.virtual_restore_turns, session.user_id,
                                    session.id, session.turn_count))
    if redact is not None and settings.virtual_keep:
        remember_fixes(store, session, messages, done.superseded, redact, now())
    worth = [o.object_id for o in done.new if o.tokens_l0 >= summaries.MIN_TOKENS]
    if worth and llm_enabled:  # the helper's summaries, in the background
        summaries.enqueue(store, session.user_id, session.id, worth, model, now())
    return done
