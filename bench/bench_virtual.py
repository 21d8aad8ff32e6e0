"""Context virtualization on the replayed agent session (tests/virtual_session.py).

    nice -n 19 .venv/bin/python -m bench.bench_virtual              # 10 turns, ~160 calls
    .venv/bin/python -m bench.bench_virtual --quick                 # CI: 2 turns

The session's calls go through memd's chat path in process (prepare the call, store the
reply: what the proxy does around the model server) against a 16k window, and this
prints: the tokens each call sends upstream with memd, with no management (the client's
request as sent) and with naive truncation (the system prompt and the newest messages
that fit, no tool result without its call); the share of calls that fit the window each
way; prompt-prefix stability (the share of each forwarded request that is a
byte-identical prefix of the previous one, over the calls virtualization engaged in);
the time memd's preparing and storing adds per call (no fault: p50 and p95); and
micro-fault retrieval: over questions built from the session's tool results (each
names a function or an assertion of one output), the share whose object is among the
top 3 of memory_query's search, with the fake or the real embedder.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import memd
from bench.bench_proxy import prefix_shares
from bench.output import emit
from memd.config import load_settings
from memd.engine.conversation.chat import finish_chat, prepare_chat
from memd.engine.virtual import faults
from memd.engine.virtual.pressure import fit_line
from memd.models.tokens import message_tokens, tool_tokens
from memd.types import WindowInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from virtual_session import AgentSession, agent_session  # noqa: E402

WINDOW = 16_384
RESERVE = 1_024
MODEL = "fake-model"
_DEF = re.compile(r"^def (\w+)\(")
_ASSERT = re.compile(r"^AssertionError: expected (\d+), got (\d+)$")


def tokens(messages: list[dict[str, Any]], tools: Any) -> int:
    return sum(message_tokens(m, MODEL) for m in messages) + tool_tokens(tools, MODEL)


def truncated(messages: list[dict[str, Any]], tools: Any) -> list[dict[str, Any]]:
    """The system prompt and the newest messages that fit, none a tool result whose
    call was cut."""
    line = fit_line(WINDOW) - RESERVE - tokens(messages[:1], tools)
    kept: list[dict[str, Any]] = []
    used = 0
    for m in reversed(messages[1:]):
        used += message_tokens(m, MODEL)
        if used > line:
            break
        kept.append(m)
    kept.reverse()
    while kept and kept[0]["role"] == "tool":
        kept.pop(0)
    return [messages[0], *kept]


def questions(objects: list[Any]) -> list[tuple[str, set[str]]]:
    """Questions built from the objects' text, each with the objects that answer it
    (a file read again holds the same function)."""
    out: list[tuple[str, set[str]]] = []
    for o in objects:
        for line in o.content.splitlines():
            d, a = _DEF.match(line), _ASSERT.match(line)
            if d:
                q = f"What does the function {d.group(1)} compute, and what does it raise?"
                needle = f"def {d.group(1)}("
            elif a:
                q = (f"Which test failed with AssertionError expected {a.group(1)} "
                     f"got {a.group(2)}?")
                needle = line
            else:
                continue
            right = {p.object_id for p in objects if needle in p.content}
            out.append((q, right))
            break
    return out


def run(session: AgentSession, data_dir: Path, embedder: str) -> dict[str, Any]:
    settings = replace(load_settings(data_dir=data_dir), embedder=embedder,
                       context_window=WINDOW)
    engine = memd.open(settings=settings)
    window = WindowInfo(WINDOW, "config")
    sent, plain, naive, added, prepared, forwarded = [], [], [], [], [], []
    try:
        for at in session.calls:
            messages = session.messages[:at]
            t0 = time.perf_counter()
            call = prepare_chat(engine, "local", None, messages, model=MODEL,
                                max_response_tokens=RESERVE, tools=session.tools,
                                window=window, restorable=True)
            t1 = time.perf_counter()
            finish_chat(engine, call, status=200, reply=session.messages[at],
                        finish_reason="stop", usage=None, model=MODEL)
            added.append((time.perf_counter() - t0) * 1000)
            prepared.append((t1 - t0) * 1000)
            sent.append(tokens(call.forward, session.tools))
            plain.append(tokens(messages, session.tools))
            naive.append(tokens(truncated(messages, session.tools), session.tools))
            if "virtual" in call.report:
                forwarded.append({"messages": call.forward})
        sid = engine.store.list_sessions("local")[0].id
        objects = engine.store.context_objects("local", sid)
        asked = questions(objects)
        found = sum(1 for q, right in asked if right & {
            h.object.object_id for h in faults.search(objects, q, engine.embedder)})
    finally:
        engine.close()
    limit = fit_line(WINDOW) - RESERVE
    stable, reused, cached = prefix_shares(forwarded) if len(forwarded) > 1 else (1, 1, 1)

    def per_call(xs: list[int]) -> dict[str, Any]:
        return {"mean": round(statistics.fmean(xs)), "max": max(xs),
                "fit": round(sum(1 for x in xs if x <= limit) / len(xs), 3)}

    ordered = sorted(added)
    p50 = round(statistics.median(added), 2)
    top3 = round(found / len(asked), 4) if asked else 0.0
    return {
        "calls": len(session.calls), "tool_calls": session.tool_calls,
        "tool_tokens": session.tool_tokens(), "window": WINDOW, "reserve": RESERVE,
        "tokens_upstream": {"memd": per_call(sent), "no_management": per_call(plain),
                            "naive_truncation": per_call(naive)},
        "engaged_calls": len(forwarded),
        "prefix_share": round(stable, 4), "previous_reused": round(reused, 4),
        "prefix_tokens": round(cached, 4),
        # preparing the call (storing the new messages, virtualizing, the memory block)
        # and storing the reply: what memd adds around the model server
        "added_ms": {"p50": p50, "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
                     "prepare_p50": round(statistics.median(prepared), 2)},
        "retrieval": {"questions": len(asked), "top3": top3, "embedder": embedder},
        # [measured, limit, met]; prefix stability is the share of each forwarded
        # request that the next one starts with: what the model server's cache keeps
        "verdicts": {
            "memd's requests that fit the window": [per_call(sent)["fit"], "= 1.0",
                                                    per_call(sent)["fit"] == 1.0],
            f"micro-fault retrieval, right object in top 3 ({len(asked)} questions)":
                [top3, ">= 0.9", top3 >= 0.9],
            "prefix stability (share of each request the next one starts with)":
                [round(reused, 4), ">= 0.9", reused >= 0.9],
            "latency added per call, no fault, p50 (ms)": [p50, "<= 20", p50 <= 20],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 turns, for CI")
    ap.add_argument("--embedder", default="fake", help="fake, or minilm-onnx")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()
    session = agent_session(turns=2) if args.quick else agent_session()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(session, Path(tmp), args.embedder)
    emit(result, args.out)


if __name__ == "__main__":
    main()
