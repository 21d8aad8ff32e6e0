"""Cutting a message into clauses and turning one clause into memories.

``memd.engine.learning.extract.extract`` drives these: the prose lines, their sentences, the
markers around a clause ("actually", "from now on", ...), the first rule that fits and
the finished :class:`Extraction`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from memd.engine.learning.extract.entities import is_tech, scan_terms, text_entities
from memd.engine.learning.extract.results import (
    HEDGED_CONFIDENCE,
    MAX_CLAUSE_CHARS,
    MIN_CLAUSE_WORDS,
    STYLE_TAG,
    ExtractedFact,
    Extraction,
)
from memd.engine.learning.extract.rules import (
    _ADVICE,
    _AT_ORG,
    _EVERY_CHAT,
    _GENERAL,
    _HEDGE,
    _INSTEAD,
    _KINDS,
    _LEAD,
    _NEGATED,
    _NOTE_FACT,
    _QUESTION_START,
    _RULES,
    _SENT_SPLIT,
    _STYLE,
    _THIS_CHAT,
    _TRAILERS,
    _VALUE_LEAD,
    _WORD,
    _YOU_SHOULD,
    _Rule,
)
from memd.engine.learning.extract.values import (
    _follows_name,
    _keyed,
    _noun_key,
    _order,
    _plausible,
    _read,
    _read_value,
    _third_person,
    _third_verb,
)
from memd.engine.learning.extract.vocab import (
    _ABBREVIATIONS,
    _BARE_VERBS,
    _CLAUSE_CUT,
    _CLAUSE_STOPS,
    _CUT,
    _DETERMINERS,
    _IDENTITY_KEYS,
    _NOT_FAVORITES,
    _NOT_ORDERS,
    _REFERENCES,
    _STRICT_STOPS,
    _TEAM_MODALS,
    _VAGUE,
    _VOCAB,
)
from memd.types import Provenance, Scope, Tier


@dataclass(frozen=True, slots=True)
class _Hit:
    kind: str
    text: str
    confidence: float
    key: str | None = None
    value: str = ""
    category: str = ""
    corrected: bool = False
    importance: float | None = None


@dataclass(frozen=True, slots=True)
class _Markers:
    correction: bool = False
    from_now_on: bool = False
    remember: bool = False
    hedged: bool = False

    def merged(self, other: _Markers) -> _Markers:
        return _Markers(self.correction or other.correction,
                        self.from_now_on or other.from_now_on,
                        self.remember or other.remember, self.hedged or other.hedged)


# -- splitting ---------------------------------------------------------------------------
def _prose_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` outside fenced and indented code and quotes; a blank line
    comes as "" (it ends a paragraph)."""
    for i, part in enumerate(text.split("```")):
        if i % 2:  # inside a fence; an unclosed one runs to the end
            continue
        for line in part.splitlines():
            if line.startswith(("    ", "\t")) or line.lstrip().startswith(">"):
                continue
            yield line if line.strip() else ""  # "": a paragraph ends


def _sentences(line: str) -> Iterator[str]:
    """Slices of ``line`` cut after ``. ! ? ;`` (not after "Dr." or "e.g.")."""
    start = 0
    for m in _SENT_SPLIT.finditer(line):
        words = line[start:m.start()].rsplit(None, 1)
        if words and words[-1].lower() in _ABBREVIATIONS:
            continue
        if line[start:m.start()].strip():
            yield line[start:m.start()].strip()
        start = m.end()
    if line[start:].strip():
        yield line[start:].strip()


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t\"'”’)]*_~!.").endswith("?")


def _strip_markers(clause: str) -> tuple[str, _Markers]:
    """The clause without its opening and closing markers, and what they said."""
    corr = fnow = rem = hedge = False
    body = clause
    for _ in range(6):
        m = _LEAD.match(body)
        if m is None or m.end() == 0:
            break
        corr |= bool(m.group("corr") or m.group("corr2"))
        fnow |= bool(m.group("fnow"))
        rem |= bool(m.group("rem"))
        hedge |= bool(m.group("hedge"))
        body = body[m.end():]
    for _ in range(3):
        body = body.rstrip(" \t,;:.!-")
        low = body[-14:].lower()
        for tail, mark in _TRAILERS:
            cut = len(body) - len(tail)
            if low.endswith(tail) and (cut == 0 or not body[cut - 1].isalnum()):
                body = body[:cut]
                corr |= mark == "corr"
                fnow |= mark == "fnow"
                break
        else:
            break
    body = body.strip()
    corr |= fnow or bool(_INSTEAD.search(body))
    hedge |= bool(_HEDGE.search(body))
    return body, _Markers(corr, fnow, rem, hedge)


# -- one clause --------------------------------------------------------------------------
def _clause_hits(clause: str, body: str, marks: _Markers) -> list[_Hit]:
    if len(clause) > MAX_CLAUSE_CHARS or len(_WORD.findall(clause)) < MIN_CLAUSE_WORDS:
        return []
    if _QUESTION_START.match(body):
        return []
    for rule in _RULES:
        m = rule.regex.match(body)
        if m is not None:
            hits = _apply(rule, body, m)
            if hits:
                return hits
    fallback = _fallback(body, marks)
    return [fallback] if fallback else []


def _fallback(body: str, marks: _Markers) -> _Hit | None:
    """A standing order or a request to remember that no rule understood."""
    if not (marks.from_now_on or marks.remember):
        return None
    you = _YOU_SHOULD.match(body)
    if you is not None:
        body = body[you.end():]
    if marks.remember and body[:3].lower() == "to ":
        value, _ = _read(body[3:], _CLAUSE_STOPS, 25, _CLAUSE_CUT)
        if _ADVICE.search(value):
            return None
        return _Hit("instruction", f"User wants the assistant to {_order(value)}", 0.9)
    if marks.remember:
        return _remembered(body)
    value, _ = _read(body, _CLAUSE_STOPS, 25, _CLAUSE_CUT)
    words = _WORD.findall(value)
    if not words or _ADVICE.search(value):
        return None
    if words[0].lower() in _NOT_ORDERS:
        return None  # "in the future, the technology will ...": not an order
    return _Hit("instruction", f"User wants the assistant to {_order(value)} from now on",
                0.9)


def _remembered(body: str) -> _Hit | None:
    """What the user asked to be remembered, in their words ("Remember this for later:
    the staging host is staging.rocket.internal" keeps "the staging host is
    staging.rocket.internal"), and the fact it states when it reads "the <thing> is
    <value>" (``note/staging_host``)."""
    if len(_WORD.findall(body)) < 2:
        return None
    said = _third_person(body)
    if body[:2].lower() == "i ":  # "I have a meeting on Friday"
        said = f"User {_third_verb(_third_person(body[2:]))}"
    m = _NOTE_FACT.fullmatch(body)
    if m is None or len(_WORD.findall(m.group("v"))) > 8:
        return _Hit("note", said, 0.9)
    key = "_".join(_WORD.findall(m.group("noun").lower()))
    return _Hit("note", said, 0.9, key, m.group("v"), "note")


def _apply(rule: _Rule, body: str, m: re.Match[str]) -> list[_Hit]:
    """What ``rule`` makes of ``body`` given its lead-in match ``m``; [] if it does not fit."""
    value, after, corrected, negated = _value_of(rule, body, m)
    if not _fits(rule, value, after, negated):
        return []
    groups = {k: " ".join(g.split()).lower() for k, g in m.groupdict().items() if g and k != "v"}
    keyed = _fact_of(rule, value, groups.get("noun", ""), bool(groups.get("fav")), negated,
                     lower=not any(c.isupper() for c in body))
    if keyed is None:
        return []
    key, fact_value = keyed
    category = rule.category or ("identity" if key in _IDENTITY_KEYS else "preference")
    kind = rule.kind if rule.kind != "auto" else (
        "identity" if category == "identity" else "preference")
    shown = _order(value) if rule.kind == "instruction" else _third_person(value)
    modal = groups.get("modal", "").replace("’", "'")
    fields = {"noun": "team", **groups,  # a "we" with no noun: the user's team
              "adv": groups.get("adv", ""), "fav": groups.get("fav", ""),
              "verb3": _third_verb(groups.get("verb", "")),
              "who": "User's team" if groups.get("who") == "we" else "User",
              "modal": _TEAM_MODALS.get(modal, modal), "v": shown, "v3": _third_verb(shown)}
    text = rule.template.format_map(fields)
    hits = [_Hit(kind, text, rule.confidence, key, fact_value, category,
                 corrected or rule.corrects, rule.importance)]
    at = _AT_ORG.match(after) if rule.read == "role" else None
    if at is not None:  # "I'm a developer at Acme"
        org, _ = _read(after[at.end():], _STRICT_STOPS, 5, _CUT)
        if org[:1].isupper() and not is_tech(org):
            hits.append(_Hit("identity", f"User works at {org}", 0.8, "employer", org,
                             "identity", corrected))
    return hits


def _value_of(rule: _Rule, body: str, m: re.Match[str]) -> tuple[str, str, bool, bool]:
    """The value after the lead-in, the text after the value, whether the value corrects
    ("actually X", "not X but Y") and whether it is negated ("not X")."""
    if m.groupdict().get("v"):
        return m.group("v"), body[m.end():], False, False
    rest = body[m.end():]
    corrected = False
    lead = _VALUE_LEAD.match(rest)
    if lead is not None:
        corrected = bool(lead.group("actually") or lead.group("notbut"))
        rest = rest[lead.end():]
    negated = bool(_NEGATED.match(rest))
    if negated and rule.read != "clause":  # "my name is not ..."
        return "", "", False, True
    value, end = _read_value(rule.read, rest, not any(c.isupper() for c in body))
    return value, rest[end:], corrected, negated


def _fits(rule: _Rule, value: str, after: str, negated: bool) -> bool:
    words = [w.lower() for w in _WORD.findall(value)]
    if not words or words[0] in rule.block or (negated and len(words) < 2):
        return False
    if rule.kind == "instruction" and _ADVICE.search(value):
        return False
    if len(words) == 1 and words[0] in _BARE_VERBS:  # "don't be so robotic": "be"
        return False
    if rule.kind in ("preference", "fact", "auto") and words[0] in _VAGUE:
        return False  # "I like it", "I use this"
    if rule.kind == "preference" and words[0] in _DETERMINERS and _REFERENCES & set(words):
        return False  # "I prefer the second option": about this chat, not the user
    if rule.read == "proper_name" or (rule.read.endswith("name") and value[:1].islower()):
        return _follows_name(after)
    return True


def _fact_of(rule: _Rule, value: str, noun: str, favorite: bool, negated: bool, *,
             lower: bool) -> tuple[str | None, str] | None:
    """The fact key and value of a match, (None, "") for a memory with no fact, or None
    when the rule does not apply after all."""
    key = rule.key
    if negated:
        return (None, "") if key in (None, "*") and rule.need is None else None
    if key == "*":
        keyed = _keyed(value)
        if rule.need is not None and (keyed is None or rule.need not in ("*", keyed[0])):
            return None
        return keyed or (None, "")
    if key == "@noun":
        key = None if noun in _NOT_FAVORITES else _noun_key(noun, favorite)
        if key is None or (key in _VOCAB and not value[:1].isupper()
                           and all(t.kind != key for t in scan_terms(value))):
            return None  # "my editor is broken"
    if key is not None and not _plausible(key, value, lower):
        return None
    return key, value


def _finish(hit: _Hit, marks: _Markers, clause: str, renamed: bool) -> Extraction:
    provenance, tier, importance = _KINDS[hit.kind]
    if hit.importance is not None:
        importance = hit.importance
    confidence = hit.confidence
    is_correction = renamed or hit.corrected or marks.correction
    if is_correction:
        provenance = Provenance.CORRECTION
        importance = max(importance, 0.9)
    if marks.remember:
        importance = min(1.0, importance + 0.1)
    if marks.hedged:
        confidence = min(confidence, HEDGED_CONFIDENCE)
    fact = None
    if hit.key is not None and hit.value:
        fact = ExtractedFact(hit.category, hit.key, hit.value, confidence)
    text = " ".join(hit.text.split())
    if hit.kind == "instruction" and marks.from_now_on and not text.endswith("from now on"):
        text += " from now on"
    scope = Scope.GLOBAL
    if hit.kind == "instruction" and not _standing(clause, marks):
        scope, tier = Scope.LOCAL, Tier.SESSION
    style = hit.kind in ("instruction", "preference") and bool(_STYLE.search(clause))
    return Extraction(text, provenance, tier, round(importance, 3), confidence,
                      text_entities(clause), fact, is_correction, scope,
                      (STYLE_TAG,) if style else ())


def _standing(clause: str, marks: _Markers) -> bool:
    """Whether an instruction is said to hold beyond this conversation: "in all our
    chats" always is; "always", "never" and "from now on" are unless the words bind it
    to this conversation ("stay in character", "here"); a plain order ("use tabs") is
    not."""
    if _EVERY_CHAT.search(clause):
        return True
    general = marks.from_now_on or bool(_GENERAL.search(clause))
    return general and not _THIS_CHAT.search(clause)
