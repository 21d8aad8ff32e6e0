"""memd as an MCP server: eight memory tools and two resources, over stdio or HTTP.

The tools' names and argument schemas are a contract with every client configured to
call them (tests/fixtures/mcp_tools.json holds them; a change fails the tests), so a
name or a schema changes only with a new name. Each tool is one method of
:class:`memd.server.mcp_tools.MemoryTools`, run in a worker thread as the request's user.

Where it runs:

- **The daemon**, at ``/mcp`` (streamable HTTP, stateless: every POST carries one
  JSON-RPC message and gets its answer as JSON, nothing to lose on a restart). The route
  sits behind the daemon's guard like every other: loopback Host names only, a request a
  browser marks as cross-site (its ``Origin``) refused with a 403 as the MCP transport
  requires, JSON-only writes, the body limit, and in team mode the memd key
  (``Authorization: Bearer memd_...``), whose user the tools act as. So the SDK's own
  Host and Origin checks are off here: the guard makes the same ones, with the daemon's
  configured allow-lists. In local mode the user is ``X-Memd-User``, else the default.
- **``memd mcp``**, over stdio, which is what MCP clients launch. When a daemon serves
  the data dir it relays every message to that daemon's ``/mcp`` (:func:`relay_stdio`):
  one writer to the store, and the daemon's caches (each chat's memory block) learn of a
  forget at once. Otherwise it serves the tools itself over the store it opens
  (:func:`serve_stdio`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio
from anyio.abc import TaskStatus
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import Field

import memd
from memd.auth import acting_as
from memd.engine.validate import ID_PATTERN
from memd.errors import MemdError
from memd.server.deps import engine_of, user_of
from memd.server.failures import public_message
from memd.server.mcp_tools import MAX_CONTEXT_TOKENS, MemoryTools

log = logging.getLogger("memd.mcp")

#: Who a request acts as: the tools for it, and the authenticated user (None in local
#: mode) under which the store's row security runs.
ToolsFor = Callable[[Any], tuple[MemoryTools, str | None]]
Tool = TypeVar("Tool", bound=Callable[..., Awaitable[dict[str, Any]]])

INSTRUCTIONS = (
    "memd remembers what the user told you in earlier sessions, in any tool that uses it. "
    "Call search_memory or context before answering a question that may depend on the "
    "user's preferences, projects or past decisions; call add_memory when the user asks "
    "you to remember something or states a lasting preference or fact about themselves; "
    "call forget_memory when they ask you to forget one.")

# An id as the engine checks it, in the regex dialect of the schema validator (Rust's,
# whose $ ends the text: it has no look-ahead to rule out a final newline).
ID = ID_PATTERN.removesuffix("(?!\\n)$") + "$"
Query = Annotated[str, Field(min_length=1, max_length=20_000,
                             description="What to look for, in the user's words.")]
Workspace = Annotated[str | None, Field(
    default=None, max_length=128, pattern=ID,
    description="A project's workspace; memories there plus the user's global ones. "
                "Leave out for all of the user's memories.")]
MemoryId = Annotated[str, Field(min_length=1, max_length=128, pattern=ID, description=(
    "The memory's id (from search_memory or list_memories)."))]
CallId = Annotated[str, Field(min_length=1, max_length=128, pattern=ID, description=(
    "The call's id (the X-Memd-Call header of a proxied chat's response)."))]
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                        open_world_hint=False)
FORGET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                         open_world_hint=False)


def build_server(tools_for: ToolsFor) -> MCPServer[Any]:
    """The MCP server whose tools act through ``tools_for(request)`` (``request``: the
    HTTP request of a call over HTTP, None over stdio)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        server: MCPServer[Any] = MCPServer("memd", version=memd.__version__,
                                           instructions=INSTRUCTIONS, log_level="WARNING")
    finally:  # the SDK sets up the root logger; the daemon's logging is its own
        root.handlers[:] = handlers
        root.setLevel(level)

    def tool(annotations: ToolAnnotations) -> Callable[[Tool], Tool]:
        """Register a tool under its function's name, its docstring on one line."""
        def register(fn: Tool) -> Tool:
            server.add_tool(fn, description=" ".join((fn.__doc__ or "").split()),
                            annotations=annotations)
            return fn

        return register

    async def run(ctx: Context, name: str, **arguments: Any) -> dict[str, Any]:
        try:
            return await _act(tools_for, ctx, name, **arguments)
        except MemdError as exc:  # bad input, an unknown id: the model reads why
            raise ToolError(public_message(exc)) from exc

    @tool(READ)
    async def search_memory(
        query: Query, ctx: Context,
        k: Annotated[int, Field(ge=1, le=100, description="How many hits.")] = 10,
        workspace: Workspace = None,
    ) -> dict[str, Any]:
        """Search the user's memories and facts: hybrid (meaning and keywords), best
        first, each hit with its id, text, score and score breakdown."""
        return await run(ctx, "search_memory", query=query, k=k, workspace=workspace)

    @tool(WRITE)
    async def add_memory(
        text: Annotated[str, Field(min_length=1, max_length=20_000, description=(
            "The memory, one self-contained statement about the user in their words."))],
        ctx: Context, workspace: Workspace = None,
    ) -> dict[str, Any]:
        """Remember something for the user (written by you on their behalf, and marked so).
        Secrets are replaced by placeholders; a duplicate is not stored twice (action:
        duplicate or merged); a statement that contradicts an older one replaces it."""
        return await run(ctx, "add_memory", text=text, workspace=workspace)

    @tool(READ)
    async def list_memories(
        ctx: Context, workspace: Workspace = None,
        cursor: Annotated[str | None, Field(max_length=64, description=(
            "next_cursor of the previous page; leave out for the first."))] = None,
    ) -> dict[str, Any]:
        """The user's memories, newest first, a page at a time (next_cursor: the next
        page's cursor, null on the last)."""
        return await run(ctx, "list_memories", workspace=workspace, cursor=cursor)

    @tool(FORGET)
    async def forget_memory(
        id: MemoryId, ctx: Context,
    ) -> dict[str, Any]:
        """Forget a memory, as `memd forget`: it and every derived copy go, the facts it
        stated too, and the messages it came from are never recalled again."""
        return await run(ctx, "forget_memory", id=id)

    @tool(READ)
    async def list_facts(ctx: Context, workspace: Workspace = None) -> dict[str, Any]:
        """The user's structured facts (category, key, value: one value per key)."""
        return await run(ctx, "list_facts", workspace=workspace)

    @tool(READ)
    async def recall_conversation(
        ctx: Context,
        query: Annotated[str | None, Field(min_length=1, max_length=20_000,
                                           description="Search past messages of every "
                                                       "session for this.")] = None,
        session_id: Annotated[str | None, Field(max_length=128, pattern=ID,
                                                description="Or: one session's messages, "
                                                            "in order.")] = None,
    ) -> dict[str, Any]:
        """Past messages of the user's conversations: give query or session_id."""
        return await run(ctx, "recall_conversation", query=query, session_id=session_id)

    @tool(READ)
    async def context(
        query: Query, ctx: Context,
        max_tokens: Annotated[int, Field(ge=1, le=MAX_CONTEXT_TOKENS, description=(
            "The block's budget in tokens."))] = 1000,
        workspace: Workspace = None,
    ) -> dict[str, Any]:
        """The memory block memd would add to a user message saying query (block: its
        text, empty when nothing relevant is known; items: what it holds)."""
        return await run(ctx, "context", query=query, max_tokens=max_tokens,
                         workspace=workspace)

    @tool(READ)
    async def get_call(
        id: CallId, ctx: Context,
    ) -> dict[str, Any]:
        """What memd injected into one proxied chat call, and why (its report)."""
        return await run(ctx, "get_call", id=id)

    async def read(ctx: Context, name: str, argument: str) -> str:
        try:
            return json.dumps(await _act(tools_for, ctx, name, argument))
        except MemdError as exc:
            raise ResourceError(public_message(exc)) from exc

    @server.resource("memory://facts/{workspace}", mime_type="application/json",
                     description="A workspace's facts with the user's global ones; "
                                 "'_' for all of the user's facts.")
    async def facts(workspace: str, ctx: Context) -> str:
        return await read(ctx, "facts_resource", workspace)

    @server.resource("memory://sessions/{session_id}", mime_type="application/json",
                     description="A past session of the user, with its messages.")
    async def session(session_id: str, ctx: Context) -> str:
        return await read(ctx, "session", session_id)

    return server


async def _act(tools_for: ToolsFor, ctx: Context, name: str, *args: Any,
               **kwargs: Any) -> dict[str, Any]:
    """Run tool method ``name`` in a worker thread (the engine blocks) as the user the
    request acts as."""
    tools, actor = tools_for(ctx.request_context.request)

    def call() -> dict[str, Any]:
        with acting_as(actor):
            result: dict[str, Any] = getattr(tools, name)(*args, **kwargs)
            return result

    return await anyio.to_thread.run_sync(call)


def daemon_tools(request: Any) -> tuple[MemoryTools, str | None]:
    """Who a call to the daemon's ``/mcp`` acts as, as on every other route
    (:func:`memd.server.deps.user_of`): the memd key's user in team mode (naming another
    is refused), else ``X-Memd-User``, else the default user."""
    authed: str | None = getattr(request.state, "memd_user", None)
    return MemoryTools(engine_of(request), user_of(request)), authed


async def run_http(tools_for: ToolsFor, *,
                   task_status: TaskStatus[StreamableHTTPSessionManager]) -> None:
    """Run the session manager of a new MCP server for the daemon's ``/mcp`` until
    cancelled, handing it over once it runs (:class:`memd.server.mcp_door.HttpDoor`).
    Host and Origin are the daemon guard's to check, with the daemon's allow-lists, so
    the SDK's own checks are off."""
    server = build_server(tools_for)
    server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    # the SDK logs every stateless request's end at INFO: noise in the daemon's log
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
    manager = server.session_manager
    async with manager.run():
        task_status.started(manager)
        await anyio.sleep_forever()


async def serve_stdio(tools: MemoryTools) -> None:
    """Serve the tools over stdin and stdout, acting as ``tools.user_id``."""
    server = build_server(lambda _request: (tools, None))
    await server.run_stdio_async()


async def relay_stdio(url: str, headers: dict[str, str]) -> None:
    """Relay MCP messages between stdin/stdout and the daemon's ``/mcp`` at ``url``,
    until stdin closes."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server

    async with (
        stdio_server() as (local_in, local_out),
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
        streamable_http_client(url, http_client=http) as (remote_in, remote_out),
        anyio.create_task_group() as tasks,
    ):
        async def upstream() -> None:
            async for message in local_in:
                if isinstance(message, Exception):
                    log.warning("memd mcp: an unreadable message from the client: %s",
                                message)
                else:
                    await remote_out.send(message)
            tasks.cancel_scope.cancel()  # stdin closed: the client is gone

        async def downstream() -> None:
            async for message in remote_in:
                if isinstance(message, Exception):  # stdout is the client's: log it
                    log.warning("memd mcp: the daemon's /mcp failed: %s", message)
                else:
                    await local_out.send(message)

        tasks.start_soon(upstream)
        tasks.start_soon(downstream)
