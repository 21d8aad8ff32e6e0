"""The model server behind memd: the app's one HTTP client to it (one per API it
serves), the resolver of each model's context window built on that client, and their
retirement when the settings that made them change."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
import orjson
from fastapi import Request

from memd.models.tokens import calibrated_scale
from memd.server.windows import WindowResolver
from memd.types import WindowInfo


class NoUpstream(Exception):
    """No model server is configured."""


NO_UPSTREAM = ("no upstream model server is configured: start memd with --upstream-url "
               "or set MEMD_UPSTREAM_URL")


def cached_client(app: Any, name: str, base_url: str) -> httpx.AsyncClient:
    """The app's client to a model server, made once and kept as ``app.state.<name>``.
    It keeps no cookies: one client serves every user, and a cookie a model server set
    for one user's call must never go out with another's."""
    client: httpx.AsyncClient | None = getattr(app.state, name, None)
    if client is None:
        client = httpx.AsyncClient(
            transport=app.state.upstream_transport, base_url=base_url.rstrip("/") + "/",
            timeout=httpx.Timeout(app.state.settings.upstream_timeout, connect=10.0),
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        )
        setattr(app.state, name, client)
    return client


def upstream_client(request: Request) -> httpx.AsyncClient:
    settings = request.app.state.settings
    if not settings.upstream_url:
        raise NoUpstream(NO_UPSTREAM)
    return cached_client(request.app, "upstream", settings.upstream_url)


def windows_of(request: Request) -> WindowResolver:
    app = request.app
    resolver: WindowResolver | None = getattr(app.state, "windows", None)
    if resolver is None:
        try:
            client: httpx.AsyncClient | None = upstream_client(request)
        except NoUpstream:
            client = None
        resolver = app.state.windows = WindowResolver(app.state.settings, client)
    return resolver


async def window_of(request: Request, model: str | None,
                    count: Callable[[str], Awaitable[int | None]] | None = None,
                    ) -> WindowInfo:
    """The window of the request's model and the factor to its own token counts,
    measured with ``count`` when the door has the model server's own count
    (:meth:`WindowResolver.counted_ratio`)."""
    resolver = windows_of(request)
    found = await resolver.resolve(model, request.headers.get("x-memd-context-window"))
    ratio = None
    if found.tokens is not None:
        ratio = await (resolver.counted_ratio(model, count) if count is not None
                       else resolver.token_ratio(model))
    return WindowInfo(found.tokens, found.source, found.detail,
                      calibrated_scale(model, ratio))


def retire_upstream(app: Any) -> None:
    """Make the next call build the upstream client and window resolver from the
    settings anew (they changed). The old client may still be serving a call (a long
    stream): it is closed with the app, not now."""
    app.state.windows = None
    for name in ("upstream", "upstream_anthropic", "upstream_ollama"):
        client = getattr(app.state, name, None)
        if client is not None:
            setattr(app.state, name, None)
            app.state.retired_upstreams = [*getattr(app.state, "retired_upstreams", ()),
                                           client]


async def close_upstream(app: Any) -> None:
    retire_upstream(app)
    retired = getattr(app.state, "retired_upstreams", ())
    app.state.retired_upstreams = []
    for client in retired:
        await client.aclose()


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as compact JSON (orjson; json for what orjson refuses, such as integers
    past 64 bits, or a lone surrogate, which only an ASCII ``\\ud800`` escape carries)."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()
