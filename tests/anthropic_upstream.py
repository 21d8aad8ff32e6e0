"""A scripted Anthropic Messages server for end-to-end tests: it records every request as
it arrived and answers as the real API does, streamed (every event type, thinking with a
signature, tool input in JSON deltas) or whole."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SIGNATURE = "EqQBCkYIBxgCKkDsignature+/=="


def last_text(body: dict[str, Any]) -> str:
    """The text of the newest user message's last text or tool_result block."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    block = content[-1]
    if block["type"] == "tool_result":
        inner = block.get("content")
        return inner if isinstance(inner, str) else inner[-1]["text"]
    return str(block.get("text", ""))


def prompt_bytes(body: dict[str, Any]) -> bytes:
    """A request's prompt as a provider's cache sees it: tools, then system, then the
    messages (left open at the end, so a request that only adds messages extends it)."""
    return b"".join([json.dumps(body.get("tools")).encode(),
                     json.dumps(body.get("system")).encode(),
                     json.dumps(body["messages"]).encode()[:-1]])


class FakeAnthropic:
    """Answers: a thinking block (when ``thinking`` is on) then, when the request offers
    tools and the newest user message is not a tool result, a ``tool_use`` of the first
    tool; otherwise the text "ok: <last text>". ``cache_read_input_tokens`` is the length
    in bytes of the prompt prefix this request shares with the previous one
    (:func:`prompt_bytes`), a stand-in for what a provider's prompt cache reads."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        # refuse, as too long for the window, every request that holds memd's block
        self.refuse_memory = False
        self.app = Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count, methods=["POST"]),
        ])

    async def count(self, request: Request) -> Response:
        raw = await request.body()
        self.paths.append(str(request.url.path))
        return JSONResponse({"input_tokens": len(raw) // 4})

    def _cached(self) -> int:
        """The bytes of the newest request's prompt (tools, system, messages in the
        provider's cache order) that the one before already held, from the start."""
        if len(self.requests) < 2:
            return 0
        return len(os.path.commonprefix([prompt_bytes(b) for b in self.requests[-2:]]))

    def _usage(self, raw: bytes, body: dict[str, Any]) -> dict[str, int]:
        """The input side of the reply's ``usage``."""
        return {"input_tokens": len(raw) // 4, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": self._cached()}

    def _content(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if (body.get("thinking") or {}).get("type") == "enabled":
            out.append({"type": "thinking", "thinking": "Let me look.",
                        "signature": SIGNATURE})
        last = body["messages"][-1]["content"]
        after_tool = isinstance(last, list) and last[0]["type"] == "tool_result"
        if body.get("tools") and not after_tool:
            out.append({"type": "tool_use", "id": f"toolu_{len(self.requests)}",
                        "name": body["tools"][0]["name"], "input": {"path": "README.md"}})
        else:
            out.append({"type": "text", "text": f"ok: {last_text(body)}"})
        return out

    async def messages(self, request: Request) -> Response:
        raw = await request.body()
        self.raw.append(raw)
        self.paths.append(str(request.url.path) + ("?" + request.url.query
                                                   if request.url.query else ""))
        self.headers.append(dict(request.headers))
        body = json.loads(raw)
        self.requests.append(body)
        if self.refuse_memory and b'<memory source=\\"memd\\">' in raw:
            return JSONResponse({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 208110 tokens > 200000 maximum"}},
                status_code=400)
        content = self._content(body)
        stop = "tool_use" if content[-1]["type"] == "tool_use" else "end_turn"
        usage = {"output_tokens": 9, **self._usage(raw, body)}
        # a message id of its own per reply: Claude Code merges replies that share one
        message = {"id": f"msg_{len(self.requests):04d}", "type": "message",
                   "role": "assistant",
                   "model": body.get("model", "claude-test"), "content": content,
                   "stop_reason": stop, "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return JSONResponse(message)
        return StreamingResponse(self._events(message), media_type="text/event-stream")

    async def _events(self, message: dict[str, Any]) -> AsyncIterator[bytes]:
        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**message["usage"], "output_tokens": 1}}
        yield event("message_start", {"message": start})
        yield event("ping", {})
        for i, block in enumerate(message["content"]):
            if block["type"] == "thinking":
                yield event("content_block_start", {"index": i, "content_block": {
                    "type": "thinking", "thinking": "", "signature": ""}})
                yield event("content_block_delta", {"index": i, "delta": {
                    "type": "thinking_delta", "thinking": block["thinking"]}})
                yield event("content_block_delta", {"index": i, "delta": {
                    "type": "signature_delta", "signature": block["signature"]}})
            elif block["type"] == "tool_use":
                yield event("content_block_start", {"index": i, "content_block": {
                    **block, "input": {}}})
                text = json.dumps(block["input"])
                for part in (text[:5], text[5:]):
                    yield event("content_block_delta", {"index": i, "delta": {
                        "type": "input_json_delta", "partial_json": part}})
            else:
                yield event("content_block_start", {"index": i, "content_block": {
                    "type": "text", "text": ""}})
                words = block["text"].split(" ")
                for k, word in enumerate(words):
                    yield event("content_block_delta", {"index": i, "delta": {
                        "type": "text_delta", "text": word if k == 0 else " " + word}})
            yield event("content_block_stop", {"index": i})
        yield event("message_delta", {"delta": {"stop_reason": message["stop_reason"],
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": 9}})
        yield event("message_stop", {})
