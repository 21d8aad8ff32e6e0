"""Reading a fact's value from the words after a rule's lead-in, and wording the memory.

A value is always a slice of the message (names, roles, short lists, clauses), and the
memory text is the user's words in the third person; both live here, apart from the
rules that decide which reading applies.
"""

from __future__ import annotations

from memd.engine.learning.extract.entities import is_tech, scan_terms
from memd.engine.learning.extract.rules import (
    COMPARATOR,
    FLAGS,
    NAME_WORD,
    THIRD_PERSON,
    VERSION,
    WORD,
    WS_TOKEN,
)
from memd.engine.learning.extract.vocab import (
    CLAUSE_CUT,
    CLAUSE_STOPS,
    CUT,
    DETERMINERS,
    IRREGULAR,
    KEYLESS,
    LIST_STOPS,
    MODALS,
    NAME_FOLLOWERS,
    NOT_NAMES,
    NOT_PLACES,
    NOT_ROLES,
    NOUN_KEYS,
    PRONOUNS,
    ROLE_NOUNS,
    ROLE_STOPS,
    STRICT_STOPS,
    TITLES,
)


# -- reading values ----------------------------------------------------------------------
def read_value(mode: str, rest: str, lower: bool) -> tuple[str, int]:
    """The value at the head of ``rest`` and where it ends."""
    if mode == "loose_name":
        return _read_name(rest, lowercase_ok=True)
    if mode == "name":
        return _read_name(rest, lowercase_ok=lower)
    if mode == "proper_name":
        return _read_name(rest, lowercase_ok=False)
    if mode == "clause":
        return read_words(rest, CLAUSE_STOPS, 25, CLAUSE_CUT)
    if mode == "role":
        value, end = read_words(rest, ROLE_STOPS, 6, CUT)
        return (value, end) if _is_role(value) else ("", 0)
    stops, most = {"short": (LIST_STOPS, 4), "list": (LIST_STOPS, 8)}.get(
        mode, (STRICT_STOPS, 6))
    return read_words(rest, stops, most, CUT)


def read_words(s: str, stops: frozenset[str], most: int, cut: str) -> tuple[str, int]:
    """Words at the head of ``s`` up to a stop word (not the first), a word followed by
    one of ``cut`` (included) or ``most`` words: the slice of ``s`` and its end."""
    start = end = 0
    for i, m in enumerate(WS_TOKEN.finditer(s)):
        token = m.group()
        body = token.lstrip("\"'“‘([")
        word = body.rstrip(".,;:!?)]}\"'”’")
        if not word.strip("-–—") or (i and word.lower() in stops):
            break
        offset = m.start() + len(token) - len(body)
        if i == 0:
            start = offset
        end = offset + len(word)
        if i + 1 >= most or any(c in cut for c in body[len(word):]):
            break
    return s[start:end], end


def _read_name(s: str, *, lowercase_ok: bool) -> tuple[str, int]:
    """One to three name-like words: capitalised, or a lowercase first one if allowed."""
    start = end = 0
    for i, m in enumerate(WS_TOKEN.finditer(s)):
        token = m.group()
        word = token.rstrip(".,;:!?)\"'”’")
        ok = bool(NAME_WORD.fullmatch(word)) and word.lower() not in NOT_NAMES
        ok = ok and not is_tech(word)
        if ok and not word[0].isupper():
            ok = i == 0 and lowercase_ok
        if ok and len(word) > 1 and word.isupper() and not lowercase_ok:
            ok = False  # "I'M TIRED"
        if not ok:
            break
        if i == 0:
            start = m.start()
        end = m.start() + len(word)
        if i == 2 or (len(word) < len(token) and word.lower() not in TITLES):
            break
    return ("", 0) if s[start:end].lower() in TITLES else (s[start:end], end)


def follows_name(after: str) -> bool:
    """Whether the words after "I'm <Name>" leave it a name ("I'm Alex from ...")."""
    after = after.lstrip(" \t")
    if not after or not after[0].isalnum():
        return True
    first = after.split(None, 1)[0].lower()
    return first in NAME_FOLLOWERS


def _is_role(value: str) -> bool:
    words = value.lower().split()
    if not words:
        return False
    last = words[-1]
    if last in ROLE_NOUNS:
        return True
    return (len(last) >= 5 and last not in NOT_ROLES and last.isalpha()
            and last.endswith(("er", "or", "ist", "ian", "ant", "ent")))


def plausible(key: str, value: str, lower: bool) -> bool:
    first = value.split(None, 1)[0].lower()
    if key == "timezone":
        return any(c.isupper() or c.isdigit() or c == "/" for c in value)
    if key == "role":
        return _is_role(value)
    if key in ("employer", "location", "company_location"):  # not "I work at night"
        if "same" in value.lower().split():  # "the same area as ...": no place on its own
            return False
        return (value[:1].isupper() or first in DETERMINERS
                or (lower and first not in NOT_NAMES and first not in NOT_PLACES))
    if key == "stack":
        return bool(scan_terms(value))
    return True


def keyed_fact(value: str) -> tuple[str, str] | None:
    """The fact key and value named by the vocabulary terms at the head of ``value``
    (before "over", "for", "than", ...): "Python and Go for scripts" is language."""
    first = WORD.search(value)
    if first is None:
        return None
    cmp = COMPARATOR.search(value, first.end())
    head = value[: cmp.start()] if cmp else value
    terms = [t for t in scan_terms(head) if t.kind]
    if not terms or terms[0].kind in KEYLESS:
        return None
    kind, start, end = terms[0].kind, terms[0].start, terms[0].end
    for t in terms[1:]:  # "Python, Go and Rust"
        if t.kind != kind or head[end:t.start].strip(" ,/&").lower() not in ("", "and", "or"):
            break
        end = t.end
    version = VERSION.match(head, end)
    if version is not None:
        end = version.end() - (len(version.group()) - len(version.group().rstrip(".")))
    detail = FLAGS.match(head, end)
    if detail is not None:  # "pytest with -x": the flags are part of the preference
        end = detail.end()
    before = head[:start].rstrip()
    number = before.rsplit(None, 1)[-1] if before else ""
    if number.isdigit():  # "2 spaces"
        start = len(before) - len(number)
    return kind, head[start:end]


def noun_key(noun: str, favorite: bool) -> str | None:
    key = NOUN_KEYS.get(noun)
    if key is not None or not favorite:
        return key
    slug = "_".join("".join(c for c in w if c.isalnum()) for w in noun.split())
    return f"favorite_{slug}" if slug.strip("_") else None


# -- wording -----------------------------------------------------------------------------
def third_person(text: str) -> str:
    """The user's words as a third party's: "reply to me" -> "reply to the user"."""
    return THIRD_PERSON.sub(
        lambda m: PRONOUNS.get(m.group().lower().replace("’", "'"), m.group()), text)


def third_person_order(text: str) -> str:
    """An order in third person, its sentence-initial capital gone: "Use tabs" -> "use tabs"."""
    if text[:1].isupper() and text[1:2].islower() and not is_tech(text.split(None, 1)[0]):
        text = text[0].lower() + text[1:]
    return third_person(text)


# Present-tense verbs that end in "ed" like a past tense does.
_PRESENT_ED = frozenset({"embed", "shed", "shred", "wed", "bed"})


def _past_tense(word: str) -> bool:
    return (word.endswith("ed") and len(word) > 3 and not word.endswith("eed")
            and word not in _PRESENT_ED)


def third_verb(phrase: str) -> str:
    """The phrase with its verb in the third person: "use tabs" -> "uses tabs"."""
    head, sep, tail = phrase.partition(" ")
    word = head.lower()
    if tail and (word.endswith("ly") or word in ("only", "just", "also", "still", "even")):
        return f"{head}{sep}{third_verb(tail)}"
    if word in MODALS or not word.isalpha():
        new = IRREGULAR.get(word.replace("’", "'"), head)
    elif word in IRREGULAR:
        new = IRREGULAR[word]
    elif _past_tense(word):  # "I never learned" is already the user's, as said
        new = head
    elif word.endswith(("s", "sh", "ch", "x", "z", "o")):
        new = head + "es"
    elif word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        new = head[:-1] + "ies"
    else:
        new = head + "s"
    return f"{new}{sep}{tail}"
