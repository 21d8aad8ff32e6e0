"""The HTTP daemon: the app factory, its safety guard, the error shape, the job worker.

Safety by default: the daemon listens on 127.0.0.1; a request whose Host header is not a
loopback name (or one allowed in config) is refused, which defeats DNS rebinding; a
request a browser marks as coming from another site (``Origin``, ``Sec-Fetch-Site``) is
refused unless its origin is in ``allowed_origins``, on every route but ``GET /health``;
a write (any method but GET, HEAD, OPTIONS) that has a body must declare it JSON, which a
web page cannot send to another site without a CORS preflight; no CORS headers are sent;
bodies over ``max_body_bytes`` are refused before any parsing. Every error is
``{"error": {"type": ..., "message": ...}}`` with a 4xx for bad input.

Routes are mounted twice: at the root and under ``/w/{workspace}``, which scopes memory
to a workspace for plugins that can set a base URL but not headers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import memd
from memd.config import Settings
from memd.engine.memory import Memd
from memd.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    MemdError,
    NotFound,
    TooLarge,
    Unauthorized,
)
from memd.server.security import (
    OPEN_PATHS,
    SAFE_METHODS,
    ASGIApp,
    Authenticate,
    Receive,
    Scope,
    Send,
    cross_site_refusal,
    error_body,
    is_json,
    scope_headers,
    send_error,
)

log = logging.getLogger("memd.server")

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def status_for(exc: MemdError) -> int:
    if isinstance(exc, TooLarge):
        return 413
    if isinstance(exc, InvalidInput):
        return 400
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, Unauthorized):
        return 401
    if isinstance(exc, Forbidden):
        return 403
    return 500


class Guard:
    """Pure ASGI middleware, in this order: the Host allow-list, the cross-site check
    (:func:`memd.server.security.cross_site_refusal`), JSON-only writes (a write's body
    must come with a JSON Content-Type; one without any is known only once read), and a
    body size limit (the body is read once, up to the limit, and replayed to the app)."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str], max_body: int,
                 allowed_origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.allowed = allowed_hosts
        self.max_body = max_body
        self.allowed_origins = allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope_headers(scope)
        host = headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if name.lower() not in self.allowed:
            await send_error(send, 421, "host_not_allowed",
                             f"Host {host!r} is not allowed (DNS-rebinding guard); add it "
                             "to allowed_hosts in the config to serve it")
            return
        method = scope.get("method", "GET")
        if not (method in SAFE_METHODS and scope.get("path") in OPEN_PATHS):
            refusal = cross_site_refusal(scope, headers, self.allowed_origins)
            if refusal is not None:
                await send_error(send, 403, "cross_site_request", refusal)
                return
        content_type = headers.get("content-type")
        writes = method not in SAFE_METHODS
        if writes and content_type is not None and not is_json(content_type):
            await self._not_json(send, content_type)
            return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await send_error(send, 413, "request_too_large",
                             f"body of {declared} bytes exceeds the {self.max_body}-byte limit")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await send_error(send, 413, "request_too_large",
                                 f"body exceeds the {self.max_body}-byte limit")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if writes and content_type is None and body:
            await self._not_json(send, None)
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _not_json(send: Send, content_type: str | None) -> None:
        got = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        await send_error(send, 415, "unsupported_media_type",
                         f"memd accepts only JSON request bodies: send Content-Type: "
                         f"application/json (got {got})")


class JobWorker:
    """Runs the engine's durable jobs in a background thread while the daemon is up."""

    def __init__(self, engine: Memd, interval: float) -> None:
        self.engine = engine
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memd-jobs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ran = self.engine.run_jobs(limit=256)
            except MemdError as exc:  # the store is unavailable: log, back off, retry
                log.warning("job worker: %s", exc)
                ran = 0
            if not ran:
                self._stop.wait(self.interval)


def _workspace_param(
    workspace: str = Path(description="Scope memory to this workspace (a project)."),
) -> None:
    """Declares the ``/w/{workspace}`` path parameter for the OpenAPI schema; routes read
    it through :func:`memd.server.deps.workspace_of`."""


def create_app(engine: Memd, settings: Settings | None = None, run_jobs: bool = True,
               upstream_transport: Any = None) -> FastAPI:
    """The daemon's ASGI app over ``engine``. ``upstream_transport`` (an httpx transport)
    replaces the network for the upstream model server, for in-process tests."""
    from memd.server import api, proxy

    settings = settings or engine.settings
    worker = JobWorker(engine, settings.job_interval) if run_jobs else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if worker is not None:
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()
            await proxy.close_upstream(app)

    app = FastAPI(title="memd", version=memd.__version__, lifespan=lifespan,
                  description="Local-first memory daemon: OpenAI-compatible proxy and "
                              "native memory API.")
    app.state.engine = engine
    app.state.settings = settings
    app.state.upstream_transport = upstream_transport

    @app.exception_handler(MemdError)
    async def memd_error(_: Request, exc: MemdError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("internal error: %s", exc)
        return JSONResponse(error_body(exc.type, str(exc)), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(error_body("invalid_request_error",
                                           "request body is not valid JSON"), status_code=400)
        parts = []
        for e in errors[:5]:
            where = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{where or 'body'}: {e.get('msg')}")
        return JSONResponse(error_body("invalid_request_error", "; ".join(parts)),
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(error_body(kind, str(exc.detail)), status_code=exc.status_code)

    @app.get("/health")
    def health() -> dict[str, Any]:
        if settings.auth:  # answered without a key: status only
            return {"status": "ok", "version": memd.__version__, "auth": True}
        return {"status": "ok", "version": memd.__version__,
                "store": type(engine.store).__name__, "embedder": engine.embedder.name,
                "pending_jobs": engine.store.pending_jobs()}

    scoped = [Depends(_workspace_param)]
    for router in (api.router, proxy.router):
        app.include_router(router)
        app.include_router(router, prefix="/w/{workspace}", dependencies=scoped)
    if settings.auth:
        check = getattr(engine.store, "check_row_security", None)
        if check is not None:
            check()  # PostgreSQL: refuse to serve users without RLS in place
        app.add_middleware(Authenticate, engine=engine)
    app.add_middleware(  # added last: runs first
        Guard, allowed_hosts=LOOPBACK_HOSTS | frozenset(h.lower() for h in settings.allowed_hosts),
        max_body=settings.max_body_bytes,
        allowed_origins=frozenset(o.strip().rstrip("/").lower()
                                  for o in settings.allowed_origins if o.strip()),
    )
    return app
