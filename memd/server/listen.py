"""Running the daemon's app on uvicorn, saying where it listens only once it does.

A line "listening on ..." printed before the socket is bound is a promise that a port
already in use breaks a moment later; a script that waits for the line, or a user who
reads it, would then talk to nothing (or to whatever holds the port).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn


class Listener(uvicorn.Server):
    """uvicorn's server calling ``on_bound(port)`` once its socket is bound (the port
    it got, which ``--port 0`` leaves to the system)."""

    def __init__(self, config: uvicorn.Config, on_bound: Callable[[int], None]) -> None:
        super().__init__(config)
        self.on_bound = on_bound

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # a failed bind exits the process from here
        if self.started:
            bound = [s.getsockname()[1] for server in self.servers
                     for s in server.sockets or ()]
            self.on_bound(bound[0] if bound else self.config.port)


def run(app: Any, *, host: str, port: int, log_level: str,
        on_bound: Callable[[int], None]) -> None:
    """Serve ``app`` until a signal stops it (uvicorn drains first). Its own lines
    (errors in requests among them) go to the handlers the daemon set up
    (``log_config=None``), not to a handler of uvicorn's; the access log only at
    debug level."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            access_log=log_level == "debug", log_config=None)
    server = Listener(config, on_bound)
    server.run()
    if not server.started:
        raise SystemExit(3)  # what uvicorn.run exits with when it could not start
