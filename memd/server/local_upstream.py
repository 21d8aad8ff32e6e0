"""A model server inside memd: an httpx transport that answers the OpenAI chat routes from
a :class:`~memd.models.helper.HelperModel`, so that memd serves chat with no model
server at all.

The proxy talks to its upstream through an ``httpx.AsyncClient``; this transport takes the
network's place under that client (``create_app(..., upstream_transport=...)``, with any
upstream URL such as ``http://local/v1``). It answers

* ``POST /v1/chat/completions``: a chat completion, as JSON or, with ``stream: true``, as
  server-sent chunks ending in ``data: [DONE]`` (and a usage chunk when
  ``stream_options.include_usage`` asks for one). Every model name is answered by the
  helper model; tools are not offered to it (a tool call in the history reaches it as
  text); a ``response_format`` JSON schema constrains the answer.
* ``GET /v1/models``: the helper model.
* ``GET /props``, when the helper knows its context size: that size, the way llama.cpp's
  server reports it. Every model name a client sends is answered by the helper, so the
  window cannot be looked up by name in the model list; memd's window probe
  (``memd.server.windows``) asks a server whose models are ``owned_by`` "llamacpp" for
  ``/props``, which holds for any name.

The chat and model routes work without the ``/v1`` prefix too; anything else is a JSON
404.

The helper blocks, so every call into it runs in a worker thread and the event loop
never waits on the model; a stream's pieces are sent as the model makes them. A prompt
over the model's context is a 400 whose code is ``context_length_exceeded``, which the
proxy recognizes: it retries the call without the memory it added. Usage counts come
from the helper's tokenizer, with ``MESSAGE_OVERHEAD`` tokens per message for the chat
template around it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio.to_thread
import httpx

from memd.errors import InvalidInput, ModelError
from memd.models.helper import ChatMessage, HelperModel, PromptTooLong
from memd.models.tokens import MESSAGE_OVERHEAD
from memd.server.bodies import completions_body
from memd.server.failures import error_body

DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.7
_ROLES = {"system": "system", "developer": "system", "user": "user",
          "assistant": "assistant", "tool": "user", "function": "user"}


@dataclass(frozen=True)
class _Chat:
    messages: list[ChatMessage]
    max_tokens: int
    temperature: float
    stream: bool
    include_usage: bool
    json_schema: Mapping[str, Any] | None


class LocalUpstreamTransport(httpx.AsyncBaseTransport):
    """OpenAI's chat routes answered by ``helper``. ``max_tokens`` and ``temperature``
    apply to requests that do not set their own."""

    def __init__(self, helper: HelperModel, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float = DEFAULT_TEMPERATURE) -> None:
        self.helper = helper
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._created = int(time.time())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rstrip("/")
        route = path.removeprefix("/v1")
        try:
            if route == "/models":
                _allow(request, "GET")
                return httpx.Response(200, json=self._models())
            if path == "/props" and self.helper.context_length:
                _allow(request, "GET")
                return httpx.Response(200, json={
                    "default_generation_settings": {"n_ctx": self.helper.context_length},
                    "total_slots": 1})
            if route == "/chat/completions":
                _allow(request, "POST")
                return await self._chat(_parse(await request.aread(), self))
        except InvalidInput as exc:
            return _error(400, exc)
        except PromptTooLong as exc:
            return _error(400, exc, code="context_length_exceeded")
        except ModelError as exc:
            return _error(500, exc)
        return httpx.Response(404, json=error_body(
            "not_found_error", f"no route {request.method} {path} here: this local model "
            "server answers POST /v1/chat/completions and GET /v1/models"))

    def _models(self) -> dict[str, Any]:
        owner = "llamacpp" if self.helper.context_length else "memd"  # see /props
        return {"object": "list", "data": [{"id": self.helper.model, "object": "model",
                                            "created": self._created, "owned_by": owner}]}

    async def _chat(self, chat: _Chat) -> httpx.Response:
        pieces = self._pieces(chat)
        try:
            first = await anyio.to_thread.run_sync(_next, pieces)
        except BaseException:
            pieces.close()
            raise
        if not chat.stream:
            text = "" if first is None else first + "".join(
                await anyio.to_thread.run_sync(list, pieces))
            usage = await anyio.to_thread.run_sync(self._usage, chat, text)
            return httpx.Response(200, json={
                **self._head("chat.completion"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": _finish(chat, usage)}],
                "usage": usage})
        return httpx.Response(200, headers={"content-type": "text/event-stream",
                                            "cache-control": "no-cache"},
                              stream=_Events(self, chat, pieces, first))

    def _pieces(self, chat: _Chat) -> Generator[str, None, None]:
        if chat.json_schema is None:
            return self.helper.stream(chat.messages, max_tokens=chat.max_tokens,
                                      temperature=chat.temperature)
        return _whole(partial(self.helper.complete, chat.messages, max_tokens=chat.max_tokens,
                              temperature=chat.temperature, json_schema=chat.json_schema))

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": kind,
                "created": int(time.time()), "model": self.helper.model}

    def _usage(self, chat: _Chat, text: str) -> dict[str, int]:
        count = self.helper.count_tokens
        prompt = sum(count(m["content"]) + MESSAGE_OVERHEAD for m in chat.messages)
        completion = count(text) if text else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}


class _Events(httpx.AsyncByteStream):
    """A chat completion as server-sent events, read from the helper as it answers."""

    def __init__(self, upstream: LocalUpstreamTransport, chat: _Chat,
                 pieces: Generator[str, None, None], first: str | None) -> None:
        self._upstream = upstream
        self._chat = chat
        self._pieces = pieces
        self._first = first

    def _chunk(self, head: Mapping[str, Any], delta: Mapping[str, Any],
               finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {**head, "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self._chat.include_usage:
            chunk["usage"] = None
        return _event(chunk)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        head = self._upstream._head("chat.completion.chunk")
        yield self._chunk(head, {"role": "assistant", "content": ""})
        parts: list[str] = []
        piece = self._first
        try:
            while piece is not None:
                parts.append(piece)
                yield self._chunk(head, {"content": piece})
                piece = await anyio.to_thread.run_sync(_next, self._pieces)
        except ModelError as exc:  # the status is sent already: say so in the stream
            yield _event(error_body(exc.type, str(exc)))
            return
        usage = await anyio.to_thread.run_sync(self._upstream._usage, self._chat,
                                               "".join(parts))
        yield self._chunk(head, {}, _finish(self._chat, usage))
        if self._chat.include_usage:
            yield _event({**head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"

    async def aclose(self) -> None:
        # Stops the model at once (a client that went away) and lets the next call in.
        self._pieces.close()


def _next(pieces: Generator[str, None, None]) -> str | None:
    return next(pieces, None)


def _whole(answer: Callable[[], str]) -> Generator[str, None, None]:
    yield answer()


def _event(data: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def _finish(chat: _Chat, usage: Mapping[str, int]) -> str:
    return "length" if usage["completion_tokens"] >= chat.max_tokens else "stop"


def _error(status: int, exc: InvalidInput | ModelError, **extra: Any) -> httpx.Response:
    return httpx.Response(status, json=error_body(exc.type, str(exc), **extra))


def _allow(request: httpx.Request, method: str) -> None:
    if request.method != method:
        raise InvalidInput(f"{request.url.path} takes {method}, not {request.method}")


def _parse(raw: bytes, upstream: LocalUpstreamTransport) -> _Chat:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"the request body is not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    sent = completions_body(body)  # what the Chat Completions door checks, checked alike
    max_tokens = upstream.max_tokens if sent.max_tokens is None else sent.max_tokens
    if max_tokens < 1:
        raise InvalidInput("max_tokens must be a positive integer")
    temperature = body.get("temperature")
    if temperature is None:
        temperature = upstream.temperature
    if not isinstance(temperature, int | float) or isinstance(temperature, bool) \
            or not 0 <= temperature <= 2:
        raise InvalidInput("temperature must be a number from 0 to 2")
    options = body.get("stream_options")
    return _Chat(messages=[_plain(m) for m in sent.messages], max_tokens=max_tokens,
                 temperature=float(temperature), stream=sent.stream is True,
                 include_usage=isinstance(options, dict) and options.get("include_usage") is True,
                 json_schema=_schema(body.get("response_format")))


def _schema(response_format: Any) -> Mapping[str, Any] | None:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise InvalidInput("response_format.json_schema.schema must be a JSON schema object")
    return schema


def _plain(message: Any) -> ChatMessage:
    """An OpenAI message as plain role and text: the only form a helper takes."""
    if not isinstance(message, dict) or message.get("role") not in _ROLES:
        raise InvalidInput(f"each message needs a role, one of {', '.join(_ROLES)}")
    role = str(message["role"])
    text = _text(message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        text = "\n".join([text] * bool(text) + [_call_text(c) for c in calls])
    if role in ("tool", "function"):
        text = f"Tool result:\n{text}"
    return {"role": _ROLES[role], "content": text}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] if isinstance(part, dict)
                         and isinstance(part.get("text"), str) else "[attachment]"
                         for part in content)
    raise InvalidInput("message content must be a string or a list of parts")


def _call_text(call: Any) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "Tool call."
    return f"Tool call: {fn.get('name')}({fn.get('arguments') or ''})"
