"""Request bodies of the native API, as pydantic models (they make the OpenAPI schema).

The models check shapes and types (a wrong type is a 422); the engine checks meaning
(an empty text, a bad id, an unknown role is its ``InvalidInput``, a 400), so one rule
lives in one place. ``extra="forbid"`` turns a misspelt field into a 422 instead of a
silently ignored option; message items allow extra fields (OpenAI adds new ones).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    WithJsonSchema,
)

from memd.config import Settings
from memd.engine import validate as v
from memd.types import ROLES

_TEXT_CHARS = Settings.max_text_chars


def _schema(**schema: Any) -> Any:
    """Rules the engine checks (and answers with a 400), declared in the OpenAPI schema
    only: pydantic's regex engine has no lookahead, and the engine's message is clearer."""
    return Field(json_schema_extra=schema)


def _integral(value: Any) -> Any:
    """JSON does not tell 3.0 from 3: a whole float is the integer (strict mode would
    refuse it, and refuses a string)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Constraints go before the validator, so that the JSON schema shows them.
_WHOLE = BeforeValidator(_integral)
MAX_TOKENS = 100_000_000  # far above any model's window
K = Annotated[StrictInt, Field(ge=1, le=1000), _WHOLE]
Window = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS), _WHOLE]
Tokens = Annotated[StrictInt, Field(ge=0, le=MAX_TOKENS), _WHOLE]
Count = Annotated[StrictInt, Field(ge=0, lt=2**31), _WHOLE]  # PostgreSQL's integer
Dimensions = Annotated[StrictInt, _WHOLE]
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
TierName = Literal["L0", "L1", "L2", "L3", "L4", "l0", "l1", "l2", "l3", "l4",
                   "0", "1", "2", "3", "4",
                   "working", "session", "episodic", "semantic", "procedural"]
TierIn = Annotated[
    Annotated[StrictInt, Field(ge=0, le=4), _WHOLE] | TierName,
    Field(description="0-4, L0-L4 or a name: working, session, episodic, semantic, "
                      "procedural"),
]
Id = Annotated[str, _schema(pattern=v.ID_PATTERN, maxLength=128)]
OptionalId = Annotated[str | None, WithJsonSchema(
    {"anyOf": [{"type": "string", "pattern": v.OPTIONAL_ID_PATTERN, "maxLength": 128},
               {"type": "null"}]})]
UserId = Annotated[OptionalId, Field(
    description="The acting user (default: the X-Memd-User header, else the configured "
                "default user); must agree with the header when both are given.")]
Workspace = Annotated[OptionalId, Field(
    description="Scope to this workspace (plus the user's global memories); under "
                "/w/{workspace} the path decides and a different value here is a 400.")]
# Text the engine stores: some non-space character, no NUL, within the size limit.
Text = Annotated[str, _schema(pattern=v.TEXT_PATTERN, maxLength=_TEXT_CHARS)]
Label = Annotated[str, _schema(pattern=v.TEXT_PATTERN, maxLength=64)]
Name = Annotated[str, _schema(pattern=v.NO_NUL_PATTERN)]
Tags = Annotated[list[Annotated[str, _schema(pattern=v.NO_NUL_PATTERN, maxLength=64)]],
                 Field(max_length=32)]
# Any JSON the engine stores on every backend (see memd.engine.validate.check_json).
JSON_VALUE_REF = {"$ref": "#/components/schemas/JsonValue"}
JSON_VALUE = {"anyOf": [
    {"type": "string", "pattern": v.NO_NUL_PATTERN}, {"type": "number"},
    {"type": "boolean"}, {"type": "null"},
    {"type": "array", "items": JSON_VALUE_REF},
    {"type": "object", "additionalProperties": JSON_VALUE_REF,
     "propertyNames": {"pattern": v.NO_NUL_PATTERN}},
]}
JSON_OBJECT = {"type": "object", "additionalProperties": JSON_VALUE_REF,
               "propertyNames": {"pattern": v.NO_NUL_PATTERN}}
Metadata = Annotated[dict[str, Any], WithJsonSchema(JSON_OBJECT)]
Kind = Literal["memory", "summary", "message", "fact"]


class Strict(BaseModel):
    """Unknown fields and wrongly typed values are a 422: a string where a number is
    declared is refused, not converted."""

    model_config = ConfigDict(extra="forbid", strict=True)


class MemoryCreate(Strict):
    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"not": {"required": ["scope"]}}, {"properties": {"scope": {"const": "global"}}},
        {"required": ["session_id"],
         "properties": {"session_id": {"type": "string", "minLength": 1}}},
    ]})

    user_id: UserId = None
    text: Text = Field(description="The memory; whitespace is collapsed, empty is a 400.")
    workspace: Workspace = None
    tier: TierIn = 3
    scope: Literal["local", "global"] = Field(
        default="global", description="'local' binds the memory to session_id.")
    tags: Tags | None = None
    importance: Unit = 0.5
    confidence: Unit = 1.0
    session_id: OptionalId = None
    metadata: Metadata | None = None


class MemoryPatch(Strict):
    """Only the fields present change; ``null`` clears tags and metadata."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": [name]} for name in
        ("text", "tier", "scope", "tags", "importance", "confidence", "metadata")]})

    user_id: UserId = None
    # absent is not null: a field given as null is a 422
    text: Text = None  # type: ignore[assignment]
    tier: TierIn = None  # type: ignore[assignment]
    scope: Literal["local", "global"] = None  # type: ignore[assignment]
    tags: Tags | None = None
    importance: Unit = None  # type: ignore[assignment]
    confidence: Unit = None  # type: ignore[assignment]
    metadata: Metadata | None = None


class SearchFilters(Strict):
    tiers: list[TierIn] | None = None
    tags: Tags | None = Field(default=None, description="Only memories with all these tags.")
    session_id: OptionalId = None
    include_inactive: bool = False


class SearchRequest(Strict):
    user_id: UserId = None
    query: Text
    k: K = 10
    kinds: list[Kind] | None = Field(
        default=None, description="What to search; default memory, summary and fact.")
    workspace: Workspace = None
    filters: SearchFilters | None = None


def _message_rules(schema: dict[str, Any]) -> None:
    """What the engine requires of a message beyond its fields' types: a tool message
    answers a tool call, and a message other than the assistant's has content or
    tool calls."""
    said = {"anyOf": [
        {"required": ["content"], "properties": {"content": {"type": ["string", "array"]}}},
        {"required": ["tool_calls"],
         "properties": {"tool_calls": {"type": "array", "minItems": 1}}},
    ]}
    schema["anyOf"] = [
        {"properties": {"role": {"const": "assistant"}}},
        {"properties": {"role": {"enum": [r for r in ROLES if r not in ("assistant", "tool")]}},
         **said},
        {"properties": {"role": {"const": "tool"}, "tool_call_id": {"type": "string"}},
         "required": ["tool_call_id"], **said},
    ]




class MessageIn(BaseModel):
    """An OpenAI chat message; extra fields are kept (OpenAI adds new ones)."""

    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra=_message_rules)

    role: Literal[ROLES] = Field(  # type: ignore[valid-type]
        description="One of " + ", ".join(ROLES) + ".")
    content: Name | list[Metadata] | None = None
    name: Name | None = None
    tool_calls: list[Metadata] | None = None
    tool_call_id: Name | None = None
    metadata: Metadata | None = None
    model: Name | None = None
    finish_reason: Name | None = None
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    latency_ms: Count | None = None


class ContextRequest(Strict):
    user_id: UserId = None
    session_id: OptionalId = Field(
        default=None, description="Compile from this session's stored history.")
    messages: list[MessageIn] | None = Field(
        default=None, description="Not-yet-stored turns, appended after the session's history.")
    workspace: Workspace = None
    query: Name | None = Field(
        default=None, description="What to retrieve memory for (default: the last user message).")
    context_window: Window | None = None
    max_response_tokens: Tokens | None = None
    tool_tokens: Tokens = 0
    model: Name | None = None


class SessionCreate(Strict):
    user_id: UserId = None
    workspace: Workspace = None
    model: Name | None = None
    context_window: Window | None = None
    max_response_tokens: Tokens | None = None
    system_prompt: Annotated[str, _schema(pattern=v.TEXT_PATTERN,
                                          maxLength=10 * _TEXT_CHARS)] | None = None
    metadata: Metadata | None = None


class PauseRequest(Strict):
    """Whose learning to pause or resume: the acting user's, everywhere or (with a
    workspace, or under /w/{workspace}) in that workspace only."""

    user_id: UserId = None
    workspace: Workspace = None


class MessagesAppend(Strict):
    user_id: UserId = None
    messages: list[MessageIn] = Field(min_length=1, max_length=1000,
                                      description="1-1000 messages, stored in order.")


class FactPut(Strict):
    user_id: UserId = None
    category: Label
    key: Label
    value: Text
    confidence: Unit = 1.0
    importance: Unit = 0.8
    workspace: Workspace = None
    is_correction: bool = Field(
        default=False, description="Replace the value even when the stored one is more confident.")


_EMBEDDING_TEXT = {"type": "string", "pattern": f"[^{v.SPACE_CLASS}]", "maxLength": _TEXT_CHARS}
EmbeddingInput = Annotated[
    str | list[Any],
    WithJsonSchema({"anyOf": [
        _EMBEDDING_TEXT,
        {"type": "array", "items": _EMBEDDING_TEXT, "minItems": 1, "maxItems": 2048},
    ]}),
]


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request. Unknown fields are ignored, as OpenAI clients may
    send ones memd has no use for."""

    model_config = ConfigDict(extra="ignore", strict=True)

    input: EmbeddingInput = Field(description="A string or 1-2048 non-empty strings.")
    model: str | None = Field(
        default=None, description="Accepted for compatibility; the daemon's embedder answers.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Dimensions | None = Field(
        default=None, description="Must equal the embedder's dimension when given.")
    user: str | None = Field(default=None, description="OpenAI's end-user tag; ignored.")


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Invalid input"},
    404: {"model": ErrorResponse, "description": "Not found (or another user's)"},
    409: {"model": ErrorResponse, "description": "Conflicts with stored data"},
    413: {"model": ErrorResponse, "description": "Body or message over its size limit"},
    422: {"model": ErrorResponse, "description": "Body or parameters of the wrong shape"},
}


# The proxied chat request, as memd reads it (every other field goes upstream as sent).
# Message text may hold anything a client sends: memd stores a cleaned copy.
_NULLABLE_TEXT = {"type": ["string", "null"]}
_COUNT = {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**31 - 1},
                    {"type": "null"}]}
CHAT_MESSAGE: dict[str, Any] = {
    "type": "object", "required": ["role"], "additionalProperties": True,
    "properties": {
        "role": {"enum": list(ROLES)},
        "content": {"anyOf": [{"type": "string"},
                              {"type": "array", "items": {"type": "object"}},
                              {"type": "null"}]},
        "name": _NULLABLE_TEXT, "tool_call_id": _NULLABLE_TEXT, "model": _NULLABLE_TEXT,
        "finish_reason": _NULLABLE_TEXT,
        "tool_calls": {"anyOf": [{"type": "array", "items": {"type": "object"}},
                                 {"type": "null"}]},
        "metadata": {"type": ["object", "null"]},
        "prompt_tokens": _COUNT, "completion_tokens": _COUNT, "latency_ms": _COUNT,
    },
}
_message_rules(CHAT_MESSAGE)
_TOKENS = {"type": ["integer", "null"], "minimum": 0}
CHAT_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["messages"], "additionalProperties": True,
    "properties": {
        "messages": {
            "type": "array", "minItems": 1, "items": CHAT_MESSAGE,
            "contains": {"required": ["role"], "properties": {"role": {"enum": [
                r for r in ROLES if r not in ("system", "developer")]}}},
            "description": "OpenAI chat messages, at least one of them not a system "
                           "message; forwarded as sent."},
        "model": {"type": "string"},
        "stream": {"type": "boolean"},
        "max_tokens": _TOKENS,
        "max_completion_tokens": _TOKENS,
    },
}

# The Anthropic Messages request, as memd reads it (every other field, ``system`` and
# ``tools`` included, goes upstream as sent).
_BLOCKS = {"type": "array", "items": {"type": "object", "required": ["type"],
                                      "properties": {"type": {"type": "string"}}}}
MESSAGES_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["messages"], "additionalProperties": True,
    "properties": {
        "messages": {
            "type": "array", "minItems": 1,
            "items": {"type": "object", "required": ["role", "content"],
                      "additionalProperties": True,
                      "properties": {"role": {"enum": ["user", "assistant", "system"]},
                                     "content": {"anyOf": [{"type": "string"}, _BLOCKS]}}},
            "contains": {"properties": {"role": {"enum": ["user", "assistant"]}}},
            "description": "Anthropic messages, at least one of them not a system "
                           "message; forwarded as sent."},
        "system": {"anyOf": [{"type": "string"}, _BLOCKS]},
        "model": {"type": "string"},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": ["integer", "null"], "minimum": 0},
    },
}

#: The roles of an input item that instruct the model rather than speak in the
#: conversation: a request needs an item of another kind.
INSTRUCTION_ROLES = ("system", "developer")
#: The roles of an input item that must say something (its ``content``).
SAYING_ROLES = ("user", *INSTRUCTION_ROLES)

# An input item as memd reads it: a message item says something, its parts objects; an
# item that answers a tool call names it.
_RESPONSES_ITEM: dict[str, Any] = {"type": "object", "allOf": [
    {"anyOf": [{"not": {"required": ["role"], "properties": {
                   "role": {"enum": list(SAYING_ROLES)}}}},
               {"required": ["content"],
                "properties": {"content": {"type": ["string", "array"]}}}]},
    {"properties": {"content": {"anyOf": [{"not": {"type": "array"}},
                                          {"type": "array", "items": {"type": "object"}}]}}},
    {"anyOf": [{"not": {"required": ["type"], "properties": {
                   "type": {"type": "string", "pattern": "_output$"}}}},
               {"required": ["call_id"], "properties": {"call_id": {"type": "string"}}}]},
]}

# The OpenAI Responses request, as memd reads it (every other field goes upstream as
# sent).
RESPONSES_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["input"], "additionalProperties": True,
    "properties": {
        "input": {"anyOf": [{"type": "string", "minLength": 1},
                            {"type": "array", "minItems": 1, "items": _RESPONSES_ITEM,
                             "contains": {"not": {"required": ["role"], "properties": {
                                 "role": {"enum": list(INSTRUCTION_ROLES)}}}}}],
                  "description": "A string, or input items of which at least one is not a "
                                 "system or developer message; forwarded as sent."},
        "instructions": {"type": ["string", "null"]},
        "model": {"type": "string"},
        "stream": {"type": "boolean"},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 0},
        "previous_response_id": {
            "type": ["string", "null"],
            "description": "The answer this request continues: a turn of the session "
                           "memd stored it in, or, if memd never saw it, a side request."},
    },
}
