"""A scripted OpenAI Responses server for end-to-end tests: it records every request and
answers as the real API does, streamed (typed events with sequence numbers, no [DONE])
or whole, with a reasoning item carrying encrypted content."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

ENCRYPTED = "gAAAAABencrypted=="


def last_text(body: dict[str, Any]) -> str:
    """The text of the newest input item (a message or a function call's output)."""
    raw = body["input"]
    if isinstance(raw, str):
        return raw
    item = raw[-1]
    if item.get("type") == "function_call_output":
        return str(item["output"])
    content = item["content"]
    return content if isinstance(content, str) else content[-1]["text"]


def message(text: str, n: int) -> dict[str, Any]:
    """An assistant message output item."""
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "text": text}]}


class FakeResponses:
    """Answers: a reasoning item, then a ``function_call`` of the first tool when the
    request offers tools and its newest item is a user message; otherwise the message
    "ok: <last text>"."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        # refuse, as too long for the window, every request that holds memd's block
        self.refuse_memory = False

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.refuse_memory and b'<memory source=\\"memd\\">' in raw:
            return JSONResponse({"error": {
                "message": "Your input exceeds the context window of this model. Please "
                           "adjust your input and try again.",
                "type": "invalid_request_error", "param": "input",
                "code": "context_length_exceeded"}}, status_code=400)
        output = self._output(body)
        response = {"id": f"resp_{len(self.requests)}", "object": "response",
                    "created_at": 1, "status": "completed", "model": body.get("model"),
                    "output": output, "usage": self._usage(body)}
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(self._events(response), media_type="text/event-stream")

    def _usage(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"input_tokens": 100, "output_tokens": 9, "total_tokens": 109,
                "input_tokens_details": {"cached_tokens": 64},
                "output_tokens_details": {"reasoning_tokens": 3}}

    def _output(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        raw = body["input"]
        after_tool = isinstance(raw, list) and raw[-1].get("type") == "function_call_output"
        output: list[dict[str, Any]] = [{"type": "reasoning", "id": f"rs_{len(self.requests)}",
                                         "summary": [], "encrypted_content": ENCRYPTED}]
        if body.get("tools") and not after_tool:
            output.append({"type": "function_call", "id": f"fc_{len(self.requests)}",
                           "call_id": f"call_{len(self.requests)}",
                           "name": body["tools"][0]["name"],
                           "arguments": "{\"path\": \"README.md\"}", "status": "completed"})
        else:
            output.append(message(f"ok: {last_text(body)}", len(self.requests)))
        return output

    async def _events(self, response: dict[str, Any]) -> AsyncIterator[bytes]:
        n = 0

        def event(kind: str, data: dict[str, Any]) -> bytes:
            nonlocal n
            n += 1
            payload = {"type": kind, "sequence_number": n, **data}
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

        yield event("response.created", {"response": {**response, "status": "in_progress",
                                                      "output": []}})
        for i, item in enumerate(response["output"]):
            yield event("response.output_item.added", {"output_index": i, "item": item})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                for part in (text[:4], text[4:]):
                    yield event("response.output_text.delta", {
                        "output_index": i, "content_index": 0, "item_id": item["id"],
                        "delta": part})
            elif item["type"] == "function_call":
                yield event("response.function_call_arguments.delta", {
                    "output_index": i, "item_id": item["id"], "delta": item["arguments"]})
            yield event("response.output_item.done", {"output_index": i, "item": item})
        yield event("response.completed", {"response": response})
