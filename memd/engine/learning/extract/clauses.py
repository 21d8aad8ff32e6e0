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
    ADVICE,
    AT_ORG,
    EVERY_CHAT,
    GENERAL,
    HEDGE,
    INSTEAD,
    KINDS,
    LEAD,
    NEGATED,
    NOTE_FACT,
    QUESTION_START,
    REMEMBER_TRAIL,
    RULES,
    SENT_SPLIT,
    STYLE,
    THIS_CHAT,
    TRAILERS,
    VALUE_LEAD,
    WORD,
    YOU_SHOULD,
    Rule,
)
from memd.engine.learning.extract.values import (
    follows_name,
    keyed_fact,
    noun_key,
    plausible,
    read_value,
    read_words,
    third_person,
    third_person_order,
    third_verb,
)
from memd.engine.learning.extract.vocab import (
    ABBREVIATIONS,
    BARE_VERBS,
    CLAUSE_CUT,
    CLAUSE_STOPS,
    CUT,
    DETERMINERS,
    IDENTITY_KEYS,
    NOT_FAVORITES,
    NOT_ORDERS,
    REFERENCES,
    STRICT_STOPS,
    TEAM_MODALS,
    VAGUE,
    VOCAB,
)
from memd.types import Provenance, Scope, Tier


@dataclass(frozen=True, slots=True)
class Hit:
    kind: str
    text: str
    confidence: float
    key: str | None = None
    value: str = ""
    category: str = ""
    corrected: bool = False
    importance: float | None = None


@dataclass(frozen=True, slots=True)
class Markers:
    correction: bool = False
    from_now_on: bool = False
    remember: bool = False
    hedged: bool = False

    def merged(self, other: Markers) -> Markers:
        return Markers(self.correction or other.correction,
                        self.from_now_on or other.from_now_on,
                        self.remember or other.remember, self.hedged or other.hedged)


# -- splitting ---------------------------------------------------------------------------
def prose_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` outside fenced and indented code and quotes; a blank line
    comes as "" (it ends a paragraph)."""
    for i, part in enumerate(text.split("```")):
        if i % 2:  # inside a fence; an unclosed one runs to the end
            continue
        for line in part.splitlines():
            if line.startswith(("    ", "\t")) or line.lstrip().startswith(">"):
                continue
            yield line if line.strip() else ""  # "": a paragraph ends


def sentences_of(line: str) -> Iterator[str]:
    """Slices of ``line`` cut after ``. ! ? ;`` (not after "Dr." or "e.g.")."""
    start = 0
    for m in SENT_SPLIT.finditer(line):
        words = line[start:m.start()].rsplit(None, 1)
        if words and words[-1].lower() in ABBREVIATIONS:
            continue
        if line[start:m.start()].strip():
            yield line[start:m.start()].strip()
        start = m.end()
    if line[start:].strip():
        yield line[start:].strip()


def is_question(sentence: str) -> bool:
    return sentence.rstrip(" \t\"'”’)]*_~!.").endswith("?")


def strip_markers(clause: str) -> tuple[str, Markers]:
    """The clause without its opening and closing markers, and what they said."""
    corr = fnow = rem = hedge = False
    body = clause
    for _ in range(6):
        m = LEAD.match(body)
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
        for tail, mark in TRAILERS:
            cut = len(body) - len(tail)
            if low.endswith(tail) and (cut == 0 or not body[cut - 1].isalnum()):
                body = body[:cut]
                corr |= mark == "corr"
                fnow |= mark == "fnow"
                break
        else:
            break
    trail = REMEMBER_TRAIL.search(body)
    if trail is not None and trail.start() > 0:
        body, rem = body[:trail.start()], True
    body = body.strip()
    corr |= fnow or bool(INSTEAD.search(body))
    hedge |= bool(HEDGE.search(body))
    return body, Markers(corr, fnow, rem, hedge)


# -- one clause --------------------------------------------------------------------------
def clause_hits(clause: str, body: str, marks: Markers) -> list[Hit]:
    if len(clause) > MAX_CLAUSE_CHARS or len(WORD.findall(clause)) < MIN_CLAUSE_WORDS:
        return []
    if QUESTION_START.match(body):
        return []
    for rule in RULES:
        m = rule.regex.match(body)
        if m is not None:
            hits = _apply(rule, body, m)
            if hits:
                return hits
    fallback = _fallback(body, marks)
    return [fallback] if fallback else []


def _fallback(body: str, marks: Markers) -> Hit | None:
    """A standing order or a request to remember that no rule understood."""
    if not (marks.from_now_on or marks.remember):
        return None
    you = YOU_SHOULD.match(body)
    if you is not None:
        body = body[you.end():]
    if marks.remember and body[:3].lower() == "to ":
        value, _ = read_words(body[3:], CLAUSE_STOPS, 25, CLAUSE_CUT)
        if ADVICE.search(value):
            return None
        return Hit("instruction", f"User wants the assistant to {third_person_order(value)}", 0.9)
    if marks.remember:
        return _remembered(body)
    value, _ = read_words(body, CLAUSE_STOPS, 25, CLAUSE_CUT)
    words = WORD.findall(value)
    if not words or ADVICE.search(value):
        return None
    if words[0].lower() in NOT_ORDERS:
        return None  # "in the future, the technology will ...": not an order
    order = third_person_order(value)
    return Hit("instruction", f"User wants the assistant to {order} from now on", 0.9)


def _remembered(body: str) -> Hit | None:
    """What the user asked to be remembered, in their words ("Remember this for later:
    the staging host is staging.rocket.internal" keeps "the staging host is
    staging.rocket.internal"), and the fact it states when it reads "the <thing> is
    <value>" (``note/staging_host``)."""
    if len(WORD.findall(body)) < 2:
        return None
    said = third_person(body)
    if body[:2].lower() == "i ":  # "I have a meeting on Friday"
        said = f"User {third_verb(third_person(body[2:]))}"
    m = NOTE_FACT.fullmatch(body)
    if m is None or len(WORD.findall(m.group("v"))) > 8:
        return Hit("note", said, 0.9)
    key = "_".join(WORD.findall(m.group("noun").lower()))
    return Hit("note", said, 0.9, key, m.group("v"), "note")


def _apply(rule: Rule, body: str, m: re.Match[str]) -> list[Hit]:
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
    category = rule.category or ("identity" if key in IDENTITY_KEYS else "preference")
    kind = rule.kind if rule.kind != "auto" else (
        "identity" if category == "identity" else "preference")
    shown = third_person_order(value) if rule.kind == "instruction" else third_person(value)
    modal = groups.get("modal", "").replace("’", "'")
    fields = {"noun": "team", **groups,  # a "we" with no noun: the user's team
              "adv": groups.get("adv", ""), "fav": groups.get("fav", ""),
              "verb3": third_verb(groups.get("verb", "")),
              "who": "User's team" if groups.get("who") == "we" else "User",
              "modal": TEAM_MODALS.get(modal, modal), "v": shown, "v3": third_verb(shown)}
    text = rule.template.format_map(fields)
    hits = [Hit(kind, text, rule.confidence, key, fact_value, category,
                 corrected or rule.corrects, rule.importance)]
    at = AT_ORG.match(after) if rule.read == "role" else None
    if at is not None:  # "I'm a developer at Acme"
        org, _ = read_words(after[at.end():], STRICT_STOPS, 5, CUT)
        if org[:1].isupper() and not is_tech(org):
            hits.append(Hit("identity", f"User works at {org}", 0.8, "employer", org,
                             "identity", corrected))
    return hits


def _value_of(rule: Rule, body: str, m: re.Match[str]) -> tuple[str, str, bool, bool]:
    """The value after the lead-in, the text after the value, whether the value corrects
    ("actually X", "not X but Y") and whether it is negated ("not X")."""
    if m.groupdict().get("v"):
        return m.group("v"), body[m.end():], False, False
    rest = body[m.end():]
    corrected = False
    lead = VALUE_LEAD.match(rest)
    if lead is not None:
        corrected = bool(lead.group("actually") or lead.group("notbut"))
        rest = rest[lead.end():]
    negated = bool(NEGATED.match(rest))
    if negated and rule.read != "clause":  # "my name is not ..."
        return "", "", False, True
    value, end = read_value(rule.read, rest, not any(c.isupper() for c in body))
    return value, rest[end:], corrected, negated


def _fits(rule: Rule, value: str, after: str, negated: bool) -> bool:
    words = [w.lower() for w in WORD.findall(value)]
    if not words or words[0] in rule.block or (negated and len(words) < 2):
        return False
    if rule.kind == "instruction" and ADVICE.search(value):
        return False
    if len(words) == 1 and words[0] in BARE_VERBS:  # "don't be so robotic": "be"
        return False
    if rule.kind in ("preference", "fact", "auto") and words[0] in VAGUE:
        return False  # "I like it", "I use this"
    if rule.kind == "preference" and words[0] in DETERMINERS and REFERENCES & set(words):
        return False  # "I prefer the second option": about this chat, not the user
    if rule.read == "proper_name" or (rule.read.endswith("name") and value[:1].islower()):
        return follows_name(after)
    return True


def _fact_of(rule: Rule, value: str, noun: str, favorite: bool, negated: bool, *,
             lower: bool) -> tuple[str | None, str] | None:
    """The fact key and value of a match, (None, "") for a memory with no fact, or None
    when the rule does not apply after all."""
    key = rule.key
    if negated:
        return (None, "") if key in (None, "*") and rule.need is None else None
    if key == "*":
        keyed = keyed_fact(value)
        if rule.need is not None and (keyed is None or rule.need not in ("*", keyed[0])):
            return None
        return keyed or (None, "")
    if key == "@noun":
        key = None if noun in NOT_FAVORITES else noun_key(noun, favorite)
        if key is None or (key in VOCAB and not value[:1].isupper()
                           and all(t.kind != key for t in scan_terms(value))):
            return None  # "my editor is broken"
    if key is not None and not plausible(key, value, lower):
        return None
    return key, value


def finish(hit: Hit, marks: Markers, clause: str, renamed: bool) -> Extraction:
    provenance, tier, importance = KINDS[hit.kind]
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
    style = hit.kind in ("instruction", "preference") and bool(STYLE.search(clause))
    return Extraction(text, provenance, tier, round(importance, 3), confidence,
                      text_entities(clause), fact, is_correction, scope,
                      (STYLE_TAG,) if style else ())


def _standing(clause: str, marks: Markers) -> bool:
    """Whether an instruction is said to hold beyond this conversation: "in all our
    chats" always is; "always", "never" and "from now on" are unless the words bind it
    to this conversation ("stay in character", "here"); a plain order ("use tabs") is
    not."""
    if EVERY_CHAT.search(clause):
        return True
    general = marks.from_now_on or bool(GENERAL.search(clause))
    return general and not THIS_CHAT.search(clause)
