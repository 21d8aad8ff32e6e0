"""The extractor's results, :class:`Extraction` and :class:`ExtractedFact`, and its limits.

Apart from the rest so that every part of the package can name them without importing
the public API in ``memd.engine.learning.extract`` (which imports those parts).
"""

from __future__ import annotations

from dataclasses import dataclass

from memd.types import Provenance, Scope, Tier

CATEGORIES = ("identity", "preference", "constraint", "instruction")
#: The tag of a rule about the form of every answer (language, tone, format, length, code
#: style): it applies to any request, where other instructions apply to their topic.
STYLE_TAG = "style-rule"
MAX_CLAUSE_CHARS = 300
MIN_CLAUSE_WORDS = 3
HEDGED_CONFIDENCE = 0.6


@dataclass(frozen=True, slots=True)
class ExtractedFact:
    """A key/value fact. ``value`` is a slice of the source text."""

    category: str  # identity | preference | constraint | instruction
    key: str
    value: str
    confidence: float


@dataclass(frozen=True, slots=True)
class Extraction:
    """One memory found in a message: a standalone third-person sentence plus its scores,
    entities and, for a key/value statement, the structured fact. ``scope`` is LOCAL for
    an instruction meant for the conversation it was given in ("answer in French here");
    ``tags`` holds ``STYLE_TAG`` for a rule about the form of every answer."""

    text: str
    provenance: Provenance
    tier: Tier
    importance: float
    confidence: float
    entities: tuple[str, ...]
    fact: ExtractedFact | None
    is_correction: bool
    scope: Scope = Scope.GLOBAL
    tags: tuple[str, ...] = ()
