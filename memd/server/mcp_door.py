"""The daemon's ``/mcp`` route, which loads the MCP SDK on its first request.

The SDK and what it brings (pydantic models of the whole protocol, JSON Schema, JWT)
add about 30 MB to a process and a quarter of a second to its start; a daemon whose
users never call MCP should pay neither. So the route is this small ASGI app: the app's
lifespan holds a task group open (:meth:`HttpDoor.running`), and the first request to
``/mcp`` starts the SDK's session manager in it (:func:`memd.server.mcp_server.run_http`),
which then serves every request until the daemon stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from memd.server.security import send_error

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


class HttpDoor:
    """The ASGI app of ``/mcp`` on the daemon."""

    def __init__(self) -> None:
        self._tasks: TaskGroup | None = None
        self._manager: StreamableHTTPSessionManager | None = None
        self._starting = anyio.Lock()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The app's lifespan: what serves ``/mcp`` runs inside and ends with it."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = self._manager = None
                tasks.cancel_scope.cancel()

    async def _started(self, tasks: TaskGroup) -> StreamableHTTPSessionManager:
        async with self._starting:
            if self._manager is None:
                from memd.server import mcp_server

                self._manager = await tasks.start(mcp_server.run_http,
                                                  mcp_server.daemon_tools)
            return self._manager

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._tasks is None:  # the app was not started (its lifespan did not run)
            await send_error(send, 503, "service_unavailable", "the MCP server is not running")
            return
        manager = await self._started(self._tasks)
        await manager.handle_request(scope, receive, send)
