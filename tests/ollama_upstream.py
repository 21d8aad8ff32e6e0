"""A scripted Ollama server for end-to-end tests: it records every request as it arrived
and answers as Ollama does, ``/api/chat`` and ``/api/generate`` as newline-delimited JSON
(unless ``"stream": false``), the last object with the timing fields."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODELS = [{"name": "llama3.2:latest", "model": "llama3.2:latest", "size": 2019393189,
           "digest": "a80c4f17acd5", "details": {"family": "llama",
                                                 "parameter_size": "3.2B"}}]
TIMINGS = {"total_duration": 4883583458, "load_duration": 1334875,
           "prompt_eval_count": 26, "prompt_eval_duration": 342546000,
           "eval_count": 282, "eval_duration": 4535599000}
CLOSE = "\n</memory>\n\n"  # the end of memd's block
CREATED = "2026-11-28T02:00:00.000000Z"


class FakeOllama:
    """Answers a chat with a tool call of the first tool when the request offers tools
    and the newest message is the user's; otherwise "ok: <last message's text>" (after
    memd's block, when it holds one), in two pieces when streaming."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(routes=[
            Route("/api/chat", self.chat, methods=["POST"]),
            Route("/api/generate", self.generate, methods=["POST"]),
            Route("/api/show", self.show, methods=["POST"]),
            Route("/api/embed", self.embed, methods=["POST"]),
            Route("/api/tags", self.tags, methods=["GET"]),
            Route("/api/ps", self.ps, methods=["GET"]),
            Route("/api/version", self.version, methods=["GET"]),
        ])

    async def _record(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        self.raw.append(raw)
        self.paths.append(request.url.path)
        self.headers.append(dict(request.headers))
        body = json.loads(raw) if raw else {}
        self.requests.append(body)
        return body if isinstance(body, dict) else {}

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or [{}]
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        tools = body.get("tools") or []
        if tools and last.get("role") == "user":
            name = (tools[0].get("function") or {}).get("name", "tool")
            return {"role": "assistant", "content": "", "tool_calls": [{"function": {
                "name": name, "arguments": {"path": "README.md", "lines": [1, 20]}}}]}
        text = str(last.get("content", ""))
        return {"role": "assistant", "content": "ok: " + text.rsplit(CLOSE, 1)[-1]}

    async def chat(self, request: Request) -> Response:
        body = await self._record(request)
        model = body.get("model", "")
        message = self._message(body)
        last = {"model": model, "created_at": CREATED, "done": True, "done_reason": "stop",
                **TIMINGS}
        if body.get("stream") is False:
            return JSONResponse({**last, "message": message})

        async def lines() -> AsyncIterator[bytes]:
            text = message["content"]
            pieces = [{**message, "content": text[:4]}, {"role": "assistant",
                                                         "content": text[4:]}]
            for piece in pieces:
                yield json.dumps({"model": model, "created_at": CREATED, "message": piece,
                                  "done": False}).encode() + b"\n"
            yield json.dumps({**last, "message": {"role": "assistant", "content": ""}}
                             ).encode() + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def generate(self, request: Request) -> Response:
        body = await self._record(request)
        answer = {"model": body.get("model", ""), "created_at": CREATED,
                  "response": "ok", "done": True, "done_reason": "stop", **TIMINGS}
        if body.get("stream") is False:
            return JSONResponse(answer)
        return Response(json.dumps(answer).encode() + b"\n", media_type="application/x-ndjson")

    async def show(self, request: Request) -> Response:
        body = await self._record(request)
        if body.get("model") != MODELS[0]["name"]:
            return JSONResponse({"error": f"model '{body.get('model')}' not found"},
                                status_code=404)
        return JSONResponse({"parameters": "num_ctx 8192", "template": "{{ .Prompt }}",
                             "model_info": {"llama.context_length": 131072}})

    async def embed(self, request: Request) -> Response:
        body = await self._record(request)
        return JSONResponse({"model": body.get("model", ""), "embeddings": [[0.1, 0.2]]})

    async def tags(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"models": MODELS})

    async def ps(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"models": [{**MODELS[0], "context_length": 8192}]})

    async def version(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"version": "0.13.0"})
