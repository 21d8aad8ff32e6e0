"""A call's context virtualization, readable: the ``virtual`` section of a call report
(memd.engine.virtual.engage) as ``memd calls --show`` prints it above the report's
JSON, so that what memd did to the request (the zone, each object held below full and
what it lost, the tokens saved, the faults served) reads without a JSON tool."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def virtual_lines(virtual: Mapping[str, Any]) -> list[str]:
    """The lines that show ``virtual``: a summary, then one line per object held below
    full (with its declared loss), per object admitted, and per fault served."""
    tokens = virtual.get("tokens") or {}
    objects = virtual.get("objects") or {}
    counts = ", ".join(f"{objects[k]} {k}" for k in
                       ("full", "detailed", "compact", "stub", "evicted") if objects.get(k))
    out = [f"virtualization: mode {virtual.get('mode')}, zone {virtual.get('zone')} -> "
           f"{virtual.get('zone_after')} (window {virtual.get('window')}, reserve "
           f"{virtual.get('reserve')})",
           f"  tokens: {tokens.get('request')} asked, {tokens.get('forwarded')} forwarded, "
           f"{tokens.get('saved')} saved",
           f"  objects: {objects.get('total', 0)} ({objects.get('new', 0)} new)"
           + (f": {counts}" if counts else "")]
    for h in virtual.get("held") or ():
        loss = h.get("loss") or {}
        dropped = "; ".join(loss.get("dropped") or ()) or "nothing"
        answers = "; ".join(loss.get("answers") or ()) or "nothing"
        what = f"{h.get('tool') or 'tool'} {h.get('key') or ''}".rstrip()
        out.append(f"  {h.get('object_id')} {h.get('fidelity')} ({h.get('tokens')} of "
                   f"{h.get('tokens_full')} tokens) {what}")
        out.append(f"      lost: {dropped}")
        out.append(f"      still answers: {answers}")
        if h.get("entities"):
            out.append(f"      names: {', '.join(h['entities'])}")
    for a in virtual.get("admitted") or ():
        out.append(f"  admitted {a.get('object_id')} at {a.get('fidelity')} "
                   f"(score {a.get('score')})")
    for t in virtual.get("transitions") or ():
        out.append(f"  {t.get('trigger')}: {t.get('object_id')} {t.get('from')} -> "
                   f"{t.get('to')}")
    faults = virtual.get("faults") or ()
    out.append(f"  faults served: {len(faults)}")
    for f in faults:
        asked = f.get("question") or ", ".join(f.get("objects") or ())
        out.append(f"  {f.get('kind')} {f.get('fault_id')}: {asked} "
                   f"({f.get('tokens_avoided')} tokens avoided, {f.get('latency_ms')} ms)")
    return out
