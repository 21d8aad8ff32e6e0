"""``memd mcp``: memd's memory tools for an MCP client, over stdin and stdout.

MCP clients (Claude Code, Claude Desktop, Cursor, Cline, opencode) launch this command
and talk MCP on its stdin and stdout, so nothing else may be written to stdout. When a
daemon serves the data dir (and the store the command names), every message is relayed
to the daemon's ``/mcp``: one process writes the store, and the daemon's chats see a
memory the moment a tool adds or forgets it. Otherwise the command opens the store
itself and serves the same tools (:mod:`memd.server.mcp_server`).
"""

from __future__ import annotations

import os

import click

from memd.cli.common import (
    KEY_ENV,
    daemon_call,
    daemon_for,
    handles_errors,
    main,
    open_engine,
    store_user,
)


@main.command("mcp")
@click.option("--user", "user_id", help="Act as this user (default: the user of the key "
                                        "in MEMD_API_KEY, else the configured default "
                                        "user).")
@click.pass_context
@handles_errors
def mcp_command(ctx: click.Context, user_id: str | None) -> None:
    """Serve memd's memory tools to an MCP client over stdio (what an editor's MCP
    config launches): search_memory, add_memory, list_memories, forget_memory,
    list_facts, recall_conversation, context and get_call. Relays to the running
    daemon when there is one, else opens the store itself."""
    import anyio

    from memd.server.mcp_server import relay_stdio, serve_stdio
    from memd.server.mcp_tools import MemoryTools

    daemon = daemon_for(ctx)
    if daemon is not None:
        with daemon:
            # a refused key ends the command here, saying why, not in the client's session
            daemon_call(daemon, "GET", "/v1/status")
            url = f"{daemon.base_url}".rstrip("/") + "/mcp"
        headers = {}
        key = os.environ.get(KEY_ENV)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if user_id:
            headers["X-Memd-User"] = user_id
        anyio.run(relay_stdio, url, headers)
        return
    with open_engine(ctx) as engine:
        anyio.run(serve_stdio, MemoryTools(engine, store_user(engine, user_id)))
