"""The ``openai`` helper: any OpenAI-compatible chat server (llama.cpp's server, vLLM,
Ollama, LM Studio, a hosted API) asked over HTTP.

A JSON schema goes as ``response_format: {"type": "json_schema", ...}``, which those
servers turn into constrained decoding; the answer is still parsed here, since a server
may accept the field and ignore it.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import httpx

from memd.errors import ModelError
from memd.models.helper import ChatMessage, parse_json_answer
from memd.models.tokens import count_text

DEFAULT_TIMEOUT = 60.0


class OpenAIHelper:
    """A chat model behind an OpenAI-compatible URL.

    ``base_url``: the API root, such as ``http://127.0.0.1:8080/v1``; ``model``: the model
    name to send; ``api_key``: sent as a bearer token when given; ``timeout``: seconds
    for a whole answer; ``context_length``: the model's window, when known;
    ``transport``: an httpx transport in place of the network (tests).
    """

    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, context_length: int | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.context_length = context_length
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url + "/", headers=headers,
                                    timeout=httpx.Timeout(timeout, connect=10.0),
                                    transport=transport)

    def close(self) -> None:
        self._client.close()

    def _body(self, messages: Sequence[ChatMessage], max_tokens: int, temperature: float,
              **extra: Any) -> dict[str, Any]:
        return {"model": self.model, "messages": [dict(m) for m in messages],
                "max_tokens": max_tokens, "temperature": temperature, **extra}

    def _failed(self, what: str) -> ModelError:
        return ModelError(f"the helper model server {self.base_url} {what}; check that it "
                          f"runs and serves the model {self.model!r}")

    def _check(self, resp: httpx.Response) -> None:
        if resp.is_error:
            resp.read()
            raise self._failed(f"answered HTTP {resp.status_code}: {resp.text[:300]!r}")

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        extra: dict[str, Any] = {}
        if json_schema is not None:
            extra["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": dict(json_schema)}}
        try:
            resp = self._client.post("chat/completions", json=self._body(
                messages, max_tokens, temperature, **extra))
        except httpx.TimeoutException as exc:
            raise self._failed(f"did not answer within {self.timeout:g} s ({exc})") from exc
        except httpx.HTTPError as exc:
            raise self._failed(f"could not be reached ({type(exc).__name__}: {exc})") from exc
        self._check(resp)
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise self._failed(f"sent an answer that is not a chat completion "
                               f"({resp.text[:200]!r})") from exc
        if not isinstance(content, str):
            raise self._failed(f"sent no text in its answer ({resp.text[:200]!r})")
        if json_schema is not None:
            parse_json_answer(content, f"the helper model {self.model} at {self.base_url}")
        return content

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        body = self._body(messages, max_tokens, temperature, stream=True)
        try:
            with self._client.stream("POST", "chat/completions", json=body) as resp:
                self._check(resp)
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        return
                    piece = _delta_text(data)
                    if piece is None:
                        raise self._failed(f"sent a stream event that is not a chat "
                                           f"completion chunk ({data[:200]!r})")
                    if piece:
                        yield piece
        except httpx.TimeoutException as exc:
            raise self._failed(f"did not answer within {self.timeout:g} s ({exc})") from exc
        except httpx.HTTPError as exc:
            raise self._failed(f"could not be reached ({type(exc).__name__}: {exc})") from exc

    def count_tokens(self, text: str) -> int:
        return count_text(text, self.model)


def _delta_text(data: str) -> str | None:
    """The text of one stream chunk ("" when it carries none), None if it is no chunk."""
    try:
        chunk = json.loads(data)
    except ValueError:
        return None
    if not isinstance(chunk, dict) or "error" in chunk:
        return None
    choices = chunk.get("choices") or [{}]  # the usage chunk has none
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""
