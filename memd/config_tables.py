"""The tables of memd's settings (:mod:`memd.config`): the retrieval score's weights and
their named presets, the scheduled sweeps' intervals, context virtualization's zones,
the modes of message freshness in search and which settings are switches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memd.errors import InvalidInput


@dataclass(frozen=True)
class Weights:
    """Weights of the multi-signal retrieval score (see memd.engine.retrieval.score)."""

    similarity: float = 0.45
    # similarity : keyword = 0.75 : 0.25, a convex combination of the two channels (cosine
    # and max-normalized BM25), the fusion that beats either alone when its weight is
    # tuned (Bruch et al., TOIS 2023); tuned on the even half of LongMemEval_S's 418
    # questions, checked on the odd half (bench/README.md)
    keyword: float = 0.15
    freshness: float = 0.10
    access: float = 0.05
    authority: float = 0.15
    importance: float = 0.10
    entity: float = 0.05
    freshness_lambda: float = 0.005  # per hour: freshness halves in about 6 days


@dataclass(frozen=True)
class Maintenance:
    """How often each scheduled sweep runs, in seconds (memd.engine.background.schedule); 0 turns
    one off. ``tick`` is how often the daemon's job worker looks for due sweeps."""

    tick: float = 60.0
    expiry: float = 3600.0  # memories and sessions past their expires_at
    promotion: float = 900.0
    demotion: float = 6 * 3600.0
    decay: float = 6 * 3600.0  # each run lowers an idle memory's importance once
    prune: float = 6 * 3600.0
    retention: float = 6 * 3600.0  # only with retention_days set
    partitions: float = 24 * 3600.0  # PostgreSQL's monthly history partitions, ahead
    # sessions past a compaction threshold whose job was not queued by an append (a
    # threshold lowered, a job lost); each append queues its own
    compaction: float = 3600.0
    consolidation: float = 6 * 3600.0  # alike episodes folded into pattern memories


@dataclass(frozen=True)
class VirtualZones:
    """Context virtualization's pressure zones (memd.engine.virtual), as fractions of the
    model's window that a request (with its response reserve) passes: ``caution`` is the
    line past which mode "auto" engages, ``degrade`` the one past which tool results
    degrade; degrading goes on until the request is under ``target`` (far under the
    line, so that the prompt's prefix changes rarely: each step makes the model server
    re-read the prompt from the first object it changes), and evicting, which changes the
    prompt from near its start, until it is under ``evict_target``. The newest tool
    results, up to ``keep_recent`` of the window, stay whole while the older ones are
    enough."""

    caution: float = 0.70
    warning: float = 0.80
    critical: float = 0.90
    emergency: float = 0.95
    degrade: float = 0.90
    target: float = 0.30
    evict_target: float = 0.20
    keep_recent: float = 0.20


# Named weight sets (docs/design.md, "Retrieval score"). "default" is hybrid: cosine and
# keyword (BM25) relevance with small priors; "semantic" is relevance alone (no priors);
# "vector-authority" and "vector-importance" give keyword relevance no weight and rank by
# cosine tempered by freshness and access, with provenance authority, or importance and
# entity match, as the prior.
PRESETS: dict[str, Weights] = {
    "default": Weights(),
    "vector-authority": Weights(similarity=0.45, keyword=0.0, freshness=0.20, access=0.15,
                                authority=0.20, importance=0.0, entity=0.0),
    "vector-importance": Weights(similarity=0.40, keyword=0.0, freshness=0.25, access=0.10,
                                 authority=0.0, importance=0.20, entity=0.05),
    "semantic": Weights(similarity=0.75, keyword=0.25, freshness=0.0, access=0.0,
                        authority=0.0, importance=0.0, entity=0.0),
}
# Other names of two presets, accepted because existing config files use them.
PRESET_ALIASES: dict[str, str] = {
    "seed000": "vector-authority",
    "seed003": "vector-importance",
}


def preset_weights(name: str) -> Weights:
    """The weights of preset ``name`` (an alias resolves to its preset)."""
    canonical = PRESET_ALIASES.get(name, name)
    if canonical not in PRESETS:
        raise InvalidInput(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})")
    return PRESETS[canonical]


# When a message's age counts in search (memd.engine.retrieval.timecues.asks_recent).
FRESHNESS_MODES = ("auto", "always", "never")
# The settings that are switches: in a config file or the environment they may be
# written as words ("on", "off", "yes", "no", "1", "0").
SWITCHES = ("auth", "memory_recall", "recall_keyword", "known_words", "search_second_round",
            "search_expand_kinds", "search_time_cues", "search_passages",
            "search_keyword_agreement", "search_head_coverage",
            "search_diversity", "search_repeats_last", "search_questions_lower")


def freshness_mode(value: Any) -> Any:
    """``search_message_freshness`` was a switch before it was a mode: a boolean (or its
    spelling in the environment) still reads, as "always" or "never"."""
    if isinstance(value, bool):
        return "always" if value else "never"
    if isinstance(value, str):
        word = value.lower()
        if word in ("1", "true", "yes", "on"):
            return "always"
        if word in ("0", "false", "no", "off"):
            return "never"
        return word
    return value


def hop_seeds(value: Any) -> int:
    """``search_second_hop``: how many of a search's best user turns seed the hop, 0 to
    3; a switch's spelling reads as 1 (on) or 0 (off)."""
    word = str(value).lower()
    if isinstance(value, bool) or word in ("true", "yes", "on", "false", "no", "off"):
        return int(word in ("true", "yes", "on"))
    if isinstance(value, int | str) and word in ("0", "1", "2", "3"):
        return int(word)
    raise InvalidInput(f"search_second_hop must be 0 to 3 (or true/false), not {value!r}")
