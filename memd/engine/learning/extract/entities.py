"""Entities: vocabulary terms, runs of capitalised words and hashtags in a text.

Used both for the entities of each memory and to recognise tech terms inside values
(``scan_terms``, ``is_tech``); it needs only the word lists and one pattern, so the value
readers and the clause code can both build on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from memd.engine.learning.extract.rules import TOKEN
from memd.engine.learning.extract.vocab import CAP_STOP, CAPITALIZED_ONLY, TERMS, TITLES


@dataclass(frozen=True, slots=True)
class _Tok:
    start: int
    end: int
    word: str  # without edge punctuation or a possessive 's
    initial: bool  # first word of a sentence


@dataclass(frozen=True, slots=True)
class _Term:
    start: int
    end: int
    name: str  # canonical, lowercase
    kind: str  # vocabulary kind; "" for a proper noun or hashtag


def _tokens(s: str) -> list[_Tok]:
    toks: list[_Tok] = []
    initial, last = True, 0
    for m in TOKEN.finditer(s):
        if any(c in ".!?:\n" for c in s[last:m.start()]):
            initial = True
        raw = m.group()
        lead = 0 if raw[:4].lower() == ".net" else len(raw) - len(raw.lstrip(".'’-"))
        word = raw[lead:].rstrip(".'’-")
        if word[-2:].lower() in ("'s", "’s"):
            word = word[:-2]
        if word:
            start = m.start() + lead
            toks.append(_Tok(start, start + len(word), word, initial))
            initial = False
        initial = initial or (raw[-1] in ".!?" and word.lower() not in TITLES)
        last = m.end()
    return toks


def scan_terms(s: str) -> list[_Term]:
    """Vocabulary terms, capitalised runs and hashtags in ``s``, in order."""
    toks = _tokens(s)
    out: list[_Term] = []
    i = 0
    while i < len(toks):
        found = _lookup(s, toks, i)
        if found is not None:
            out.append(found[0])
            i += found[1]
            continue
        tok = toks[i]
        if tok.word[0] == "#":
            tag = tok.word[1:].lower()
            if tag[:1].isalnum() or tag[:1] == "_":
                canon = TERMS.get(tag)
                out.append(_Term(tok.start, tok.end, canon[0] if canon else tag,
                                 canon[1] if canon else ""))
            i += 1
            continue
        j = i
        while (j < len(toks) and j - i < 4 and _proper(toks[j])
               and (j == i or (s[toks[j - 1].end:toks[j].start].isspace()
                               and _lookup(s, toks, j) is None))):
            j += 1
        if j > i and (not tok.initial or j - i > 1):
            name = " ".join(t.word.lower() for t in toks[i:j])
            out.append(_Term(tok.start, toks[j - 1].end, name, ""))
            i = j
        else:
            i += 1
    return out


def _lookup(s: str, toks: list[_Tok], i: int) -> tuple[_Term, int] | None:
    """The vocabulary term of up to three words starting at token ``i``."""
    for n in (3, 2, 1):
        if i + n > len(toks):
            continue
        if n > 1 and not all(s[toks[k].end:toks[k + 1].start].isspace()
                             for k in range(i, i + n - 1)):
            continue
        surface = " ".join(t.word.lower() for t in toks[i:i + n])
        hit = TERMS.get(surface)
        if hit is None:
            continue
        if n == 1 and surface in CAPITALIZED_ONLY and not toks[i].word[0].isupper():
            return None
        return _Term(toks[i].start, toks[i + n - 1].end, hit[0], hit[1]), n
    return None


def _proper(tok: _Tok) -> bool:
    w = tok.word
    return w[0].isupper() and w.lower() not in CAP_STOP and any(c.isalpha() for c in w)


def is_tech(word: str) -> bool:
    low = word.lower()
    return low in TERMS and low not in CAPITALIZED_ONLY


def text_entities(text: str) -> tuple[str, ...]:
    return tuple(sorted({t.name for t in scan_terms(text)}))
