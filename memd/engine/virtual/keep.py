"""What a long session's work established that outlives the session: an error and its fix.

A command whose output reported an error (an ``error_context`` object), run again later
with clean output, was fixed in between. That is worth knowing next time the same error
shows up, and the session's own objects are held only for the session. So when the later
run supersedes the failed one (:func:`memd.engine.virtual.engage.virtualize` records it
then), memd writes a memory of the pair: the command, the error's own lines with their
identifiers (error codes, file paths) and the files changed between the two runs.

The moment is the supersede, not a degradation or the session's end: only then is the
outcome known (a degraded error may still be unfixed; a proxy never sees a session end),
and it comes once per fix, since the store remembers what superseded what.

The memory goes through the normal write path (an ``ingest`` job: dedupe, merge,
provenance ``tool_output``), its text redacted first. It is made only of tool results,
which the work produced: never of the system prompt, the tool definitions or what the
assistant said. Its session is the one it came from and its message the successful run's
tool result, so erasing either erases it. Setting ``virtual_keep = false`` turns it off.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memd.engine.virtual.fidelity import key_entities
from memd.engine.virtual.segment import ERROR_MARKS, Segment, segment
from memd.types import Provenance, Scope, Tier

if TYPE_CHECKING:
    from memd.backends.base import Store
    from memd.types import Session

TAGS = ("error-fix", "work")
IMPORTANCE = 0.7
ERROR_LINES = 2  # the error's own lines quoted in the memory, at most
LINE_CHARS = 240  # of each quoted line
_CHANGE_WORDS = ("edit", "write", "patch", "replace", "create", "apply")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Fix:
    """A failed run (``error``) and the later clean run of the same command (``fixed``),
    with the sources changed in between."""

    error: Segment
    fixed: Segment
    changed: tuple[str, ...]


def fixes(segments: Sequence[Segment], superseded: Mapping[str, str]) -> list[Fix]:
    """The errors fixed by this call's supersedes (``superseded``: each object a later one
    of the same source now supersedes, by that one): for each clean run that supersedes
    failed ones, the newest failed run before it."""
    at = {s.object_id: s for s in segments}
    newest: dict[str, Segment] = {}
    for old, later in superseded.items():
        error, clean = at.get(old), at.get(later)
        if error is None or clean is None or error.object_type != "error_context" \
                or clean.object_type == "error_context" or error.index > clean.index:
            continue
        if later not in newest or newest[later].index < error.index:
            newest[later] = error
    out = []
    for later, error in newest.items():
        clean = at[later]
        changed = tuple(dict.fromkeys(
            s.source_key for s in segments
            if error.index < s.index < clean.index and s.source_key
            and any(w in (s.source_tool or "").lower() for w in _CHANGE_WORDS)))
        out.append(Fix(error, clean, changed))
    return sorted(out, key=lambda f: f.fixed.index)


def memory_text(fix: Fix) -> str:
    """The memory of ``fix``: the command, the error's lines, the identifiers they name,
    and the files changed before the clean run."""
    command = fix.error.source_key or fix.error.source_tool or "a command"
    lines = [_SPACE.sub(" ", line).strip()[:LINE_CHARS] for line in fix.error.text.splitlines()
             if any(mark in line for mark in ERROR_MARKS)][:ERROR_LINES]
    said = "; ".join(lines) or _SPACE.sub(" ", fix.error.text).strip()[:LINE_CHARS]
    names = [n for n in key_entities("\n".join(lines) or fix.error.text, command)
             if n not in said][:4]
    text = f"`{command}` failed with: {said}"
    if names:
        text += f" (naming {', '.join(names)})"
    text += ". It ran clean again"
    if fix.changed:
        text += f" after changes to {', '.join(fix.changed[:5])}"
    return text + "."


def remember_fixes(store: Store, session: Session, messages: Sequence[Mapping[str, Any]],
                   superseded: Mapping[str, str], redact: Callable[[str], str],
                   now: float) -> int:
    """Queue a memory (an ``ingest`` job) for each error this call's supersedes show
    fixed; how many were queued."""
    if not superseded:
        return 0
    found = fixes(segment(session.id, messages), superseded)
    if not found:
        return 0
    by_call = {m.tool_call_id: m.id for m in store.get_messages(session.user_id, session.id)
               if m.tool_call_id}
    for fix in found:
        text = redact(memory_text(fix))
        store.enqueue_job("ingest", {
            "user_id": session.user_id, "text": text, "workspace": session.workspace,
            "session_id": session.id, "tier": int(Tier.SEMANTIC), "scope": int(Scope.GLOBAL),
            "provenance": int(Provenance.TOOL_OUTPUT),
            "message_id": by_call.get(fix.fixed.tool_call_id or ""),
            "confidence": 1.0, "importance": IMPORTANCE, "tags": list(TAGS),
            "entities": list(key_entities(text)),
            "metadata": {"error_object": fix.error.object_id,
                         "fixed_object": fix.fixed.object_id, "session_id": session.id},
        }, session.user_id, now)
    return len(found)
