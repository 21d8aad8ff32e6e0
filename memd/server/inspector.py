"""``/ui``: the web inspector's pages, and who may open them.

The pages are files of :mod:`memd.ui` (``static/``) served as they are; they read and
write through the JSON API like any client. Opening them needs the inspector's token
(:mod:`memd.ui.token`; in team mode, an API key instead, so that the pages act as that
key's user): ``/ui?token=...`` sets it as an HttpOnly, SameSite=Strict cookie and
redirects to ``/ui``, so the token leaves the address bar and no script can read it.
Without a valid cookie ``/ui`` answers 401 with a page that says to run ``memd ui``.

In personal mode the inspector is served only while the daemon listens on loopback: on
another interface the token would travel in clear over the network, and the API behind
it trusts whoever reaches it. In team mode the cookie's key is checked on every API
request (:class:`memd.server.security.Authenticate`). Writes from the pages pass the same
guard as every other request (a foreign ``Origin`` or ``Sec-Fetch-Site`` is a 403; a
write's body must be JSON), and the strict cookie is not sent by another site's page.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from importlib import resources

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from memd.server.deps import engine_of
from memd.server.security import UI_COOKIE as COOKIE
from memd.ui.token import ui_token

router = APIRouter(include_in_schema=False)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
# the pages load nothing from elsewhere and run no inline script
_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                       "frame-ancestors 'none'; base-uri 'none'; "
                                       "form-action 'self'",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store"}

_REFUSED = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>memd inspector</title><link rel="stylesheet" href="/ui/static/app.css"></head>
<body class="refused"><main><h1>memd inspector</h1><p>{message}</p></main></body></html>
"""


#: How long a browser keeps a file of the pages under its versioned address: the address
#: changes with the files, so a kept copy is never stale.
_KEPT = {**_HEADERS, "Cache-Control": "private, max-age=31536000, immutable"}


@functools.cache
def assets_version() -> str:
    """A digest of the pages' files: their versioned address (``/ui/static/v-DIGEST/``)
    changes when any of them does, so a browser may keep them (and the modules they
    import, by relative address) without asking again."""
    digest = hashlib.sha256()
    for path in sorted(resources.files("memd.ui").joinpath("static").iterdir(),
                       key=lambda p: p.name):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"v-{digest.hexdigest()[:12]}"


def _asset(name: str) -> bytes | None:
    """A file of the pages (``static/NAME``), or None for a name it does not hold."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    path = resources.files("memd.ui").joinpath("static", name)
    return path.read_bytes() if path.is_file() else None


def _refused(status: int, message: str) -> HTMLResponse:
    return HTMLResponse(_REFUSED.format(message=message), status_code=status,
                        headers=_HEADERS)


async def _valid(request: Request, token: str) -> bool:
    """Whether ``token`` opens the inspector: the data dir's token in personal mode, a
    live API key in team mode."""
    settings = request.app.state.settings
    if not token:
        return False
    if settings.auth:
        accounts = engine_of(request).accounts
        return await anyio.to_thread.run_sync(accounts.user_of_key, token) is not None
    own = ui_token(engine_of(request).settings.data_dir)
    return hmac.compare_digest(token.encode(), own.encode())


def _served_here(request: Request) -> bool:
    settings = request.app.state.settings
    return bool(settings.auth) or settings.host in LOOPBACK


@router.get("/ui")
@router.get("/ui/")
async def page(request: Request, token: str | None = None) -> Response:
    """The inspector; with ``token``, first its cookie and a redirect to ``/ui``."""
    if not _served_here(request):
        return _refused(403, "This memd listens beyond this machine without "
                             "authentication: the inspector is served only on loopback, "
                             "or in team mode (<code>memd serve --auth</code>).")
    if token is not None:
        if not await _valid(request, token):
            return _refused(401, "That inspector link is not valid (any more). Run "
                                 "<code>memd ui</code> for a fresh one.")
        moved = RedirectResponse("/ui", status_code=303, headers=_HEADERS)
        moved.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return moved
    held = request.cookies.get(COOKIE)
    if held is None or not await _valid(request, held):
        return _refused(401, "Open the inspector with the link that <code>memd ui</code> "
                             "prints (it also opens it in your browser).")
    body = _asset("index.html")
    assert body is not None, "memd.ui's index.html is missing from the package"
    body = body.replace(b"/ui/static/", f"/ui/static/{assets_version()}/".encode())
    return Response(body, media_type=_TYPES[".html"], headers=_HEADERS)


@router.get("/ui/static/{name}")
def asset(name: str) -> Response:
    """A file of the pages (they hold no data: served without the cookie)."""
    return _asset_response(name, _HEADERS)


@router.get("/ui/static/{version}/{name}")
def kept_asset(version: str, name: str) -> Response:
    """A file of the pages under the current version's address, for the browser to keep
    (an address of another version is a 404: the page that named it is stale)."""
    if version != assets_version():
        return _refused(404, "No such file (the inspector was updated: reload it).")
    return _asset_response(name, _KEPT)


def _asset_response(name: str, headers: dict[str, str]) -> Response:
    body = _asset(name)
    kind = _TYPES.get(name[name.rfind("."):] if "." in name else "")
    if body is None or kind is None:
        return _refused(404, "No such file.")
    return Response(body, media_type=kind, headers=headers)

