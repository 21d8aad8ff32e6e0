"""The official MCP SDK's client, for the tests of memd's MCP server: over streamable
HTTP (the daemon's ``/mcp``) or over stdio (``memd mcp`` as a subprocess)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

MEMD_MCP = [sys.executable, "-m", "memd.cli", "mcp"]


@asynccontextmanager
async def over_http(base: str, **headers: str) -> AsyncIterator[Client]:
    """An MCP client of the daemon at ``base``, sending ``headers`` on every request."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


@asynccontextmanager
async def over_stdio(data_dir: Path, *args: str) -> AsyncIterator[Client]:
    """An MCP client of ``memd mcp`` launched on ``data_dir`` (as a client's config
    launches it), this worktree's memd first on the path."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "MEMD_DATA_DIR": str(data_dir),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    params = StdioServerParameters(command=MEMD_MCP[0], args=[*MEMD_MCP[1:], *args], env=env)
    async with Client(params) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool's structured result; a tool error fails the test with its message."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)
