"""Inline, rules-based extraction of memories and facts from a user message.

It runs synchronously on every user message (docs/design.md, "Inline extraction"), so
it has no model and no I/O. It would rather miss a fact than invent one.

1. **What is read.** Fenced code (an unclosed fence hides the rest of the message), quoted
   lines (``> ...``) and indented code are skipped. The rest is cut into sentences at
   ``. ! ? ;`` and line ends, and each sentence into clauses at a comma or a conjunction
   (and, but, so, because, ...) followed by a new subject (I, my, we, our) or an order
   (always, never, don't, please, call me). A sentence ending in ``?``, a clause opening
   with an interrogative ("what", "do you", "can", "I wonder"), a sentence opening with
   a quotation mark (someone else's words) and a clause under 3 words or over 300
   characters yield nothing. A clause joined by "and" or "but" that opens with its verb
   ("... and don't have a car") has the subject of the one before: after "I ..." it is
   the user's statement, and it is an order only after an order.
2. **Markers.** A clause may open with a correction ("actually", "no,", "correction:",
   "I meant"), a standing order ("from now on", "going forward"), a request to remember
   ("remember that", "keep in mind"), a hedge ("I think", "maybe") or filler ("so", "btw");
   these are peeled off and noted. A correction is also: a sentence that is only "No."
   (it marks the next one), "instead" (not "instead of"), "actually" before the value,
   "not X but Y", "I switched to X", and a second name in one message ("... call me Al").
3. **Rules.** The first rule in ``RULES`` whose lead-in matches the start of the clause
   wins: identity ("my name is", "call me", "I'm <Name>", "I work at", "I'm a <role>",
   "I live in", "I moved to", "my pronouns are", "my timezone is"), constraints ("I'm
   allergic to", "I don't eat", "I can't", "I never", "we must"), preferences ("I prefer X
   over Y", "I'd rather", "I like", "I hate", "I use X for Y", "I switched to", "I'm on
   <OS>", "my favorite X is Y"), facts about the user's work ("I deploy with", "we use",
   "our stack is", "we are a", "we sell", "located in", "my project is") and instructions
   to the assistant ("always", "never", "don't", "stop ...ing", "from now on ...",
   "remember to").
4. **Grounding.** A fact's value is always a slice of the message: the words after the
   lead-in up to a stop word or punctuation, or, for tool/language/editor/OS/style
   preferences, the term(s) a built-in vocabulary recognises, which also name the key:
   "I prefer tabs over spaces" is ``preference/indentation = tabs``. The memory text is a
   third-person sentence that keeps the user's words ("User prefers tabs over spaces").
5. **Scores.** Confidence comes from the rule ("my name is" 1.0, "call me" 0.9, "I'm
   <Name>" 0.8, "I like" 0.8); a hedge caps it at 0.6. A correction keeps the fact's key,
   has provenance CORRECTION and importance at least 0.9; the fact store lets it replace a
   value of higher confidence.

The package: ``results`` (the result types), ``vocab`` (vocabulary and word tables),
``rules`` (the regexes and the rule table), ``clauses`` (splitting a message and reading
one clause), ``values`` (reading a value and wording the memory), ``entities`` (finding
terms and names). This module holds the public API.
"""

from __future__ import annotations

from collections.abc import Iterator

from memd.engine.learning.extract.clauses import (
    Hit,
    Markers,
    clause_hits,
    finish,
    is_question,
    prose_lines,
    sentences_of,
    strip_markers,
)
from memd.engine.learning.extract.entities import scan_terms
from memd.engine.learning.extract.results import (
    CATEGORIES,
    HEDGED_CONFIDENCE,
    MAX_CLAUSE_CHARS,
    MIN_CLAUSE_WORDS,
    STYLE_TAG,
    ExtractedFact,
    Extraction,
)
from memd.engine.learning.extract.rules import (
    CLAUSE_SPLIT,
    ELIDED,
    PROMPT_OPENING,
    REMEMBER_THAT,
    SUBJECT_WORD,
    WORD,
)
from memd.engine.learning.extract.vocab import EDGE, NOT_ORDERS

__all__ = ["CATEGORIES", "HEDGED_CONFIDENCE", "MAX_CLAUSE_CHARS", "MIN_CLAUSE_WORDS",
           "STYLE_TAG", "ExtractedFact", "Extraction", "extract", "extract_entities"]


def extract(text: str) -> list[Extraction]:
    """The memories and facts stated in one user message, in order of appearance.

    Pure and deterministic; never raises on any string. Questions, code and small talk
    give ``[]``."""
    out: list[Extraction] = []
    seen: set[tuple[str, ExtractedFact | None]] = set()
    named = False  # a name was already given: another one corrects it
    carry = Markers()  # markers said on their own ("No." or "Actually, ...")
    pasted = False  # in a paragraph of a prompt the user pasted ("You are a ...")
    for line in prose_lines(text):
        pasted = bool(line) and (pasted or bool(PROMPT_OPENING.match(line)))
        missed: tuple[str, str, Markers] | None = None  # the clause before, if no hit
        for sentence in sentences_of(line):
            if is_question(sentence):
                carry, missed = Markers(), None
                continue
            # a sentence in quotes is someone else's words ("'I'm Lirien,' she says"),
            # and so are the orders of a prompt the user pasted
            quoted = sentence[:1] in "\"“‘'"
            before: tuple[str, bool] | None = None  # the clause before: subject, order?
            for clause, joined in _clauses(sentence):
                clause = clause.strip(EDGE)
                body, marks = strip_markers(clause)
                if missed is not None and REMEMBER_THAT.match(clause):
                    # "..., remember that.": the request to remember is said after what
                    # it is about; read that clause again as asked to be remembered
                    clause, body, marks = missed[0], missed[1], missed[2].merged(
                        Markers(remember=True))
                    joined = False
                elif not body:
                    carry = carry.merged(marks)
                    continue
                marks, carry = marks.merged(carry), Markers()
                elided = joined and before is not None and bool(ELIDED.match(body))
                if elided and before and before[0]:  # "I live here and don't drive"
                    body = f"{before[0]} {body}"
                hits = clause_hits(clause, body, marks)
                if elided and before and not before[0] and not before[1]:
                    hits = [h for h in hits if h.kind != "instruction"]
                before = _subject(body, hits)
                missed = None if hits else (clause, body, marks)
                for hit in hits:
                    if quoted or (pasted and hit.kind == "instruction"):
                        continue
                    renamed = named and hit.key == "name"
                    named = named or hit.key == "name"
                    ex = finish(hit, marks, clause, renamed)
                    if (ex.text, ex.fact) not in seen:
                        seen.add((ex.text, ex.fact))
                        out.append(ex)
    return out


_AND = frozenset("and but plus also although though while whereas".split())


def _clauses(sentence: str) -> Iterator[tuple[str, bool]]:
    """The clauses of ``sentence``, each with whether "and", "but" or the like joins it to
    the one before ("..., but don't ..."); after "so" a clause is its own ("I'll send the
    rest, so don't summarize yet")."""
    start, joined = 0, False
    for m in CLAUSE_SPLIT.finditer(sentence):
        yield sentence[start:m.start()], joined
        word = WORD.search(m.group())
        start, joined = m.end(), word is not None and word.group().lower() in _AND
    yield sentence[start:], joined


def _subject(body: str, hits: list[Hit]) -> tuple[str, bool]:
    """Who a clause is about, for a clause after it that leaves its subject out: "I" or
    "we" (else ""), and whether it is an order (read as one, or opening with a verb)."""
    said = SUBJECT_WORD.match(body)
    first = body.split(None, 1)[0].lower()
    order = any(h.kind == "instruction" for h in hits) or not (
        said or first in NOT_ORDERS or first.endswith(("'s", "’s")))
    return (said.group("s") if said else "", order)


def extract_entities(text: str) -> tuple[str, ...]:
    """Lowercase entity names in ``text`` (outside code): known tech terms (canonical:
    "k8s" is "kubernetes"), runs of capitalised words ("new york") and hashtags; sorted."""
    names = {term.name for line in prose_lines(text) for term in scan_terms(line)}
    return tuple(sorted(names))
