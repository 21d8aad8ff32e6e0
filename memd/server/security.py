"""Authenticated (team) mode: every request carries an API key and acts as its user.

Keys travel as ``Authorization: Bearer memd_...`` (what an OpenAI client sends as its
``api_key``) or ``X-Api-Key``. The middleware resolves the key's SHA-256 to a user before
the app sees the request, then runs the whole request (streamed replies included) under
:func:`memd.auth.acting_as`: the routes take the user from there
(:func:`memd.server.deps.user_of`), and the PostgreSQL backend keys Row-Level Security on
it. ``GET /health`` answers without a key, with nothing but its status.

Also here: the ASGI types, header parsing and error replies that this middleware and the
daemon's guard (:class:`memd.server.app.Guard`) share, and the guard's two browser checks.
Any web page the user opens can send requests to a daemon on localhost, so
:func:`cross_site_refusal` refuses requests a browser marks as coming from another site,
and :func:`is_json` lets a write through only with a JSON body: a page can send
``text/plain`` or a form without asking the server first (a CORS "simple request"), but
not ``application/json``.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import orjson

from memd.auth import acting_as
from memd.engine.memory import Memd
from memd.errors import InvalidInput, MemdError
from memd.server.failures import error_body, reply_for

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
# The web inspector's cookie: its token, or in team mode an API key (memd.server.inspector)
UI_COOKIE = "memd_ui"
# the inspector's pages check their cookie themselves (a missing one gets a page, not JSON)
UI_PATHS = ("/ui", "/ui/")
# methods that neither write nor forward: only these may come without a JSON body
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Sec-Fetch-Site values of a request from memd's own pages or typed by the user; a
# "same-site" request may come from another port of localhost, which is another app
_OWN_FETCH_SITES = frozenset({"same-origin", "none"})


# A JSON string (its escapes included), and the brackets that open and close a level.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(rb"[\[\]{}]")


_CONTAINERS = (dict, list)

# The ASGI scope key under which the guard leaves a body it parsed: ``(value,)``.
PARSED_BODY = "memd.parsed_body"


def nests_deeper(body: bytes, limit: int) -> bool:
    """Whether a JSON text nests arrays and objects more than ``limit`` levels deep."""
    return nesting(body, limit)[0]


def nesting(body: bytes, limit: int) -> tuple[bool, tuple[Any] | None]:
    """Whether a JSON text nests arrays and objects more than ``limit`` levels deep, and
    ``(value,)`` when it was parsed to find out (a route need not parse it again).

    orjson parses a text of at most 1024 levels without recursing in Python (faster
    than counting its brackets), and the levels of what it parsed are counted over its
    arrays and objects alone, several times faster than finding the brackets outside
    strings in the text; a text it refuses (invalid, deeper than that, or with integers
    past 64 bits) is scanned."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return brackets_deeper(body, limit), None
    # orjson makes plain dicts and lists, never subclasses: their exact types are tested
    # (twice as fast as isinstance over every value of an agent's large request)
    level = [value] if type(value) in _CONTAINERS else []  # the arrays and objects
    for _ in range(limit):  # of each level in turn, from the first
        level = [item for inner in level
                 for item in (inner.values() if type(inner) is dict else inner)
                 if type(item) in _CONTAINERS]
        if not level:
            return False, (value,)
    return bool(level), (value,)


def strict_parse(body: bytes) -> Any:
    """The value of a request body that orjson refused, or :class:`InvalidInput` saying
    what is wrong with it.

    orjson refuses some JSON that clients do send (integers past 64 bits, a lone
    surrogate written as an escape), so Python's parser reads what it refuses; that
    parser in turn raises errors outside its own (a ``ValueError`` for an integer
    longer than Python converts, ``UnicodeDecodeError``) and accepts ``NaN`` and
    ``Infinity``, which JSON does not have. Each of these becomes a refusal here, so
    that no route meets them."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"request body is not valid UTF-8: byte {exc.start} "
                           f"(0x{body[exc.start]:02x}) cannot be decoded") from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc
    except ValueError as exc:  # the int-str conversion limit
        raise InvalidInput(f"request body holds an integer of more than "
                           f"{sys.get_int_max_str_digits()} digits") from exc
    except RecursionError as exc:  # deeper than the guard's limit, so not met in practice
        raise InvalidInput("request body nests JSON too deep to read") from exc
    where = _non_finite(value, "")
    if where is not None:
        raise InvalidInput(f"request body field {where[0] or '(the body)'} is "
                           f"{where[1]!r}: memd takes only finite numbers (JSON has no "
                           "NaN or Infinity)")
    return value


def _non_finite(value: Any, path: str) -> tuple[str, float] | None:
    """The path (``a.b[0]``) and value of the first NaN or infinity in ``value``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        found = _non_finite(item, f"{path}[{key}]" if isinstance(key, int)
                            else f"{path}.{key[:40]}" if path else key[:40])
        if found is not None:
            return found
    return None


def brackets_deeper(body: bytes, limit: int) -> bool:
    """:func:`nests_deeper` without parsing (brackets inside strings do not count)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for bracket in _BRACKET.finditer(_JSON_STRING.sub(b"", body)):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def scope_headers(scope: Scope) -> dict[str, str]:
    """An ASGI request's headers, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in scope.get("headers", [])}


async def send_error(send: Send, status: int, kind: str, message: str,
                     *headers: tuple[bytes, bytes]) -> None:
    """Answer from a middleware, before the app: memd's error body."""
    await send_json(send, status, error_body(kind, message), *headers)


async def send_json(send: Send, status: int, value: Any,
                    *headers: tuple[bytes, bytes]) -> None:
    """Answer from a middleware, before the app: ``value`` as JSON."""
    body = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON: ``application/json`` or ``application/*+json``,
    parameters such as ``; charset=utf-8`` allowed."""
    kind, _, subtype = content_type.split(";", 1)[0].strip().lower().partition("/")
    return kind == "application" and (subtype == "json" or (
        subtype.endswith("+json") and len(subtype) > len("+json")))


def cross_site_refusal(scope: Scope, headers: dict[str, str],
                       allowed_origins: frozenset[str]) -> str | None:
    """Why a request comes from another site (the message of a 403), or None.

    Browsers say where a request comes from: ``Origin`` (on every write, and on reads a
    page makes with ``fetch``) and ``Sec-Fetch-Site``. A request is foreign when its
    ``Sec-Fetch-Site`` is anything but ``same-origin`` or ``none``, or its ``Origin`` is
    not the request's own (its scheme and ``Host``); ``Origin: null`` (a sandboxed frame,
    a local file) is always foreign, and an origin in ``allowed_origins`` (lower-case,
    no trailing slash) never is. Without either header the client is not a browser page
    (curl, an SDK, an editor plugin, the memd CLI) and is let through.
    """
    origin = headers.get("origin")
    if origin is not None:
        origin = origin.strip().rstrip("/").lower()
        if origin == "null":
            return "requests with 'Origin: null' (a sandboxed frame or a local file) are refused"
        if origin in allowed_origins:
            return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.strip().lower() not in _OWN_FETCH_SITES:
        return (f"a {fetch_site.strip().lower()} request from a web page is refused; add "
                "the page's origin to allowed_origins in the config to let it call memd")
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '').lower()}"
    if origin is not None and origin != own:
        return (f"a request from {origin} to {own} is refused; add that origin to "
                "allowed_origins in the config to let it call memd")
    return None


def presented_key(headers: dict[str, str]) -> str | None:
    """The API key of a request: its ``Authorization: Bearer`` or ``X-Api-Key``, else
    the inspector's cookie (the pages' requests; cross-site ones are refused before)."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("x-api-key") or cookie_value(headers, UI_COOKIE)


def cookie_value(headers: dict[str, str], name: str) -> str | None:
    """The value of cookie ``name`` in a request's ``Cookie`` header, or None."""
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return value
    return None


def is_ui_page(path: str) -> bool:
    """Whether ``path`` is one of the inspector's pages or their files."""
    return path in UI_PATHS or path.startswith("/ui/static/")


class Authenticate:
    """Pure ASGI middleware: 401 without a live key; otherwise the request acts as the
    key's user (``scope["state"]["memd_user"]`` and the :mod:`memd.auth` context)."""

    def __init__(self, app: ASGIApp, engine: Memd,
                 on_error: Callable[[MemdError], None] | None = None) -> None:
        self.app = app
        self.engine = engine
        self.on_error = on_error  # told of a failed key check (the store out of reach)

    @staticmethod
    async def _deny(send: Send, message: str) -> None:
        await send_error(send, 401, "authentication_error", message,
                         (b"www-authenticate", b'Bearer realm="memd"'))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or is_ui_page(path):
            await self.app(scope, receive, send)
            return
        key = presented_key(scope_headers(scope))
        if key is None:
            await self._deny(send, "this memd requires an API key: send 'Authorization: "
                                   "Bearer memd_...' (an administrator creates one with "
                                   "'memd key create --user NAME')")
            return
        try:
            user = await anyio.to_thread.run_sync(self.engine.accounts.user_of_key, key)
        except MemdError as exc:  # e.g. the store is out of reach: a JSON 503, as in a route
            if self.on_error is not None:
                self.on_error(exc)
            status, body, headers = reply_for(exc)
            await send_json(send, status, body,
                            *((k.lower().encode(), v.encode()) for k, v in headers.items()))
            return
        if user is None:
            await self._deny(send, "invalid or revoked API key")
            return
        scope.setdefault("state", {})["memd_user"] = user
        with acting_as(user):
            await self.app(scope, receive, send)
