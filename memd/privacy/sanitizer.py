"""Secret and personal-data redaction before anything becomes a memory.

``RegexSanitizer`` replaces what its rules find with typed placeholders such as
``[API_KEY_1]``, ``[PASSWORD_2]`` or ``[EMAIL_3]``. One counter numbers the distinct values
of a session, whatever their kind, so a number names one value; the same value gets the
same placeholder every time it appears in the session (``Placeholders``, passed in by the
caller, kept in memory only). Placeholders are never detected again, and the text around
each replacement is scanned again until nothing more is found, so sanitizing is
idempotent.

Speed: a text is scanned once per rule with regexes that start with a literal (re then
jumps from one occurrence to the next), case-insensitive ones on a lowercased copy;
Python code runs only on matches. Yelp's detect-secrets, scanning line by line, was far
slower on the same inputs (bench/README.md, ``bench_sanitizer.py --detect-secrets``);
several of its plugin regexes are ported in ``memd.privacy.providers``.

Modes: ``off`` changes nothing; ``secrets`` (the default) redacts keys, tokens, passwords
and private keys; ``secrets+pii`` also emails, phone numbers, card numbers and IBANs.
Custom patterns (a name and a regex) apply in both redacting modes; the name, upper-cased,
is the placeholder's kind.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import secrets
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from memd.errors import InvalidInput
from memd.privacy.context import CONTEXT_RULES
from memd.privacy.pii import PII_RULES
from memd.privacy.providers import PROVIDER_RULES
from memd.privacy.rules import CUSTOM_PRIORITY, Rule, Span

PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*_[0-9]+\]")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,39}")
_MAX_PASSES = 3
# Rescans after a replacement look at matches starting this many characters around it,
# and let them run this far past their window (the first scan has no such limit).
_RESCAN = 512
_LOOKAHEAD = 4096
# Texts at least this long in which the rules found nothing are remembered by a keyed
# digest, the newest ``_CLEAN_ENTRIES`` of them: a tool result is often read twice in one
# request (for the retrieval query, then to store it), and hashing it is ~30 times cheaper
# than scanning it with every rule. A text with findings is not remembered (its
# placeholders depend on the session's map).
_CLEAN_CHARS = 2048
_CLEAN_ENTRIES = 256


class Mode(StrEnum):
    OFF = "off"
    SECRETS = "secrets"
    SECRETS_PII = "secrets+pii"


@dataclass(frozen=True, slots=True)
class CustomPattern:
    """A rule from the config: what ``regex`` matches is replaced by ``[NAME_n]``; if the
    regex has a group named ``value``, only that group is."""

    name: str
    regex: str


def parse_patterns(raw: object) -> tuple[CustomPattern, ...]:
    """Custom patterns from a config value: a table of name = regex, or a list of tables
    with ``name`` and ``regex`` keys."""
    if isinstance(raw, Mapping):
        items: Iterable[object] = [{"name": k, "regex": v} for k, v in raw.items()]
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        raise InvalidInput("privacy patterns: expected a table of name = regex or a list of "
                           "{name, regex} tables")
    out = []
    for item in items:
        if not (isinstance(item, Mapping) and isinstance(item.get("name"), str)
                and isinstance(item.get("regex"), str)):
            raise InvalidInput(f"privacy patterns: {item!r} needs a string name and regex")
        out.append(CustomPattern(item["name"], item["regex"]))
    return tuple(out)


def _custom_rule(pattern: CustomPattern) -> Rule:
    if not _NAME.fullmatch(pattern.name):
        raise InvalidInput(f"privacy pattern name {pattern.name!r}: use letters, digits, _ "
                           "and -, starting with a letter (at most 40)")
    try:
        compiled = re.compile(pattern.regex)
    except re.error as e:
        raise InvalidInput(f"privacy pattern {pattern.name!r}: invalid regex "
                           f"{pattern.regex!r}: {e}") from None
    if compiled.fullmatch(""):
        raise InvalidInput(f"privacy pattern {pattern.name!r}: the regex matches the empty "
                           "string")
    group = compiled.groupindex.get("value", 0)

    def locate(m: re.Match[str], text: str) -> Span | None:
        span = m.span(group)
        return span if span[1] > span[0] else None

    kind = pattern.name.upper().replace("-", "_")
    return Rule(pattern.name, kind, compiled, locate, CUSTOM_PRIORITY)


class Placeholders:
    """The placeholders of one session: the same value gets the same placeholder each time.

    In memory only, never persisted; values are kept as keyed hashes (the key is random per
    map), not as text. At most ``max_entries`` are remembered: past that the least recently
    seen is forgotten, and if it comes back it gets a new number (numbers are never
    reused, so two values never share one). Safe to share between threads.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise InvalidInput("Placeholders: max_entries must be at least 1")
        self._max = max_entries
        self._key = secrets.token_bytes(16)
        self._seen: OrderedDict[bytes, str] = OrderedDict()
        self._next = 1
        self._lock = threading.Lock()

    def get(self, kind: str, value: str) -> str:
        """The placeholder of ``value``, a new ``[KIND_n]`` the first time."""
        digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), key=self._key,
                                 digest_size=16).digest()
        with self._lock:
            found = self._seen.get(digest)
            if found is not None:
                self._seen.move_to_end(digest)
                return found
            placeholder = f"[{kind}_{self._next}]"
            self._next += 1
            self._seen[digest] = placeholder
            if len(self._seen) > self._max:
                self._seen.popitem(last=False)
            return placeholder

    def __len__(self) -> int:
        return len(self._seen)

    def __repr__(self) -> str:
        return f"Placeholders({len(self._seen)} of {self._max})"


@dataclass(frozen=True, slots=True)
class Finding:
    """How many values ``rule`` found and replaced with ``kind`` placeholders; never the
    values themselves."""

    kind: str
    rule: str
    count: int


@dataclass(frozen=True, slots=True)
class Sanitized:
    """A sanitized text and what was replaced in it."""

    text: str
    findings: tuple[Finding, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.findings)

    def counts(self) -> dict[str, int]:
        """Replacements by kind."""
        out: Counter[str] = Counter()
        for f in self.findings:
            out[f.kind] += f.count
        return dict(out)


@runtime_checkable
class Sanitizer(Protocol):
    def sanitize(self, text: str, placeholders: Placeholders | None = None) -> Sanitized:
        """``text`` with its secrets replaced by placeholders from ``placeholders`` (the
        session's map; a fresh one when None)."""
        ...


@dataclass(frozen=True, slots=True)
class _Hit:
    start: int
    end: int
    rule: Rule


def _lowered(text: str) -> str:
    """A lowercase copy with the same length: ``str.lower`` unless it changes the length
    (a few non-ASCII letters lower to two characters), then ASCII letters only."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _merge(hits: list[_Hit]) -> list[_Hit]:
    """Overlapping hits become one covering all of them, of the kind of the most specific
    rule (lowest priority number, then longest), so that nothing any rule found is left."""
    merged: list[_Hit] = []
    for hit in sorted(hits, key=lambda h: (h.start, -h.end)):
        if merged and hit.start < merged[-1].end:
            last = merged[-1]
            best = min(last.rule, hit.rule, key=lambda r: r.priority)
            merged[-1] = _Hit(last.start, max(last.end, hit.end), best)
        else:
            merged.append(hit)
    return merged


class RegexSanitizer:
    """The default sanitizer: memd's own rules plus custom patterns, by ``mode``."""

    def __init__(self, mode: Mode | str = Mode.SECRETS,
                 patterns: Iterable[CustomPattern | tuple[str, str]] = ()) -> None:
        try:
            self.mode = Mode(mode)
        except ValueError:
            raise InvalidInput(f"privacy mode {mode!r}: use one of "
                               f"{', '.join(m.value for m in Mode)}") from None
        custom = tuple(_custom_rule(p if isinstance(p, CustomPattern) else CustomPattern(*p))
                       for p in patterns)
        rules: tuple[Rule, ...] = ()
        if self.mode is not Mode.OFF:
            rules = custom + PROVIDER_RULES + CONTEXT_RULES
        if self.mode is Mode.SECRETS_PII:
            rules += PII_RULES
        self.rules = rules
        self._clean: OrderedDict[bytes, None] = OrderedDict()
        self._clean_key = secrets.token_bytes(16)  # no text can be made to collide
        self._clean_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RegexSanitizer(mode={self.mode.value!r}, rules={len(self.rules)})"

    def sanitize(self, text: str, placeholders: Placeholders | None = None) -> Sanitized:
        """``text`` with what the rules find replaced by placeholders from
        ``placeholders`` (the session's map; a fresh one when None)."""
        if not self.rules or not text:
            return Sanitized(text)
        digest = self._digest(text) if len(text) >= _CLEAN_CHARS else None
        if digest is not None and self._seen_clean(digest):
            return Sanitized(text)
        if placeholders is None:
            placeholders = Placeholders()
        counts: Counter[tuple[str, str]] = Counter()
        # A replacement can change what borders another value (a key glued to an email is
        # not a key until the email is gone): the text is scanned again around each
        # replacement until nothing more is found.
        windows = [(0, len(text))]
        for _ in range(_MAX_PASSES):
            hits = self._scan(text, windows)
            if not hits:
                break
            parts, pos, at, windows = [], 0, 0, []
            for hit in hits:
                placeholder = placeholders.get(hit.rule.kind, text[hit.start:hit.end])
                parts += [text[pos:hit.start], placeholder]
                at += hit.start - pos
                windows.append((max(0, at - _RESCAN), at + len(placeholder) + _RESCAN))
                at += len(placeholder)
                pos = hit.end
                counts[hit.rule.kind, hit.rule.name] += 1
            parts.append(text[pos:])
            text = "".join(parts)
        if digest is not None and not counts:
            self._remember_clean(digest)
        findings = tuple(Finding(kind, rule, n) for (kind, rule), n in counts.items())
        return Sanitized(text, findings)

    def _digest(self, text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), key=self._clean_key,
                               digest_size=32).digest()

    def _seen_clean(self, digest: bytes) -> bool:
        """Whether a text of this digest was scanned and nothing was found in it."""
        with self._clean_lock:
            if digest not in self._clean:
                return False
            self._clean.move_to_end(digest)
            return True

    def _remember_clean(self, digest: bytes) -> None:
        with self._clean_lock:
            self._clean[digest] = None
            if len(self._clean) > _CLEAN_ENTRIES:
                self._clean.popitem(last=False)

    def _scan(self, text: str, windows: list[Span]) -> list[_Hit]:
        """The merged hits of all rules on the matches that start in ``windows``."""
        low = _lowered(text) if any(r.lowered for r in self.rules) else text
        # Placeholders are inert: no hit may overlap one or start a match inside one.
        fences = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
        starts = [s for s, _ in fences]
        windows = _merge_windows(windows)
        hits = []
        shared: dict[re.Pattern[str], list[re.Match[str]]] = {}  # rules may share a regex
        for rule in self.rules:
            matches = shared.get(rule.pattern)
            if matches is None:
                source = low if rule.lowered else text
                matches = []
                for start, end in windows:
                    for m in rule.pattern.finditer(source, start, end + _LOOKAHEAD):
                        if m.start() >= end:
                            break
                        matches.append(m)
                shared[rule.pattern] = matches
            for m in matches:
                span = rule.locate(m, text)
                if span is None:
                    continue
                if fences and (_fenced(fences, starts, *span)
                               or _fenced(fences, starts, m.start(), m.start() + 1)):
                    continue
                hits.append(_Hit(span[0], span[1], rule))
        return _merge(hits)


def _merge_windows(windows: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _fenced(fences: list[Span], starts: list[int], start: int, end: int) -> bool:
    """Whether ``[start, end)`` overlaps one of the sorted, disjoint ``fences``."""
    i = bisect.bisect_right(starts, start) - 1
    if i >= 0 and fences[i][1] > start:
        return True
    return i + 1 < len(fences) and fences[i + 1][0] < end
