"""What the Ollama door reads of an ``/api/chat`` request, as a JSON schema for the
OpenAPI document and as the check that refuses anything else with a clear 400 (the two
say the same; every other field goes upstream unread)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.errors import InvalidInput

ROLES = ("system", "user", "assistant", "tool")

_TOOL_CALL = {"type": "object", "required": ["function"], "properties": {
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "arguments": {"type": "object"}}}}}

MESSAGE = {"type": "object", "required": ["role"], "properties": {
    "role": {"type": "string", "enum": list(ROLES)},
    "content": {"type": "string"},
    "images": {"type": "array", "items": {"type": "string"}},
    "thinking": {"type": "string"},
    "tool_name": {"type": "string"},
    "tool_calls": {"type": "array", "items": _TOOL_CALL},
}}

CHAT_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["model"], "additionalProperties": True, "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array", "items": MESSAGE,
            "anyOf": [{"maxItems": 0}, {"contains": {"properties": {"role": {
                "enum": [r for r in ROLES if r != "system"]}}}}],
            "description": "Ollama chat messages: none (a request that loads the model), "
                           "or at least one that is not a system message."},
        "stream": {"type": "boolean"},
        "tools": {"type": "array", "items": {"type": "object"}},
        "options": {"type": "object", "properties": {
            "num_ctx": {"type": "integer", "minimum": 1},
            "num_predict": {"type": "integer"}}},
    }}

#: A request the door relays unread: any JSON object.
OBJECT_REQUEST: dict[str, Any] = {"type": "object", "additionalProperties": True}


def _is_int(value: Any) -> bool:
    """An integer, as JSON Schema counts one: 3.0 is (JSON does not tell it from 3)."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_message(m: Any, i: int) -> None:
    where = f"messages[{i}]"
    if not isinstance(m, Mapping) or m.get("role") not in ROLES:
        raise InvalidInput(f"{where} must be an object with a role of {', '.join(ROLES)}")
    for name in ("content", "thinking", "tool_name"):
        if name in m and not isinstance(m[name], str):
            raise InvalidInput(f"{where}.{name} must be a string")
    if "images" in m and not _strings(m["images"]):
        raise InvalidInput(f"{where}.images must be a list of base64 strings")
    calls = m.get("tool_calls", [])
    if not isinstance(calls, list):
        raise InvalidInput(f"{where}.tool_calls must be a list")
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments", {}), Mapping):
            raise InvalidInput(f"{where}.tool_calls[{k}] must be an object with a function "
                               "of a name and arguments as a JSON object")


def check_chat(body: Mapping[str, Any]) -> None:
    """Refuse a chat request whose fields the door reads are not as the schema says."""
    if not isinstance(body.get("model"), str):
        raise InvalidInput("'model' is required and must be a string")
    messages = body.get("messages", [])
    if not isinstance(messages, list):
        raise InvalidInput("'messages' must be a list of messages")
    for i, m in enumerate(messages):
        _check_message(m, i)
    if messages and all(m["role"] == "system" for m in messages):
        raise InvalidInput("'messages' must hold a message that is not a system message "
                           "(or none, to load the model)")
    if "tools" in body and not (isinstance(body["tools"], list)
                                and all(isinstance(t, Mapping) for t in body["tools"])):
        raise InvalidInput("'tools' must be a list of objects")
    options = body.get("options", {})
    if not isinstance(options, Mapping):
        raise InvalidInput("'options' must be an object")
    if "num_ctx" in options and not (_is_int(options["num_ctx"]) and options["num_ctx"] >= 1):
        raise InvalidInput("options.num_ctx must be a positive integer")
    if "num_predict" in options and not _is_int(options["num_predict"]):
        raise InvalidInput("options.num_predict must be an integer")
