"""Time cues in a question: "two weeks ago", "last month", "most recently".

A question that names a time asks about what was said then, and the stored messages
carry the date they were said on. :func:`window` reads a small rule set of relative time
expressions into the span of dates they point at, relative to ``now`` (the search's
clock): N days/weeks/months ago, yesterday, last week/month, recently / most recently /
lately, before/after a named date ("before March 3", "after 2026-02-10"). Anything else
gives no window, and the search is unchanged.

:func:`boost` then lets the messages dated inside the window gain a bounded share of the
similarity weight, capped just under the best hit's score: a cue reorders what the
question already found, it never puts a merely well-dated message above the turn that
answers the question most directly. Events ("after the outage") are not dates and are
not read here.

:func:`asks_recent` says whether a question asks about the present: "latest", "now",
"currently", "these days", "still", or a cue whose window ends within the last three
weeks ("last week", "a week ago", "since March 3"). Only then does a message's age count
in its score (setting ``search_message_freshness = "auto"``): over weeks of history, a
freshness that halves in days would otherwise bury the old remark that answers "who
owns billing?" under last week's chatter, while "who owns billing now?" does want the
newest word on it. A cue that points further into the past ("seven weeks ago", "before
March 3" in May) asks for old words, so age does not count there either.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from memd.config import Weights
from memd.types import ScoredMessages

DAY = 86_400.0
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
            "twelve": 12, "a couple of": 2, "a few": 3, "several": 4}
_UNIT = {"day": 1.0, "week": 7.0, "month": 30.0, "year": 365.0}
_MONTHS = ("january february march april may june july august september october "
           "november december").split()
_N = r"(\d{1,3}|a couple of|a few|several|an?|one|two|three|four|five|six|seven|eight" \
     r"|nine|ten|eleven|twelve)"
_AGO = re.compile(rf"\b{_N}\s+(day|week|month|year)s?\s+ago\b", re.I)
_LAST = re.compile(r"\b(?:last|past|previous)\s+(week|month|year)\b", re.I)
_YESTERDAY = re.compile(r"\byesterday\b", re.I)
_RECENT = re.compile(r"\b(?:most\s+recently|recently|lately|these\s+days|latest)\b", re.I)
_MONTH = "|".join(_MONTHS)
_EDGE = re.compile(
    rf"\b(before|after|since)\s+(?:the\s+)?(?:(\d{{4}})-(\d{{2}})-(\d{{2}})|({_MONTH})(?:\s+(\d{{1,2}})"
    rf"(?:st|nd|rd|th)?)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH}))\b", re.I)

_PRESENT = re.compile(
    r"\b(?:now|nowadays|currently|current|still|anymore|any\s+more|at\s+the\s+moment|"
    r"today|so\s+far|newest|up\s+to\s+date)\b", re.I)

RECENT_DAYS = 21.0  # "recently": the last three weeks


@dataclass(frozen=True, slots=True)
class Window:
    """The span of dates a question's time cue points at (epoch seconds), and the
    cue as the question put it."""

    start: float
    end: float
    cue: str

    def holds(self, when: float) -> bool:
        return self.start <= when <= self.end


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _ago(m: re.Match[str], now: float) -> Window:
    """N units ago: centred on that many units back, give or take a third of the span
    (people round: "two weeks ago" is anything from ten to eighteen days)."""
    days = _count(m.group(1)) * _UNIT[m.group(2).lower()]
    slack = max(1.0, days / 3.0)
    return Window(now - (days + slack) * DAY, now - max(0.0, days - slack) * DAY, m.group(0))


def _date_of(m: re.Match[str], now: float) -> float | None:
    """The named date, in the latest year that puts it no later than ``now``."""
    if m.group(2):
        year, month, day = int(m.group(2)), int(m.group(3)), int(m.group(4))
    else:
        name = (m.group(5) or m.group(8)).lower()
        month = _MONTHS.index(name) + 1
        day = int(m.group(6) or m.group(7) or 1)
        year = datetime.fromtimestamp(now, UTC).year
        this_year = _stamp(year, month, day)
        if this_year is not None and this_year > now:
            year -= 1
    return _stamp(year, month, day)


def _stamp(year: int, month: int, day: int) -> float | None:
    try:
        return datetime(year, month, day, tzinfo=UTC).timestamp()
    except ValueError:
        return None


def window(query: str, now: float) -> Window | None:
    """The dates ``query``'s first time cue points at, relative to ``now``; None if it
    names none the rules know."""
    if m := _AGO.search(query):
        return _ago(m, now)
    if m := _YESTERDAY.search(query):
        return Window(now - 2 * DAY, now, m.group(0))
    if m := _LAST.search(query):
        days = _UNIT[m.group(1).lower()]
        return Window(now - 2 * days * DAY, now, m.group(0))
    if m := _EDGE.search(query):
        at = _date_of(m, now)
        if at is None:
            return None
        if m.group(1).lower() == "before":
            return Window(-math.inf, at, m.group(0))
        return Window(at, now, m.group(0))
    if m := _RECENT.search(query):
        return Window(now - RECENT_DAYS * DAY, now, m.group(0))
    return None


def asks_recent(query: str, now: float) -> bool:
    """Whether ``query`` asks about what is recent or current (a present-tense marker,
    or a time cue whose window ends within the last :data:`RECENT_DAYS`: "a week ago",
    "since Monday"): the questions a message's age bears on."""
    if _PRESENT.search(query) or _RECENT.search(query):
        return True
    cue = window(query, now)
    return cue is not None and cue.end >= now - RECENT_DAYS * DAY




def boost(scored: ScoredMessages, cue: Window, weights: Weights, bonus: float = 0.1
          ) -> ScoredMessages:
    """``scored`` (best first) with the messages dated inside ``cue`` raised by ``bonus``
    times the similarity weight, each capped just under the best hit's score; best
    first again."""
    if not scored:
        return scored
    cap = math.nextafter(scored[0][1], -math.inf)
    out = [scored[0]]
    for msg, total, parts in scored[1:]:
        if cue.holds(msg.created_at):
            raised = max(total, min(total + bonus * weights.similarity, cap))
            parts = {**parts, "time_cue": raised - total}
            total = raised
        out.append((msg, total, parts))
    out[1:] = sorted(out[1:], key=lambda t: (-t[1], t[0].id))
    return out
