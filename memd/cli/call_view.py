"""One call, readable: what ``memd calls --show ID`` prints above the call's JSON, as the
inspector's Calls page shows it: the window and the tokens of each part of the request,
the block exactly as the upstream received it, its lines with their kind, score and
source, the near misses that did not fit, and the prompt-cache figures the upstream
gave."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TEXT = 100  # characters of a line's text shown


def call_lines(call: Mapping[str, Any]) -> list[str]:
    """The lines that show ``call`` (a record of ``GET /v1/calls/{id}``)."""
    report = call.get("report") or {}
    meta = call.get("metadata") or {}
    tokens, room, window = (report.get("tokens") or {}, report.get("room") or {},
                            report.get("window") or {})
    mode = report.get("mode") or "-"
    out = [f"call {call.get('id')}: status {call.get('status')}, model "
           f"{call.get('model') or '-'}, session {call.get('session_id') or '-'}, "
           f"workspace {call.get('workspace') or '-'}",
           f"  mode {mode}" + (f" ({report['reason']})" if report.get("reason") else ""),
           f"  window {window.get('tokens') or 'unknown'} ({window.get('source') or '-'}): "
           f"request {tokens.get('request', 0)}, memory {tokens.get('memory', 0)}, "
           f"response reserve {room.get('reserve', 0)} tokens"]
    cache = _cache(meta.get("usage"))
    if cache:
        out.append(f"  prompt cache: {cache}")
    injected = report.get("injected")
    if injected:
        out.append("  block, exactly as sent:")
        out += [f"    {line}" for line in str(injected).splitlines()]
    elif mode != "side":
        out.append("  nothing was injected")
    for title, rows in (("lines", report.get("items") or ()),
                        ("near misses", report.get("near_misses") or ())):
        if rows:
            out.append(f"  {title}:")
            out += [_row(r) for r in rows]
    return out


def _row(item: Mapping[str, Any]) -> str:
    text = " ".join(str(item.get("text") or "").split())
    if len(text) > TEXT:
        text = text[:TEXT - 3] + "..."
    source = " ".join(str(x) for x in (item.get("section"), item.get("id")) if x)
    return (f"    {item.get('kind') or 'memory':<9} {float(item.get('score') or 0):.3f} "
            f"{item.get('tokens') or 0:>4} tok  {source}  {text}")


def _cache(usage: Any) -> str | None:
    """The prompt-cache figures of an upstream's usage (Anthropic's or OpenAI's)."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or {}
    read = usage.get("cache_read_input_tokens", details.get("cached_tokens")
                     if isinstance(details, Mapping) else None)
    written = usage.get("cache_creation_input_tokens")
    if read is None and written is None:
        return None
    return f"read {read or 0}, written {written or 0} tokens"
