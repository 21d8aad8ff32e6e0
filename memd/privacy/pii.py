"""Personal data (the ``secrets+pii`` mode): email addresses, phone numbers, payment card
numbers and IBANs.

Numbers are where false positives come from (versions, dates, ids, timestamps), so each
needs a shape and a check: a card number has 13 to 19 digits, a known first digit and a
valid Luhn sum; an IBAN its country's length and a valid mod-97 remainder; a phone number
a leading ``+``, separators in a national shape (``(555) 123-4567``, ``020 7946 0958``), or
a word such as "phone" or "tel" before it. Unseparated digit runs without such a word
(order ids, epoch times) are left alone.
"""

from __future__ import annotations

import re

from memd.privacy.rules import CARD, EMAIL, IBAN, PHONE, PII_PRIORITY, Locate, Rule, Span

_LOCAL_PART = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}\Z", re.ASCII)


def _locate_email(m: re.Match[str], text: str) -> Span | None:
    """The regex matches ``@domain``; the local part is found walking back from the @, so
    that the scan skips from @ to @ instead of trying every word as a local part."""
    at = m.start()
    local = _LOCAL_PART.search(text, max(0, at - 64), at)
    if local is None:
        return None
    start = local.start()
    while start < at and text[start] in ".'`=":
        start += 1
    end = m.end()
    if start == at or (start > 0 and text[start - 1] in ":/") \
            or (end < len(text) and text[end] == ":" and text[end + 1:end + 2].strip()):
        return None  # user:password@host in a URL, git@host:org/repo
    return start, end


def _digits(value: str) -> str:
    return "".join(c for c in value if c.isdigit())


def luhn_ok(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check of payment card numbers."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _standalone(text: str, start: int, end: int) -> bool:
    """Not part of a longer number, version, id or path: no digit, letter, dot-digit,
    slash or colon glued on either side."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    after2 = text[end + 1] if end + 1 < len(text) else " "
    return (not (before.isalnum() or before in "_./:-+#")
            and not (after.isalnum() or after in "_/:" or (after in ".-" and after2.isdigit())))


# Digit runs: one scan finds every run of 8 or more digits and separators, and each
# number rule checks its own shape on them (a regex that starts with a digit is tried at
# every digit of a log, so there is one such regex, not one per rule). A run starts at a
# digit not glued to a word, number or path, so that a long run is not tried again from
# each of its digits.
_NUMBER = re.compile(r"(?:\((?=\d)|\d(?<![\w.:/+-]\d))[\d .()-]{6,24}\d(?![\w:])", re.ASCII)
_CARD = re.compile(r"\d{4}(?:[ -]?\d{4}){2}[ -]?\d{1,7}|3[47]\d{2}[ -]?\d{6}[ -]?\d{5}", re.ASCII)
_NATIONAL_PHONE = re.compile(
    r"(?:1[-. ])?(?:\(\d{3}\) ?|\d{3}([-. ]))\d{3}[-. ]\d{4}"  # (555) 123-4567, 555-123-4567
    r"|0\d{1,4}(?:[ .-]\d{2,6}){1,4}",  # 020 7946 0958, 01 23 45 67 89
    re.ASCII)


def _locate_card(m: re.Match[str], text: str) -> Span | None:
    start, end = m.span()
    if end - start < 13:
        return None
    if text[start] == "(":
        start += 1
    value = text[start:end]
    digits = _digits(value)
    if not _CARD.fullmatch(value) or len({c for c in value if not c.isdigit()}) > 1 \
            or digits[0] not in "23456" or not _standalone(text, start, end) \
            or not luhn_ok(digits):
        return None
    return start, end


def _locate_national_phone(m: re.Match[str], text: str) -> Span | None:
    """A national number with separators: North American (area code 2-9), or with a
    trunk 0 and 9 digits or more (so that 01.02.2024 stays a date)."""
    start, end = m.span()
    shape = _NATIONAL_PHONE.fullmatch(text, start, end)
    if shape is None or not _standalone(text, start, end):
        return None
    digits = _digits(text[start:end])
    if digits[0] == "0":
        return (start, end) if 9 <= len(digits) <= 12 else None
    if len(digits) == 11:
        digits = digits[1:]
    # North American area and exchange codes start with 2-9
    return (start, end) if digits[0] not in "01" and digits[3] not in "01" else None


def _phone(min_digits: int, group: int = 0) -> Locate:
    """Locate a phone number of ``min_digits`` to 15 digits in ``group`` of the match; a
    number after a word such as "tel:" (group 1) may follow any character."""
    def locate(m: re.Match[str], text: str) -> Span | None:
        start, end = m.span(group)
        while end > start and not text[end - 1].isdigit():
            end -= 1
        if not min_digits <= len(_digits(text[start:end])) <= 15 \
                or not _standalone(text, start if not group else 0, end):
            return None
        return start, end

    return locate


# Lengths of IBANs by country (the ISO 13616 registry).
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}


def iban_ok(iban: str) -> bool:
    """Whether ``iban`` (no spaces, upper case) has its country's length and a valid
    mod-97 check."""
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _locate_iban(m: re.Match[str], text: str) -> Span | None:
    start, end = m.span()
    if text[start - 1:start].isalnum() or text[end:end + 1].isalnum():
        return None
    return (start, end) if iban_ok(m.group().replace(" ", "")) else None


def _rule(name: str, kind: str, pattern: re.Pattern[str], locate: Locate,
          lowered: bool = False) -> Rule:
    return Rule(name, kind, pattern, locate, PII_PRIORITY, lowered)


PII_RULES: tuple[Rule, ...] = (
    _rule("email", EMAIL, re.compile(
        r"@[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?)*"
        r"\.[a-z]{2,24}(?![a-z0-9-])", re.ASCII), _locate_email, lowered=True),
    _rule("card", CARD, _NUMBER, _locate_card),
    _rule("phone", PHONE, _NUMBER, _locate_national_phone),
    _rule("phone", PHONE, re.compile(r"\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,6}", re.ASCII),
          _phone(8)),
    # "phone: 4155550132": one regex per word, each starting with a literal
    *(_rule("phone", PHONE, re.compile(
        rf"{word}[a-z]*\.?[ \t]*(?:number|no\.?|#)?[ \t]*:?[ \t]*(\+?\d[\d ().-]{{6,20}}\d)",
        re.ASCII), _phone(8, group=1), lowered=True)
      for word in ("phone", "tel", "mobile", "cell", "call", "fax", "whatsapp")),
    _rule("iban", IBAN, re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?",
                                   re.ASCII), _locate_iban),
)
