"""Virtualization wired into a proxied chat call (memd.engine.chat): the call's mode,
budget and, when it engages, the rewritten request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memd.engine.virtual.engage import Budget, Virtualized, engages, virtualize
from memd.engine.virtual.faults import pinned
from memd.engine.virtual.modes import call_mode

if TYPE_CHECKING:
    from memd.engine.memory import Memd
    from memd.types import Session, WindowInfo


def for_call(engine: Memd, session: Session, messages: Sequence[Mapping[str, Any]],
             request_tokens: int, window: WindowInfo, max_response_tokens: int | None,
             asked: str | None, model: str | None, call_id: str) -> Virtualized | None:
    """The call's request virtualized, or None when virtualization does not engage
    (mode "off"; "auto" below the caution line or with the window unknown; "on" with
    the window unknown measures against ``default_context_window``)."""
    settings = engine.settings
    mode = call_mode(settings, session.workspace, asked)
    tokens = window.tokens
    if tokens is None and mode == "on":
        tokens = settings.default_context_window
    if mode == "off" or tokens is None:
        return None
    reserve = (max_response_tokens if max_response_tokens is not None
               else settings.default_max_response_tokens)
    budget = Budget.of(tokens, reserve, request_tokens, window.token_scale)
    if not engages(mode, budget, settings.virtual_zones):
        return None
    return virtualize(engine.store, session.user_id, session.id, messages, budget,
                      settings.virtual_zones, mode=mode, model=model, call_id=call_id,
                      now=engine.now(),
                      pinned=pinned(engine, session.user_id, session.id, session.turn_count))
