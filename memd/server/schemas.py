"""Request bodies of the native API, as pydantic models (they make the OpenAPI schema).

The models check shapes and types (a wrong type is a 422); the engine checks meaning
(an empty text, a bad id, an unknown role is its ``InvalidInput``, a 400), so one rule
lives in one place. ``extra="forbid"`` turns a misspelt field into a 422 instead of a
silently ignored option; message items allow extra fields (OpenAI adds new ones).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, WithJsonSchema

from memd.types import ROLES

Unit = Annotated[float, Field(ge=0.0, le=1.0)]
TierIn = Annotated[
    Annotated[StrictInt, Field(ge=0, le=4)] | StrictStr,
    Field(description="0-4, L0-L4 or a name: working, session, episodic, semantic, "
                      "procedural"),
]
UserId = Annotated[str | None, Field(
    description="The acting user (default: the X-Memd-User header, else the configured "
                "default user); must agree with the header when both are given.")]
Workspace = Annotated[str | None, Field(
    description="Scope to this workspace (plus the user's global memories); under "
                "/w/{workspace} the path decides and a different value here is a 400.")]
Metadata = dict[str, Any]
Kind = Literal["memory", "summary", "message", "fact"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryCreate(Strict):
    user_id: UserId = None
    text: str = Field(description="The memory; whitespace is collapsed, empty is a 400.")
    workspace: Workspace = None
    tier: TierIn = 3
    scope: Literal["local", "global"] = Field(
        default="global", description="'local' binds the memory to session_id.")
    tags: list[str] | None = None
    importance: Unit = 0.5
    confidence: Unit = 1.0
    session_id: str | None = None
    metadata: Metadata | None = None


class MemoryPatch(Strict):
    """Only the fields present change; ``null`` clears tags and metadata."""

    user_id: UserId = None
    text: str | None = None
    tier: TierIn | None = None
    scope: Literal["local", "global"] | None = None
    tags: list[str] | None = None
    importance: Unit | None = None
    confidence: Unit | None = None
    metadata: Metadata | None = None


class SearchFilters(Strict):
    tiers: list[TierIn] | None = None
    tags: list[str] | None = Field(default=None, description="Only memories with all these tags.")
    session_id: str | None = None
    include_inactive: bool = False


class SearchRequest(Strict):
    user_id: UserId = None
    query: str
    k: int = Field(default=10, ge=1, le=1000)
    kinds: list[Kind] | None = Field(
        default=None, description="What to search; default memory, summary and fact.")
    workspace: Workspace = None
    filters: SearchFilters | None = None


class MessageIn(BaseModel):
    """An OpenAI chat message; extra fields are kept (model, finish_reason, ...)."""

    model_config = ConfigDict(extra="allow")

    role: str = Field(description="One of " + ", ".join(ROLES) + "; anything else is a 400.")
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    metadata: Metadata | None = None


class ContextRequest(Strict):
    user_id: UserId = None
    session_id: str | None = Field(
        default=None, description="Compile from this session's stored history.")
    messages: list[MessageIn] | None = Field(
        default=None, description="Not-yet-stored turns, appended after the session's history.")
    workspace: Workspace = None
    query: str | None = Field(
        default=None, description="What to retrieve memory for (default: the last user message).")
    context_window: int | None = Field(default=None, ge=1)
    max_response_tokens: int | None = Field(default=None, ge=0)
    tool_tokens: int = Field(default=0, ge=0)
    model: str | None = None


class SessionCreate(Strict):
    user_id: UserId = None
    workspace: Workspace = None
    model: str | None = None
    context_window: int | None = Field(default=None, ge=1)
    max_response_tokens: int | None = Field(default=None, ge=0)
    system_prompt: str | None = None
    metadata: Metadata | None = None


class MessagesAppend(Strict):
    user_id: UserId = None
    messages: list[MessageIn] = Field(description="1-1000 messages, stored in order.")


class FactPut(Strict):
    user_id: UserId = None
    category: str
    key: str
    value: str
    confidence: Unit = 1.0
    importance: Unit = 0.8
    workspace: Workspace = None
    is_correction: bool = Field(
        default=False, description="Replace the value even when the stored one is more confident.")


EmbeddingInput = Annotated[
    str | list[Any],
    WithJsonSchema({"anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2048},
    ]}),
]


class EmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request. Unknown fields are ignored, as OpenAI clients may
    send ones memd has no use for."""

    model_config = ConfigDict(extra="ignore")

    input: EmbeddingInput = Field(description="A string or 1-2048 non-empty strings.")
    model: str | None = Field(
        default=None, description="Accepted for compatibility; the daemon's embedder answers.")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(
        default=None, description="Must equal the embedder's dimension when given.")
    user: str | None = Field(default=None, description="OpenAI's end-user tag; ignored.")


class ErrorDetail(BaseModel):
    type: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
