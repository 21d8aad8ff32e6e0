"""The fault loop of a virtualized call, on every door that offers memd's tools
(memd.engine.virtual.faults; each API's format in memd.server.fault_formats).

memd's two memory tools go upstream with the client's. When the model's reply calls
them, memd serves the calls and asks the model again with the calls and their results
appended, up to ``virtual_max_faults`` times per client call; the client gets only the
final answer, streamed as usual when it streams, and never sees a memory tool call.
A streamed answer passes through as it arrives until a tool call starts; from there it
is held until the round ends, since only then is it known whose calls they are.

Each round's request must still fit the model's window: the results are measured
against what the virtualized request left of it (after the memory block and what
earlier rounds added), and a result that would not fit goes shortened, saying so.

A reply that calls memd's tools and the client's together: memd serves its own (a
restore takes effect on the next call; the fault is recorded) and the client gets the
reply with its own calls only, without another round. Calls made together are
independent by construction, so the client's stand without memd's results; asking the
model again instead would throw away calls it meant, or need their results, which only
the client has. Nothing of the fault rounds is stored as a message: the stored reply is
the one the client got.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import httpx
from fastapi import Request
from fastapi.responses import Response

from memd.engine.conversation.chat import PreparedCall, finish_chat
from memd.engine.virtual import faults as f
from memd.engine.virtual.pressure import fit_line
from memd.models.tokens import count_text
from memd.server.deps import engine_of, later_of
from memd.server.fault_formats import FaultFormat
from memd.server.later import answer_then_store
from memd.server.threads import in_thread
from memd.server.upstream import encode_body

SHORTENED = ("[memd: this answer was shortened to fit the model's window: {kept} of its "
             "{total} lines; ask a narrower question for the rest]")


def engaged(call: PreparedCall) -> bool:
    """Whether memd's tools go with the call: it was virtualized, and holds objects
    below full fidelity (with nothing held out there is nothing to fault back)."""
    virtual = call.report.get("virtual") or {}
    return bool(virtual.get("engaged") and virtual.get("held"))


def with_tools(body: dict[str, Any], fmt: FaultFormat) -> dict[str, Any]:
    return {**body, "tools": fmt.tools(body.get("tools"))}


async def _serve(request: Request, call: PreparedCall, ours: Sequence[Mapping[str, Any]],
                 ) -> list[str]:
    """Serve memd's calls of a reply: their answers, in order; each listed in the call
    report."""
    engine = engine_of(request)
    session = call.session
    assert session is not None  # a virtualized call is of a session
    out: list[str] = []
    listed = call.report.setdefault("virtual", {}).setdefault("faults", [])
    for tc in ours:
        served = await in_thread(f.serve, engine, call.user_id, session.id,
                                 call.turn, call.call_id, tc)
        fault = served.fault
        listed.append({"fault_id": fault.fault_id, "kind": fault.kind,
                       "question": fault.question, "objects": list(fault.object_ids),
                       "tokens_avoided": fault.tokens_avoided,
                       "latency_ms": fault.latency_ms})
        out.append(served.content)
    return out


def _faults_left(request: Request, call: PreparedCall) -> int:
    served = len((call.report.get("virtual") or {}).get("faults") or ())
    return engine_of(request).settings.virtual_max_faults - served


class _Rounds:
    """The conversation a call's fault rounds send, and what they add to the request."""

    def __init__(self, call: PreparedCall, fmt: FaultFormat, model: str | None) -> None:
        self.fmt, self.model = fmt, model
        self.sent: list[Any] = list(call.forward)
        virtual = call.report.get("virtual") or {}
        window = virtual.get("window")
        forwarded = (virtual.get("tokens") or {}).get("forwarded") or 0
        block = (call.report.get("tokens") or {}).get("memory") or 0
        # None: no window known, nothing to measure against
        self.room: int | None = (fit_line(window) - forwarded - block
                                 if isinstance(window, int) else None)

    def _cost(self, items: Sequence[Any]) -> int:
        return count_text(json.dumps(list(items), ensure_ascii=False), self.model)

    def again(self, turn: list[dict[str, Any]], ours: Sequence[Mapping[str, Any]],
              texts: list[str]) -> list[Any]:
        """The next round's conversation: the reply's turn and the results, each result
        shortened, if need be, to what the window has left."""
        if self.room is not None:
            self.room -= self._cost(turn) + self._cost(self.fmt.results(ours, [""] * len(ours)))
            texts = _fitted(texts, self.room, self.model)
        results = self.fmt.results(ours, texts)
        if self.room is not None:
            self.room -= sum(count_text(t, self.model) for t in texts)
        self.sent = [*self.sent, *turn, *results]
        return self.sent


def _fitted(texts: list[str], room: int, model: str | None) -> list[str]:
    """``texts`` within ``room`` tokens between them: each over its even share keeps its
    first lines and says it was shortened."""
    if sum(count_text(t, model) for t in texts) <= room:
        return texts
    share = max(0, room // max(1, len(texts)))
    out: list[str] = []
    for text in texts:
        lines = text.splitlines()
        kept = len(lines)
        note = SHORTENED.format(kept=0, total=len(lines))
        budget = share - count_text(note, model)
        while kept and count_text("\n".join(lines[:kept]), model) > budget:
            kept = kept * 3 // 4 if kept > 4 else kept - 1
        out.append(text if kept == len(lines) else
                   "\n".join([*lines[:kept], SHORTENED.format(kept=kept, total=len(lines))]))
    return out


async def whole(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                body: dict[str, Any], resp: httpx.Response, door_path: str,
                headers: dict[str, str], fmt: FaultFormat,
                ) -> tuple[httpx.Response, dict[str, Any] | None]:
    """Serve the faults of a whole answer: the final response, and its JSON when memd
    changed it (memd's calls taken out of a reply that also calls the client's)."""
    rounds = _Rounds(call, fmt, body.get("model") if isinstance(body.get("model"), str)
                     else None)
    while resp.is_success:
        try:
            data = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return resp, None
        found = fmt.whole(data)
        if found is None:
            return resp, None
        turn, calls = found
        ours, theirs = f.split_calls(calls)
        if not ours:
            return resp, None
        texts = await _serve(request, call, ours) if _faults_left(request, call) > 0 \
            else []
        if theirs or not texts:
            return resp, fmt.strip_whole(data)
        sent = rounds.again(turn, ours, texts)
        resp = await client.post(door_path, content=encode_body({**body, fmt.field: sent}),
                                 headers=headers)
    return resp, None


async def stream(request: Request, client: httpx.AsyncClient, call: PreparedCall,
                 body: dict[str, Any], first: httpx.Response, door_path: str,
                 upstream_headers: dict[str, str], headers: dict[str, str],
                 model: str | None, retried: bool, fmt: FaultFormat) -> Response:
    """Relay a streamed answer, serving its faults (see the module docstring)."""
    engine = engine_of(request)
    resp = first
    relay = fmt.relay()
    final = fmt.reader()  # the answer of the round relayed last
    strip = True  # stored without memd's calls, unless its round ended with none

    def store() -> None:
        reply = fmt.stored(final) if strip else final.reply()
        if reply is not None and relay.shown_id() is not None:
            reply = {**reply, "shown_response_id": relay.shown_id()}
        finish_chat(engine, call, status=resp.status_code, reply=reply,
                    finish_reason=final.finish_reason, usage=final.usage,
                    model=final.model or model,
                    incomplete=not (final.done or final.finish_reason), retried=retried)

    async def relayed() -> AsyncIterator[bytes]:
        nonlocal resp, final, strip
        rounds = _Rounds(call, fmt, model)
        try:
            while True:
                final = fmt.reader()
                held: list[bytes] = []
                async for chunk in resp.aiter_raw():
                    final.feed(chunk)
                    if held or fmt.holding(final):
                        held.append(chunk)
                        continue
                    if final.done:  # an end with none of memd's calls
                        strip = False
                    yield relay(chunk)
                await resp.aclose()
                turn, calls = fmt.streamed(final)
                ours, theirs = f.split_calls(calls)
                if not ours:
                    strip = False
                    for chunk in held:
                        yield relay(chunk)
                    return
                texts = (await _serve(request, call, ours)
                         if _faults_left(request, call) > 0 else [])
                if theirs or not texts:
                    strip = True
                    yield relay(fmt.strip_stream(b"".join(held), final))
                    return
                sent = rounds.again(turn, ours, texts)
                req = client.build_request(
                    "POST", door_path, content=encode_body({**body, fmt.field: sent}),
                    headers=upstream_headers)
                resp = await client.send(req, stream=True)
                if not resp.is_success:
                    yield await resp.aread()
                    return
                relay.next_round()
        finally:
            with anyio.CancelScope(shield=True):
                await resp.aclose()

    # Stored once the last chunk is sent, or the client has gone (what arrived is kept);
    # its next call waits for that first (memd.server.later).
    return answer_then_store(
        later_of(request), call, store, content=relayed(), status_code=first.status_code,
        headers=headers, media_type=first.headers.get("content-type", "text/event-stream"))
