"""The two recording points around memd, and the scripted model behind it.

``ToolLoop`` decides each upstream reply from the request, as a model would: while the
newest user message has no tool result after it and the request offers the client's read
tool, call that tool on the project's file; otherwise answer in text. Side requests (a
title, say) carry no tools and so get text, whenever the client sends them. Tool-call
arguments come compact (``{"filePath":"x"}``) or spaced (``{"filePath": "x"}``): clients
re-serialize them when they resend the history, so the two differ on the wire.

``RecordingProxy`` sits between the client and memd and keeps each request as the client
sent it, with memd's response headers (``x-memd-session``, ``x-memd-call``).

A request is a side request when it offers no tools: every main turn of the four clients
offers tools, and their side requests (opencode's title) do not.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agents.clients import Client

FINAL_ANSWER = "Done: notes.txt says the build uses make."
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key", "cookie")


@dataclass
class ToolLoop:
    """The upstream's reply to one request body (see the module docstring)."""

    client: Client
    workfile: str
    spaced: bool = False
    calls: int = 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        answered = any(m.get("role") == "tool" for m in messages[(users or [0])[-1]:])
        offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
        if answered or self.client.read_tool not in offered:
            return {"role": "assistant", "content": FINAL_ANSWER}
        self.calls += 1
        args = self.client.read_args(self.workfile)
        text = json.dumps(args) if self.spaced else json.dumps(args, separators=(",", ":"))
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{self.calls:04d}", "type": "function",
            "function": {"name": self.client.read_tool, "arguments": text}}]}


def is_side_request(body: dict[str, Any] | None) -> bool:
    return isinstance(body, dict) and "messages" in body and not body.get("tools")


@dataclass
class Exchange:
    """One request a client sent to memd, and memd's response headers."""

    client: str
    run: int
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    response_headers: dict[str, str] = field(default_factory=dict)
    status: int = 0

    @property
    def side(self) -> bool:
        return is_side_request(self.body)


class RecordingProxy:
    """A reverse proxy to ``target`` that records every request (see :class:`Exchange`);
    ``client`` and ``run`` label what comes in until they change."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.client = ""
        self.run = 0
        self.exchanges: list[Exchange] = []
        self._http = httpx.AsyncClient(timeout=120)
        self.app = Starlette(routes=[Route("/{path:path}", self._forward,
                                           methods=["GET", "POST"])])

    async def _forward(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        seen = Exchange(self.client, self.run, request.method, request.url.path,
                        dict(request.headers), body)
        self.exchanges.append(seen)
        headers = {k: v for k, v in request.headers.items()
                   if k not in ("host", "content-length")}
        upstream = await self._http.send(self._http.build_request(
            request.method, self.target + request.url.path, headers=headers, content=raw,
            params=request.query_params), stream=True)
        seen.status = upstream.status_code
        seen.response_headers = dict(upstream.headers)

        async def body_bytes() -> AsyncIterator[bytes]:
            async for chunk in upstream.aiter_raw():
                yield chunk

        passed = {k: v for k, v in upstream.headers.items()
                  if k not in ("content-length", "transfer-encoding", "content-encoding")}
        return StreamingResponse(body_bytes(), status_code=upstream.status_code,
                                 headers=passed, background=BackgroundTask(upstream.aclose))


def corpus_line(seen: Exchange, root: Path, placeholder: str = "/home/dev/project") -> str:
    """One corpus record: the request as the client sent it, its headers without
    credentials or hop-by-hop noise, and whether it is a side request; the run's temporary
    directory is replaced by ``placeholder`` (also in the ``-tmp-x-y`` spelling qwen-code
    gives its per-project folders), so the corpus does not change per run."""
    headers = {k: v for k, v in seen.headers.items()
               if k.lower() not in (*CREDENTIAL_HEADERS, "host", "content-length")}
    record = {"client": seen.client, "run": seen.run, "method": seen.method,
              "path": seen.path, "headers": headers, "side": seen.side, "body": seen.body}
    text = json.dumps(record, ensure_ascii=False, sort_keys=True)
    for path, stand_in in ((str(root), placeholder),
                           (str(root).replace("/", "-"), placeholder.replace("/", "-"))):
        text = re.sub(re.escape(path), stand_in, text)
    return text


def write_corpus(folder: Path, exchanges: list[Exchange], root: Path) -> None:
    """The traffic as one JSON-lines file per client (see :func:`corpus_line`)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in dict.fromkeys(x.client for x in exchanges):
        lines = [corpus_line(x, root) for x in exchanges if x.client == name]
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
