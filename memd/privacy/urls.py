"""Where memd connects to, as it may be told to a user or written to a log: never a
password, a user name or a credential in a query string."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Query parameters that carry credentials (api_key, access_token, X-Amz-Signature,
# sig, password, ...), matched on the lowercased name.
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session|code")


def redact_url(url: str) -> str:
    """``url`` without its user name and password, and with the values of query
    parameters that look like credentials replaced by ``***`` (a URL that does not parse
    is not shown at all). A PostgreSQL URL or DSN is told as :func:`redact_dsn` tells
    it."""
    if url.startswith(("postgres://", "postgresql://")):
        return redact_dsn(url)
    if "://" not in url:
        return redact_dsn(url) if "=" in url else "(not a URL)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(an unreadable URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    query = urlencode([(k, "***" if _SECRET_PARAM.search(k.lower()) else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)],
                      safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_dsn(dsn: str) -> str:
    """``dbname on host:port`` for messages (never the password)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:  # malformed: reported when it is used
        return "PostgreSQL"
    host = info.get("host") or "localhost"
    port = f":{info['port']}" if info.get("port") else ""
    return f"database {info.get('dbname') or info.get('user') or '?'} on {host}{port}"
