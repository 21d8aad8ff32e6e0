"""The inspector's token: a random secret kept in the data dir, 0600.

A web page the user opens can send requests to a daemon on localhost, and in personal
mode the JSON API trusts whoever reaches it; the inspector's pages, which show all of the
user's memory, are served only to a browser that was given this token (in a URL that
``memd serve`` and ``memd ui`` print) and keeps it in a cookie. Whoever can read the data
dir can read the memory anyway, so the token lives there.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from memd.private import private_dir, private_file

TOKEN_FILE = "ui-token"


def ui_token(data_dir: Path) -> str:
    """The data dir's inspector token, made on first use (two processes making it at once
    agree: the file is created once, and each reads what the first wrote)."""
    path = Path(data_dir) / TOKEN_FILE
    found = _read(path)
    if found:
        return found
    private_dir(path.parent, tighten=False)
    fresh = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read(path) or fresh
    with os.fdopen(fd, "w") as out:
        out.write(fresh)
    private_file(path)  # the umask may have masked the mode
    return fresh


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def ui_url(base_url: str, token: str) -> str:
    """The URL that opens the inspector at ``base_url`` (``http://host:port``)."""
    return f"{base_url.rstrip('/')}/ui?token={token}"
