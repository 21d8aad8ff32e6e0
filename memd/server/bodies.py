"""A proxied call's body, parsed and checked once, at the door.

Each door reads a few fields of its format's request (the model, the stream flag, the
conversation, the tools, the answer limit): one function per door checks those fields,
raises InvalidInput (a 400) naming the first that is wrong, and returns them typed, with
the conversation already in memd's model. Everything after the door (the engine, the
relay) reads this object, never the body again. The body itself, ``raw``, goes upstream
as the client sent it: memd reads a request, it does not rewrite it. The OpenAPI schema
of each door (:mod:`memd.server.schemas`) states the same rules for a client to read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memd.engine import validate
from memd.engine.formats import anthropic as a
from memd.engine.formats import ollama as o
from memd.engine.formats import responses as r
from memd.errors import InvalidInput
from memd.server.ollama_schema import check_chat
from memd.server.schemas import INSTRUCTION_ROLES, SAYING_ROLES

#: What a door's ``put_back`` is given: the engine's messages aligned with the
#: conversation it was handed (None where one was left out).
Placed = Sequence[Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Body:
    """A call memd forwards: ``raw`` the JSON object as sent, ``model`` its model as memd
    records it, ``stream`` whether it asks for a stream (None: it does not say, and the
    door's default holds)."""

    raw: dict[str, Any]
    model: str | None
    stream: bool | None

    def as_sent(self) -> bool:
        """Whether ``raw`` is what the client sent (else memd changed it, and what
        memd adds nothing to cannot go as the client's bytes)."""
        return True


@dataclass(frozen=True, slots=True)
class ChatBody(Body):
    """A chat call: ``messages`` its conversation in memd's model (the Chat Completions
    message list), ``shape`` what side-request detection reads of it, ``tools`` the tools
    it offers the model (counted against the window), ``max_tokens`` its answer limit."""

    messages: list[dict[str, Any]]
    shape: Mapping[str, Any]
    tools: Any
    max_tokens: int | None

    def put_back(self, placed: Placed) -> Any:
        """The body's conversation field with the engine's changes put back in the door's
        own format; None when the door cannot (it then goes as sent). Chat Completions
        forwards the engine's messages themselves, so it has nothing to put back."""
        return None


@dataclass(frozen=True, slots=True)
class MessagesBody(ChatBody):
    """An Anthropic Messages call; ``seen`` maps its conversation to the client's."""

    seen: a.View

    def put_back(self, placed: Placed) -> Any:
        return a.forward(self.raw, self.seen, placed)


@dataclass(frozen=True, slots=True)
class ResponsesBody(ChatBody):
    """An OpenAI Responses call; ``previous`` the stored answer it continues, if any."""

    seen: r.View
    previous: str | None
    # the previous_response_id the client sent, when memd put the model server's own in
    # ``raw`` (memd.server.responses)
    shown_previous: str | None = None

    def as_sent(self) -> bool:
        return self.shown_previous is None

    def put_back(self, placed: Placed) -> Any:
        return r.forward(self.raw, self.seen, placed)


@dataclass(frozen=True, slots=True)
class OllamaBody(ChatBody):
    """An Ollama chat call; ``num_ctx`` the window it asks the model to run with."""

    num_ctx: int | None

    def put_back(self, placed: Placed) -> Any:
        return o.forward(self.raw, self.messages, placed)


def checked_model(raw: Mapping[str, Any]) -> str | None:
    """The request's model as memd records it, after the checks every door makes of the
    model and the stream flag."""
    if "stream" in raw and not isinstance(raw["stream"], bool):
        raise InvalidInput("'stream' must be a boolean")
    if "model" in raw and not isinstance(raw["model"], str):
        raise InvalidInput(f"'model' must be a string, not {type(raw['model']).__name__}")
    return validate.clean_chars(raw["model"]) if "model" in raw else None


def token_field(raw: Mapping[str, Any], name: str) -> int | None:
    """A token limit of the request: a non-negative integer, or None when not sent."""
    value = raw.get(name)
    if isinstance(value, float) and value.is_integer():  # JSON does not tell 3.0 from 3
        value = int(value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 0):
        raise InvalidInput(f"{name} must be a non-negative integer, not {value!r}")
    return value


def _stream(raw: Mapping[str, Any]) -> bool | None:
    stream = raw.get("stream")  # a boolean, once checked_model has passed
    return stream if isinstance(stream, bool) else None


def plain_body(raw: dict[str, Any]) -> Body:
    """A call forwarded as sent (a text completion): only its model and stream flag are
    read."""
    return Body(raw, checked_model(raw), _stream(raw))


def completions_body(raw: dict[str, Any]) -> ChatBody:
    """A Chat Completions call: ``messages`` a non-empty list of objects."""
    model = checked_model(raw)
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' is required and must be a non-empty list")
    if not all(isinstance(m, dict) for m in messages):
        raise InvalidInput("each message must be an object")
    limit = token_field(raw, "max_completion_tokens")
    legacy = token_field(raw, "max_tokens")
    return ChatBody(raw, model, _stream(raw), messages, raw, raw.get("tools"),
                    limit or legacy)


def _blocks_or_text(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(
        isinstance(b, dict) and isinstance(b.get("type"), str) for b in value))


def messages_body(raw: dict[str, Any]) -> MessagesBody:
    """An Anthropic Messages call: a non-empty list of messages, each with a role and
    content (text or blocks), and a system prompt of text or blocks."""
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("'messages' is required and must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
            raise InvalidInput(f"messages[{i}] must be an object with a role of user, "
                               "assistant or system")
        if not _blocks_or_text(m.get("content")):
            raise InvalidInput(f"messages[{i}].content must be text or a list of blocks, "
                               "each with a type")
    if "system" in raw and not _blocks_or_text(raw["system"]):
        raise InvalidInput("'system' must be text or a list of blocks")
    model = checked_model(raw)
    max_tokens = token_field(raw, "max_tokens")
    seen = a.view(raw)
    return MessagesBody(raw, model, _stream(raw), seen.messages, a.side_body(raw, seen),
                        raw.get("tools"), max_tokens, seen)


def responses_body(raw: dict[str, Any]) -> ResponsesBody:
    """An OpenAI Responses call: ``input`` a string or a non-empty list of item objects
    (their content parts objects), not all of them instructions;
    ``previous_response_id`` a string."""
    items = raw.get("input")
    if not isinstance(items, str | list) or not items:
        raise InvalidInput("'input' is required: a string or a non-empty list of items")
    if isinstance(items, list):
        if not all(isinstance(i, dict) for i in items):
            raise InvalidInput("'input' items must be objects")
        for i, item in enumerate(items):
            content = item.get("content")
            if isinstance(content, list) and not all(isinstance(p, dict) for p in content):
                raise InvalidInput(f"input[{i}].content parts must be objects")
            if item.get("role") in SAYING_ROLES and not isinstance(content, str | list):
                raise InvalidInput(f"input[{i}] is a {item['role']} message: its 'content' "
                                   "must be a string or a list of parts")
            kind = item.get("type")
            if isinstance(kind, str) and kind.endswith("_output") \
                    and not isinstance(item.get("call_id"), str):
                raise InvalidInput(f"input[{i}] is a {kind}: its 'call_id' must be the "
                                   "string id of the call it answers")
        if all(i.get("role") in INSTRUCTION_ROLES for i in items):
            raise InvalidInput("'input' needs an item that is not a system or developer "
                               "message")
    model = checked_model(raw)
    max_tokens = token_field(raw, "max_output_tokens")
    previous = raw.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise InvalidInput("'previous_response_id' must be a string")
    seen = r.view(raw)
    return ResponsesBody(raw, model, _stream(raw), seen.messages, r.side_body(raw, seen),
                         raw.get("tools"), max_tokens, seen, previous or None)


def ollama_body(raw: dict[str, Any]) -> OllamaBody:
    """An Ollama chat call, as :func:`memd.server.ollama_schema.check_chat` checks it
    (no messages: a request that only loads the model)."""
    check_chat(raw)
    model = checked_model(raw)
    seen = o.view(raw)
    return OllamaBody(raw, model, _stream(raw), seen, o.side_body(raw, seen),
                      raw.get("tools"), None, o.num_ctx(raw))
