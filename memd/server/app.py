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
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

import memd
from memd.config import Settings
from memd.engine.memory import Memd
from memd.engine.validate import ID_PATTERN, MAX_DEPTH, check_id, clean_chars
from memd.errors import InvalidInput, MemdError
from memd.private import private_dir
from memd.server.failures import RETRY_AFTER_SECONDS, error_body, reply_for
from memd.server.failures import public_message as public_message  # callers import it here
from memd.server.health import StoreHealth
from memd.server.later import Later, is_door
from memd.server.security import (
    OPEN_PATHS,
    PARSED_BODY,
    SAFE_METHODS,
    ASGIApp,
    Authenticate,
    Receive,
    Scope,
    Send,
    cross_site_refusal,
    is_json,
    nesting,
    scope_headers,
    send_error,
    strict_parse,
)
from memd.server.watch import ConfigSource, LiveConfig
from memd.watching import FileWatcher

log = logging.getLogger("memd.server")

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


# How pydantic names the branch of a union in an error's location, e.g.
# "function-before[_integral(), int]" or "literal['L0','L1']": noise to a client.
_UNION_BRANCH = re.compile(r"[a-z-]+\[.*\]", re.DOTALL)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """The methods the app's routes serve at the path of the request ``scope``."""
    return [method for method in _METHODS
            if any(route.matches({**scope, "method": method})[0] == Match.FULL
                   for route in app.router.routes)]


class Guard:
    """Pure ASGI middleware, in this order: the Host allow-list, the cross-site check
    (:func:`memd.server.security.cross_site_refusal`), JSON-only writes (a write's body
    must come with a JSON Content-Type; one without any is known only once read), and a
    body size limit (the body is read once, up to the limit, and replayed to the app);
    then a route other than a chat door waits for the writes of the answers already given
    (memd.server.later)."""

    def __init__(self, app: ASGIApp, later: Later, allowed_hosts: frozenset[str],
                 max_body: int, allowed_origins: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.later = later
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
        deep, parsed = nesting(body, MAX_DEPTH)
        if deep:
            await send_error(send, 400, "invalid_request_error",
                             f"the request body nests JSON deeper than {MAX_DEPTH} levels")
            return
        if parsed is None and writes and body:
            try:
                parsed = (strict_parse(body),)
            except InvalidInput as exc:
                await send_error(send, 400, "invalid_request_error", str(exc))
                return
        if parsed is not None:
            scope[PARSED_BODY] = parsed
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if not is_door(method, scope.get("path", "")):
            await self.later.settled()  # what the answers given so far store, stored
        await self.app(scope, replay, send)

    @staticmethod
    async def _not_json(send: Send, content_type: str | None) -> None:
        got = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        await send_error(send, 415, "unsupported_media_type",
                         f"memd accepts only JSON request bodies: send Content-Type: "
                         f"application/json (got {got})")


class JobWorker:
    """Runs the engine's durable jobs in a background thread while the daemon is up, and
    every ``tick`` seconds (from the start) lets the scheduler queue the sweeps that are
    due (memd.engine.background.schedule)."""

    def __init__(self, engine: Memd, interval: float, tick: float | None = None,
                 on_error: Callable[[MemdError], None] | None = None) -> None:
        self.engine = engine
        self.interval = interval
        self.on_error = on_error  # told when the store fails it (e.g. out of reach)
        self.tick = engine.settings.maintenance.tick if tick is None else tick
        self._next_tick = 0.0  # monotonic
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
                if time.monotonic() >= self._next_tick:
                    self._next_tick = time.monotonic() + self.tick
                    self.engine.jobs.schedule.tick()
                ran = self.engine.run_jobs(limit=256)
            except MemdError as exc:  # the store is unavailable: log, back off, retry
                log.warning("job worker: %s", exc)
                if self.on_error is not None:
                    self.on_error(exc)
                ran = 0
            # A job's own failure is recorded with the job (JobRunner.run_due); anything
            # else is a bug outside the handlers, which must not end the thread: the
            # queue would stop for the daemon's lifetime with no one told but this log.
            except Exception:
                log.exception("job worker: unexpected error; retrying after a pause")
                ran = 0
            if not ran:
                self._stop.wait(self.interval)


def _workspace_param(
    workspace: str = Path(description="Scope memory to this workspace (a project).",
                          json_schema_extra={"pattern": ID_PATTERN, "maxLength": 128}),
) -> None:
    """Declares and checks the ``/w/{workspace}`` path parameter; routes read it through
    :func:`memd.server.deps.workspace_of`."""
    check_id(workspace, "workspace")


def _path_decides_workspace(schema: dict[str, Any]) -> None:
    """Under ``/w/{workspace}`` the path gives the workspace: the operations there take
    no ``workspace`` query parameter or body field (one that differs is a 400)."""
    parts = schema["components"]["schemas"]
    ref = "#/components/schemas/"
    for path, item in schema["paths"].items():
        if not path.startswith("/w/{workspace}/"):
            continue
        for op in item.values():
            op["parameters"] = [p for p in op.get("parameters", ())
                                if not (p["name"] == "workspace" and p["in"] == "query")]
            for media in op.get("requestBody", {}).get("content", {}).values():
                name = media.get("schema", {}).get("$ref", "").removeprefix(ref)
                if "workspace" not in parts.get(name, {}).get("properties", {}):
                    continue
                scoped = f"{name}InWorkspace"
                if scoped not in parts:
                    copy = dict(parts[name])
                    copy["properties"] = {k: v for k, v in copy["properties"].items()
                                          if k != "workspace"}
                    parts[scoped] = copy
                media["schema"] = {"$ref": ref + scoped}


def _complete_schema(app: FastAPI, engine: Memd) -> None:
    """Add to the OpenAPI schema what the models cannot say: the JSON that metadata may
    hold (a recursive schema), and the one embedding size this daemon serves."""
    from memd.server.schemas import JSON_VALUE

    plain = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = plain()  # built once, then cached by FastAPI
        if fresh:
            parts = schema.setdefault("components", {}).setdefault("schemas", {})
            parts["JsonValue"] = JSON_VALUE
            embeddings = parts.get("EmbeddingsRequest", {}).get("properties", {})
            if "dimensions" in embeddings:
                embeddings["dimensions"] = {
                    "anyOf": [{"type": "integer", "enum": [engine.embedder.dim]},
                              {"type": "null"}],
                    "description": "The embedder's dimension; any other is a 400."}
            _path_decides_workspace(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _watchers(app: FastAPI, config: ConfigSource | None,
              watch_notes: bool) -> list[FileWatcher]:
    """The file watchers of a running daemon: its config file (its directory is made if
    missing, so that a file created later is seen) and the notes folder."""
    from memd.engine.learning.notes import NotesFolder

    watchers: list[FileWatcher] = []
    if config is not None:
        private_dir(config.path.parent, tighten=False)
        watchers.append(LiveConfig(app, config).watcher())
    if watch_notes:
        watchers.append(NotesFolder(app.state.engine).watcher())
    return watchers


def create_app(engine: Memd, settings: Settings | None = None, run_jobs: bool = True,
               upstream_transport: Any = None, config: ConfigSource | None = None,
               watch_notes: bool = False) -> FastAPI:
    """The daemon's ASGI app over ``engine``. ``upstream_transport`` (an httpx transport)
    replaces the network for the upstream model server, for in-process tests. While it
    runs, changes to the ``config`` file apply live and, with ``watch_notes``, the notes
    folder is kept in step (:mod:`memd.server.watch`, :mod:`memd.watching`)."""
    from memd.server import (
        anthropic,
        api,
        imports,
        inspector,
        inspector_api,
        ollama,
        proxy,
        responses,
        status,
        upstream,
    )
    from memd.server.mcp_door import HttpDoor

    settings = settings or engine.settings
    mcp_door = HttpDoor()
    store_health = StoreHealth(engine.pending_jobs)
    worker = (JobWorker(engine, settings.job_interval, on_error=store_health.saw)
              if run_jobs else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio

        if worker is not None:
            worker.start()
        watchers = _watchers(app, config, watch_notes)
        for watcher in watchers:
            await anyio.to_thread.run_sync(watcher.start)
        try:
            async with mcp_door.running():
                yield
        finally:
            for watcher in watchers:
                await anyio.to_thread.run_sync(watcher.stop)
            if worker is not None:
                worker.stop()
            await upstream.close_upstream(app)

    app = FastAPI(title="memd", version=memd.__version__, lifespan=lifespan,
                  description="Local-first memory daemon: OpenAI-compatible proxy and "
                              "native memory API.")
    app.state.engine = engine
    app.state.later = later = Later()
    app.state.settings = settings
    app.state.upstream_transport = upstream_transport

    @app.exception_handler(MemdError)
    async def memd_error(_: Request, exc: MemdError) -> JSONResponse:
        store_health.saw(exc)
        status, body, headers = reply_for(exc)
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(error_body("invalid_request_error",
                                           "request body is not valid JSON"), status_code=400)
        parts: list[str] = []
        for e in errors[:5]:
            where = ".".join(str(x) for x in e.get("loc", ())
                             if x != "body" and not _UNION_BRANCH.fullmatch(str(x)))
            part = f"{where or 'body'}: {e.get('msg')}"
            if part not in parts:
                parts.append(part)
        return JSONResponse(error_body("invalid_request_error",
                                       clean_chars("; ".join(parts))), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not just its first route's
            headers["Allow"] = ", ".join(allowed_methods(app, request.scope))
        return JSONResponse(error_body(kind, str(exc.detail)), status_code=exc.status_code,
                            headers=headers)

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def root() -> dict[str, str]:
        """What answers at the base URL: clients open a connection with a request here
        before their first call (Claude Code sends ``HEAD /``)."""
        return {"name": "memd", "version": memd.__version__, "api": "/v1",
                "openapi": "/openapi.json"}

    @app.get("/health")
    def health() -> JSONResponse:
        """The daemon's state; 503 while the store is out of reach (the last known
        state when the store is slow to answer: memd.server.health)."""
        reachable, pending = store_health.state()
        headers = {} if reachable else {"Retry-After": str(RETRY_AFTER_SECONDS)}
        body: dict[str, Any] = {"status": "ok" if reachable else "degraded",
                                "version": memd.__version__,
                                "store_state": "ok" if reachable else "unavailable"}
        if settings.auth:  # answered without a key: state only
            body["auth"] = True
        else:
            body.update(store=type(engine.store).__name__, embedder=engine.embedder.name,
                        pending_jobs=pending)
            if engine.jobs.llm_enabled:  # the helper's work since the start, counted
                body["helper"] = dict(sorted(engine.jobs.llm_counts.items()))
            config_status = getattr(app.state, "config_status", None)
            if config_status is not None:
                body["config"] = config_status
        return JSONResponse(body, status_code=200 if reachable else 503, headers=headers)

    scoped = [Depends(_workspace_param)]
    # the chat doors, the hot routes, are matched first
    for router in (proxy.router, anthropic.router, responses.router, ollama.router,
                   api.router, inspector_api.router, imports.router):
        app.include_router(router)
        app.include_router(router, prefix="/w/{workspace}", dependencies=scoped)
    app.include_router(status.router)  # the daemon's, not a workspace's
    app.include_router(inspector.router)  # the web inspector's pages, at /ui
    # MCP's streamable HTTP transport: GET, POST and DELETE on one path
    app.router.routes.append(Route("/mcp", mcp_door, methods=["GET", "POST", "DELETE"],
                                   include_in_schema=False))
    _complete_schema(app, engine)
    if settings.auth:
        engine.accounts.check_row_security()  # PostgreSQL: no users served without RLS
        app.add_middleware(Authenticate, engine=engine, on_error=store_health.saw)
    app.add_middleware(  # added last: runs first
        Guard, later=later,
        allowed_hosts=LOOPBACK_HOSTS | frozenset(h.lower() for h in settings.allowed_hosts),
        max_body=settings.max_body_bytes,
        allowed_origins=frozenset(o.strip().rstrip("/").lower()
                                  for o in settings.allowed_origins if o.strip()),
    )
    return app
