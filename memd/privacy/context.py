"""Credentials found by their context: a value assigned to a credential-like name
(``DB_PASSWORD=...``, ``"api_key": "..."``, ``password: ...``, ``--token ...``), said in
prose ("the staging password is ..."), or sent in an ``Authorization`` header.

Which values count depends on the name. Passwords can be anything, so any literal counts
that is not code (a call, an attribute, a variable), a type, a boolean or a fill-in.
Tokens, secrets and keys must also read as generated (``looks_random``: long, with a
digit, high Shannon entropy); a bare ``key`` needs more (16 characters, 3 bits per
character), so ``"key": "username"`` or a cache key stays, while the same name holding a
random string goes. Names that describe a credential rather than hold one
(``password_min_length``, ``max_tokens``, ``token_url``, ``primary_key``) are skipped.

Prose needs more evidence than code: an unquoted word after "the password is" must have
a digit, a symbol or an inner capital ("is Tr0ub4dor" yes, "is incorrect" no), and so
must a value after ``password:`` that is followed by more words on its line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memd.privacy.rules import (
    CONTEXT_PRIORITY,
    PASSWORD,
    SECRET,
    TOKEN,
    Rule,
    Span,
    looks_random,
)

_VALUE = (
    r"(?:\"(?P<dq>[^\"\n]{1,512})\"|'(?P<sq>[^'\n]{1,512})'|`(?P<bq>[^`\n]{1,512})`"
    r"|\\\"(?P<eq>[^\"\\\n]{1,512})\\\"|(?P<raw>(?:[^\s\"'`\\]|\\(?![nrt\"'\\])){1,512}))"
)
# name ["' or \" or ]] then = : := => with an optional type annotation, or prose, or
# SQL's PASSWORD 'x'
_SEPARATOR = (
    r"(?:\\?[\"'])?\]?"
    r"(?:[ \t]*(?::[ \t]*[a-z_][a-z0-9_.\[\]| ]{0,40}?[ \t]*)?(?P<op>:=|=>|=(?!=)|:(?!:))[ \t]*"
    r"|(?P<prose>[ \t]+(?:(?:for|of|to|on|at|in)[ \t]+(?:\S+[ \t]+){0,3}?)?"
    r"(?:is|was|are|to|(?:changed|set|reset|updated)[ \t]+to)(?:[ \t]+now)?[ \t]*:?[ \t]*)"
    r"|(?P<sql>[ \t]+)(?='))"
)


def _assignment(keywords: str) -> re.Pattern[str]:
    return re.compile(rf"(?P<kw>{keywords})(?P<tail>[a-z0-9_.-]{{0,40}}){_SEPARATOR}{_VALUE}",
                      re.ASCII)


def _flag(keywords: str) -> re.Pattern[str]:
    """``--db-password VALUE`` on a command line (``--password=VALUE`` is an assignment)."""
    return re.compile(rf"--(?:[a-z0-9]+-)*(?P<kw>{keywords})(?P<tail>)[ \t]+(?![-$<])"
                      rf"{_VALUE}", re.ASCII)


# One regex per keyword that starts with a distinct literal: re skips from one occurrence
# of a literal to the next, but tries an alternation at every position.
_PASSWORD_WORDS = ("pass(?:word|wd|phrase|code)?", "pwd?")
_SECRET_WORDS = ("secret", "token", "credentials?", "api(?:key|-key)", "key")

# Spelled out, these may be glued to a prefix (PGPASSWORD, mytoken); short ones may not
# (bypass, monkey).
_GLUE_OK = frozenset("password passwd passphrase secret token apikey".split())
_TAIL_OK = frozenset("s key keys".split())
_TAIL_DENY = frozenset(
    "url uri urls endpoint host length len min max count size limit policy field fields "
    "label prompt file path dir name names type id ids at date time ttl expiry expires "
    "expiration days hint regex pattern rules reset changed required enabled manager "
    "strength input env var header param version mode format provider location source "
    "store storage validator hasher cost rounds algorithm algo scheme stdin error message "
    "msg text placeholder ref reference arn kind bucket usage used budget index column col "
    "table prefix suffix lifetime timeout flag flags vault command cmd help description "
    "ids rotation".split())
_PREFIX_DENY = {
    "password": frozenset("forgot reset show hide toggle check validate verify min max "
                          "require requires use".split()),
    "secret": frozenset("use has".split()),
    "token": frozenset("max min num n total count prompt completion input output cached "
                       "reasoning estimated remaining used reserve context bos eos pad unk "
                       "sep cls mask special stop start end next page continuation sync "
                       "pagination per".split()),
    "key": frozenset("primary foreign sort partition cache hash public pub row range shard "
                     "routing group object idempotency dedup unique composite lookup dict "
                     "map i18n translation message react hot short sign".split()),
}
_VALUE_WORDS = frozenset(
    "none null nil true false undefined yes no on off required optional str string int "
    "integer bool boolean bytes any object self this default env password passwd pass pwd "
    "secret secrets token key apikey api_key credentials hidden masked empty unset na n/a "
    "tbd see is the a an not await new lambda function return if then sensitive secretstr "
    "field environment get value text char varchar uuid input prompt auto dict list "
    "missing incorrect invalid wrong correct set stored saved".split())
# Fill-ins and variables: <...>, {{...}}, ${X}, %s, xxx, ***, our own [KIND_n] placeholders.
_FILL_IN = re.compile(
    r"^(?:<.*>|\[.*\]|\{.*\}|\$.*|%.*|\*+|•+|\.{2,}|…|-+|_+|#+)$"
    r"|your[_ -]?|example|placeholder|redacted|dummy|change[_-]?me|replace[_-]?me|xxx|\*\*\*"
    r"|\.\.\.|…|\{\{",
    re.IGNORECASE)
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w.@-]+(?:/[\w.@-]*)*|[A-Za-z]:\\.*", re.ASCII)
_CODE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z_]\w*_\w*|.*[()\[\]{}<>$].*",
                   re.ASCII)
# what generated keys and tokens are made of: base64, hex, URL-safe characters
_TOKEN = re.compile(r"[A-Za-z0-9+/=_.~-]+", re.ASCII)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", re.ASCII)


def _group(m: re.Match[str], name: str) -> str | None:
    """Group ``name`` of ``m``, None when it did not take part or the pattern has none (a
    command-line flag has no operator)."""
    return m.group(name) if name in m.re.groupindex else None


def _words(name: str) -> set[str]:
    return {w.lower() for w in _WORDS.findall(name)}


def _family(kw: str) -> str:
    kw = kw.lower()
    if kw in ("apikey", "api-key"):
        return "key"
    if kw.startswith("credential"):
        return "secret"
    return kw if kw in ("secret", "token", "key") else "password"


def _name_start(text: str, kw_start: int) -> int:
    start = kw_start
    while start > 0 and text[start - 1] in _NAME_CHARS:
        start -= 1
    return start


def _name_ok(text: str, m: re.Match[str]) -> bool:
    kw_start, kw_end = m.span("kw")
    start = _name_start(text, kw_start)
    prefix, kw, tail = text[start:kw_start], text[kw_start:kw_end], text[kw_end:m.end("tail")]
    last = prefix[-1:]
    if last and last not in "_-." and not last.isdigit() and kw.lower() not in _GLUE_OK \
            and not (last.islower() and kw[0].isupper()):
        return False
    if tail and tail[0] not in "_-." and not tail[0].isdigit() \
            and tail.lower() not in _TAIL_OK and not (tail[0].isupper() and kw[-1].islower()):
        return False
    family = _family(kw)
    return not (_words(tail) & _TAIL_DENY or _words(prefix) & _PREFIX_DENY.get(family, set()))


def _mixed(value: str) -> bool:
    """A digit, a symbol or an inner capital: what a password has and a word has not."""
    return any(c.isdigit() or not c.isalnum() or (i and c.isupper())
               for i, c in enumerate(value))


def _value_span(m: re.Match[str], text: str) -> tuple[str, int, int]:
    group = m.lastgroup or "raw"
    start, end = m.span(group)
    if group == "raw":
        name_start = _name_start(text, m.start("kw"))
        # a query parameter or form field ends at & (tokens never hold one)
        if text[name_start - 1:name_start] in ("?", "&") or _family(m.group("kw")) != "password":
            cut = min((i for i in (text.find("&", start, end), text.find("#", start, end))
                       if i >= 0), default=end)
            end = cut
        trailing = ",;)]}" if _group(m, "op") not in (None, ":") else ",;)]}.!?:"
        while end > start and text[end - 1] in trailing:
            end -= 1
    return group, start, end


def _literal(m: re.Match[str], text: str) -> bool:
    """Whether an unquoted value is a literal rather than maybe a variable: after a
    command-line flag, or ``NAME=value`` with no spaces, as in a .env file, a shell line
    or a query string."""
    if "op" not in m.re.groupindex:
        return True
    op_start, op_end = m.span("op")
    return m.group("op") == "=" and text[op_start - 1] not in " \t" \
        and op_end < len(text) and text[op_end] not in " \t"


def _more_words(text: str, end: int) -> bool:
    """Whether the line goes on with more words after ``end`` (a sentence, not a value)."""
    line_end = text.find("\n", end)
    rest = text[end:line_end if line_end >= 0 else len(text)].strip()
    return bool(rest) and not rest.startswith(("#", "//"))


def _value_ok(m: re.Match[str], text: str, group: str, value: str) -> bool:
    family = _family(m.group("kw"))
    if _FILL_IN.search(value) or value.lower() in _VALUE_WORDS or _PATH.fullmatch(value):
        return False
    quoted = group != "raw"
    prose = _group(m, "prose") is not None
    env = _literal(m, text)
    if not quoted and not env and _CODE.fullmatch(value):
        return False
    if family != "password" and not _TOKEN.fullmatch(value):
        return False
    if family == "key":
        return looks_random(value, min_len=16, min_entropy=3.0)
    if family != "password":
        return looks_random(value, min_len=8, min_entropy=2.5)
    if quoted or env:
        return len(value) >= 3
    loose = prose or _group(m, "op") == ":"
    if loose and (prose or _more_words(text, m.end())) and not _mixed(value):
        return False
    return len(value) >= (6 if prose else 3)


def _locate_assignment(m: re.Match[str], text: str) -> Span | None:
    if _group(m, "sql") is not None and _family(m.group("kw")) != "password":
        return None
    if not _name_ok(text, m):
        return None
    group, start, end = _value_span(m, text)
    return (start, end) if end > start and _value_ok(m, text, group, text[start:end]) else None


def _locate_bearer(m: re.Match[str], text: str) -> Span | None:
    start, end = m.span(1)
    if m.start() > 0 and text[m.start() - 1].isalnum():
        return None
    return (start, end) if looks_random(text[start:end], min_len=16, min_entropy=3.0) else None


def _locate_basic(m: re.Match[str], text: str) -> Span | None:
    start, end = m.span(1)
    return None if _FILL_IN.search(text[start:end]) else (start, end)


def _rule(name: str, kind: str, pattern: re.Pattern[str],
          locate: Callable[[re.Match[str], str], Span | None] = _locate_assignment) -> Rule:
    return Rule(name, kind, pattern, locate, priority=CONTEXT_PRIORITY, lowered=True)


CONTEXT_RULES: tuple[Rule, ...] = (
    *(_rule("password-assignment", PASSWORD, _assignment(w)) for w in _PASSWORD_WORDS),
    *(_rule("secret-assignment", SECRET, _assignment(w)) for w in _SECRET_WORDS),
    _rule("password-flag", PASSWORD, _flag("|".join(_PASSWORD_WORDS))),
    _rule("secret-flag", SECRET, _flag("|".join(_SECRET_WORDS))),
    _rule("sql-password", PASSWORD,
          re.compile(r"identified[ \t]+by[ \t]+'([^'\n]{1,256})'", re.ASCII),
          _locate_basic),
    _rule("bearer", TOKEN, re.compile(r"bearer[ \t]+([a-z0-9._~+/-]{16,}=*)", re.ASCII),
          _locate_bearer),
    _rule("basic-auth", SECRET, re.compile(
        r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?basic[ \t]+([a-z0-9+/]{8,}={0,2})",
        re.ASCII), _locate_basic),
)
