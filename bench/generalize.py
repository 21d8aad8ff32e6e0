"""A team's weeks: generated multi-session conversations about people, projects, incidents
and decisions that recur across dated sessions, with questions that need one turn, the
order of events, two sessions linked by a chain, or an inference from several remarks.

It is the second retrieval evaluation beside LongMemEval, built so that what was tuned on
one does not carry over by construction: each user's history is a team's work over some
eight weeks (people with roles, two projects, an outage, decisions) mixed with the
everyday sessions of ``bench.planted`` (cooking, travel, coding questions) as haystack.
Question kinds, each with its evidence turns (session id, turn index):

- ``single-hop``: one remark answers it, worded apart from the question ("Kemi takes
  over code review for billing" -> "Whose approval do I need for a billing change?").
- ``temporal``: a value said twice, before and after an event or weeks apart; the
  question names the event or a time relative to its date ("since it went down that
  night", "most recently", "about 7 weeks ago"), and the evidence is the remark on the
  asked side only.
- ``multi-hop``: two remarks in different sessions that only a chain links ("the outage
  was the Redis session store running out of memory" ... later "we are moving the
  session store onto Postgres"; "what did we decide about the thing that broke in the
  outage?"): the question names the first link, the evidence is both turns.
- ``open-domain``: an inference from two or three remarks in different sessions ("would
  the team be fine with Rust here?" from remarks about experience, hiring and deadlines);
  the evidence is every remark.

Each hard kind has several templates, each its own relation (a chain through an outage,
a person's project, a customer's request, a ticket, a date; an inference from a team's
background, diets, a budget, a person's leave, a customer's data residency, a rejected
tool), and a question's ``sub`` names its template, so that a method fitted to one
template shows it in the per-template figures.

Questions paraphrase their evidence: they keep the names a user would repeat (people,
projects, customers) and never its other content words, so that word overlap alone does
not find it. Distractor remarks share the question's names without answering it.

Deterministic: one seeded ``random.Random`` per user, no network, no model. The users
are split once by a fixed seed: 70 % ``dev``, 30 % ``aside``; the aside part is meant to
be read once, at the end of a piece of retrieval work, never to tune it. The ``fresh``
part, the ``FRESH`` users after the first ``POPULATION``, is for a check of that kind
once the aside part has been read: the same generator, users it had not made for either
part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from random import Random

from bench.planted import (
    _TOPICS,
    DAY,
    Haystack,
    Question,
    _Ask,
    _Picker,
    _Plant,
    _plant_in,
    _requests,
    _Topic,
    assemble,
    session_dates,
)

SPLITS: tuple[str, ...] = ("dev", "aside", "fresh")
KINDS: tuple[str, ...] = ("single-hop", "temporal", "multi-hop", "open-domain")
POPULATION = 200  # users of dev and aside; the split below is fixed once for all of them
_SPLIT_SEED = 39
_ASIDE = frozenset(Random(_SPLIT_SEED).sample(range(POPULATION), POPULATION * 3 // 10))
FRESH = 60  # users after the population, for a check once the aside part has been read
_USERS = {"dev": [i for i in range(POPULATION) if i not in _ASIDE],
          "aside": sorted(_ASIDE),
          "fresh": list(range(POPULATION, POPULATION + FRESH))}

_PEOPLE = ("Kemi Lars Aiko Tomasz Priya Mateo Ingrid Omar Nadia Hugo Chiara Kwame Yuki "
           "Felix Zainab Anders Leila Bruno Mei Rafael").split()
_PROJECTS = ("Atlas Harbor Beacon Lumen Quarry Tessera Juniper Orbit Falcon Mosaic").split()
_CUSTOMERS = ("Northwind", "Brightwave", "Copperleaf", "Halcyon Bank", "Verdant Foods",
              "Meridian Air", "Bluefin Retail", "Stratus Health")
_COMPONENTS = (("the Redis session store", "ran out of memory", "moving sessions into "
                "Postgres and dropping Redis for them"),
               ("the nightly export job", "filled the disk on the shared volume",
                "giving the exports their own bucket with a size alarm"),
               ("the payment webhook queue", "backed up for hours when RabbitMQ stalled",
                "replacing RabbitMQ with SQS for the webhooks"),
               ("the search indexer", "locked the main table during reindexing",
                "running the reindex against a read replica"),
               ("the TLS certificate on the API gateway", "expired without anyone noticing",
                "automating renewal with cert-manager and paging on expiry"))
_MONTHS = ("January", "February", "March")

_WORK = _Topic(
    ("Can you help me write a short status update for PROJECT? It's for the Monday sync.",
     "How should I structure a design doc for a change to PROJECT's API?",
     "What's a good way to run a retro when half the team is remote?",
     "Can you review this migration plan for PROJECT and point out the risks?",
     "Draft a polite message to PERSON asking for the numbers before Thursday."),
    ("Can you make it shorter?", "What would a skeptical reviewer ask?",
     "Could you add a section on rollback?", "How would I explain this to sales?",
     "Is there anything missing for an on-call handover?"),
    ("Lead with the decision and the date; people skim the rest.",
     "A rollback plan should say who decides and within how long.",
     "Keep the risks list short and give each one an owner.",
     "For remote retros, a shared board filled in silently first works well.",
     "Say what you need from the reader in the first sentence.",
     "A table of before and after makes the change easy to review."),
)


def _work_requests(rng: Random, team: Sequence[str], projects: Sequence[str],
                   n: int) -> list[str]:
    out = _requests(rng, _WORK, n)
    return [r.replace("PROJECT", rng.choice(projects)).replace("PERSON", rng.choice(team))
            for r in out]


# --- the questions and what answers them ---------------------------------------------

_ANY = (0.0, 1.0)
_EARLY = (0.0, 0.4)
_LATE = (0.6, 1.0)

_Maker = Callable[[Random, _Picker, "_World"], tuple[list[_Ask], list[str]]]


class _World:
    """One user's team: who is in it and what it works on."""

    def __init__(self, rng: Random, pick: _Picker) -> None:
        self.team = rng.sample(_PEOPLE, 14)  # each question's people drawn apart by pick
        self.projects = [pick(_PROJECTS) for _ in range(2)]
        self.rng = rng

    def person(self, pick: _Picker) -> str:
        return pick(self.team)


def _single_review(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    who, proj = w.person(pick), rng.choice(w.projects)
    plant = f"{who} is taking over code review for everything billing-related in {proj}."
    q = f"Whose approval do I need before merging a change to how {proj} charges people?"
    return [_Ask("single-hop", q, who, [_Plant(plant, _ANY)])], [
        f"{who} said the {proj} onboarding screens look much cleaner now."]


def _single_customer(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    cust = pick(_CUSTOMERS)
    plant = f"{cust} told us they will only renew if we support single sign-on by summer."
    q = f"What condition did {cust} put on staying with us for another year?"
    return [_Ask("single-hop", q, "SSO by summer", [_Plant(plant, _ANY)])], [
        f"{cust} sent over their logo for the case study."]


def _single_staging(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    proj = rng.choice(w.projects)
    ver = rng.choice(("12", "13", "14"))
    plant = f"Heads up, {proj}'s staging box is still on Postgres {ver}, we never upgraded it."
    q = f"Which database release does the pre-production environment of {proj} run?"
    return [_Ask("single-hop", q, ver, [_Plant(plant, _ANY)])], [
        f"{proj} production moved to the new cluster last year."]


def _temporal_outage(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    proj = rng.choice(w.projects)
    old, new = rng.sample(("24 hours", "6 hours", "15 minutes", "one hour", "5 minutes"), 2)
    before = _Plant(f"For {proj} we're keeping the cache TTL at {old} for now.", (0.0, 0.3))
    event = _Plant(f"Rough night: {proj} went down for two hours, the whole checkout was "
                   "dead until we restarted everything.", (0.35, 0.55))
    after = _Plant(f"Since the incident we set the {proj} cache TTL to {new}.", (0.6, 1.0))
    q_after = f"How long do cached entries live in {proj} since it went down that night?"
    q_before = f"How long did {proj} keep cached entries before it went down that night?"
    return [_Ask("temporal", q_after, new, [after], sub="after"),
            _Ask("temporal", q_before, old, [before], sub="before")], [event.text]


def _temporal_month(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    who = w.person(pick)
    a, b = rng.sample(("Thursday", "Tuesday", "Monday", "Friday"), 2)
    early = _Plant(f"{who} wants the release train to leave on {a}s.", (0.0, 0.3))
    late = _Plant(f"{who} changed their mind, releases go out on {b}s from now on.", (0.7, 1.0))
    return [_Ask("temporal", f"On which weekday do we ship these days, according to {who}?",
                 b, [late], sub="now"),
            _Ask("temporal", f"Which day did {who} originally pick for shipping?", a,
                 [early], sub="before")], []


def _temporal_cue(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    """Said early and said again lately; the questions name a time relative to today,
    ``AGO`` standing for how long ago the early remark was (filled once it is placed)."""
    who = w.person(pick)
    a, b = rng.sample(("9:00", "9:30", "10:00", "10:15", "11:00"), 2)
    early = _Plant(f"{who} wants our standup at {a} sharp.", (0.0, 0.35))
    late = _Plant(f"{who} moved the standup to {b}.", (0.85, 1.0))
    return [_Ask("temporal", f"What time does {who} most recently want the daily sync?",
                 b, [late], sub="recently"),
            _Ask("temporal", f"What time did {who} ask the team to meet AGO?", a,
                 [early], sub="ago")], []


def _multi_outage(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    comp, fail, fix = _COMPONENTS[rng.randrange(len(_COMPONENTS))]
    first = _Plant(f"Postmortem summary: the outage came down to {comp}, it {fail}.",
                   (0.0, 0.45))
    then = _Plant(f"About {comp}, we decided: {fix}.", (0.55, 1.0))
    q = "What did we settle on for the piece that broke during the outage?"
    return [_Ask("multi-hop", q, fix, [first, then], sub="outage")], [
        "The outage review meeting got moved to next week."]


def _multi_lead(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    who, proj = w.person(pick), pick(_PROJECTS)
    month = rng.choice(("March", "April", "May"))
    first = _Plant(f"{who} is the lead on {proj} now.", _ANY)
    then = _Plant(f"The {proj} project has to be live before the compliance audit in "
                  f"{month}.", _ANY)
    q = f"What is the deadline for the thing {who} is running?"
    return [_Ask("multi-hop", q, month, [first, then], sub="lead")], [
        f"{who} is out on holiday the first week of {month}."]


def _multi_owner(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    cust, who = pick(_CUSTOMERS), w.person(pick)
    first = _Plant(f"{cust} asked us for audit logs they can export to their SIEM.", _ANY)
    then = _Plant(f"Anything touching logging or compliance goes to {who} from now on.", _ANY)
    q = f"Who should pick up the feature request from {cust}?"
    return [_Ask("multi-hop", q, who, [first, then], sub="owner")], [
        f"{cust} liked the demo last week."]


def _open_rust(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    a, b = w.person(pick), w.person(pick)
    plants = [_Plant(f"Most of us came from Python and JavaScript; only {a} has written "
                     "anything low-level.", _ANY),
              _Plant(f"{b} keeps reminding everyone that we can't afford a slow ramp-up "
                     "this quarter.", _ANY),
              _Plant("We picked Go for the ingest service mainly because hiring for it "
                     "is easy around here.", _ANY)]
    q = "Would the others be comfortable if I wrote the new parser in Rust?"
    return [_Ask("open-domain", q, "probably not", plants, sub="rust")], []


def _open_dinner(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    a, b = w.person(pick), w.person(pick)
    plants = [_Plant(f"{a} went vegan in the autumn and is strict about it.", _ANY),
              _Plant(f"{b} has coeliac disease, so bread and pasta are out.", _ANY)]
    q = "Is a steakhouse with a pasta bar a good pick for the team celebration?"
    return [_Ask("open-domain", q, "no", plants, sub="dinner")], [
        f"{a} booked the meeting room for the celebration."]


def _open_budget(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    plants = [_Plant("Finance froze all new SaaS subscriptions until July.", _ANY),
              _Plant("We already pay for Datadog and barely use half of it.", _ANY)]
    q = "Should I sign us up for a new observability product this spring?"
    return [_Ask("open-domain", q, "no", plants, sub="budget")], []


def _multi_ticket(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    ticket, who = f"#{rng.randrange(3000, 9000)}", w.person(pick)
    first = _Plant(f"Ticket {ticket} is the one where the mobile login spins forever on "
                   "slow networks.", (0.0, 0.45))
    then = _Plant(f"{who} volunteered to rewrite the app's sign-in flow next sprint.",
                  (0.55, 1.0))
    q = f"Is anybody going to deal with {ticket}, and who?"
    return [_Ask("multi-hop", q, who, [first, then], sub="ticket")], [
        f"{who} closed a few stale tickets on Friday."]


def _multi_date(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    day, who = rng.choice(("12th", "14th", "19th", "21st")), w.person(pick)
    month = rng.choice(_MONTHS)
    first = _Plant(f"The board meeting is on the {day} of {month}.", (0.0, 0.45))
    then = _Plant(f"{who} needs the revenue slides finished before the board sees them.",
                  (0.55, 1.0))
    q = f"What has to be ready by {month} {day}?"
    return [_Ask("multi-hop", q, "the revenue slides", [first, then], sub="date")], [
        f"{who} asked what the dress code is in {month}."]


def _open_leave(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    who = w.person(pick)
    plants = [_Plant(f"{who} starts parental leave at the end of May, gone three months.",
                     _ANY),
              _Plant("The database migration is planned for July and August.", _ANY)]
    q = f"Should {who} be the one driving the big move over the summer?"
    return [_Ask("open-domain", q, "no", plants, sub="leave")], [
        f"{who} shared photos from the team offsite."]


def _open_residency(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    cust = pick(_CUSTOMERS)
    plants = [_Plant(f"{cust}'s contract says their data may only be stored inside the EU.",
                     _ANY),
              _Plant("Our analytics vendor keeps everything in us-east-1, no other region.",
                     _ANY)]
    q = f"Can we switch on the usage dashboards for {cust}?"
    return [_Ask("open-domain", q, "no", plants, sub="residency")], [
        f"{cust} asked for a copy of last quarter's invoice."]


def _open_rejected(rng: Random, pick: _Picker, w: _World) -> tuple[list[_Ask], list[str]]:
    plants = [_Plant("We tried MongoDB last year and dropped it; the reports were a pain "
                     "to write.", _ANY),
              _Plant("Most of the new work joins orders against invoices and refunds.",
                     _ANY)]
    q = "Would a document store be a sensible fit for the next analytics service?"
    return [_Ask("open-domain", q, "probably not", plants, sub="rejected")], []


_SINGLES: tuple[_Maker, ...] = (_single_review, _single_customer, _single_staging)
_TEMPORALS: tuple[_Maker, ...] = (_temporal_outage, _temporal_month, _temporal_cue)
_MULTIS: tuple[_Maker, ...] = (_multi_outage, _multi_lead, _multi_owner, _multi_ticket,
                               _multi_date)
_OPENS: tuple[_Maker, ...] = (_open_rust, _open_dinner, _open_budget, _open_leave,
                              _open_residency, _open_rejected)


# --- histories ------------------------------------------------------------------------

def users(split: str) -> list[int]:
    """The user indices of ``split``, in order (fixed once by ``_SPLIT_SEED``)."""
    if split not in _USERS:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return _USERS[split]


def history(index: int, *, sessions: int = 30) -> Haystack:
    """User ``index``'s sessions and questions; the same in every process."""
    if sessions < 12:
        raise ValueError("a history needs at least 12 sessions")
    split = "fresh" if index >= POPULATION else "aside" if index in _ASIDE else "dev"
    seed = 39_000_000 + index
    rng = Random(seed)
    pick = _Picker(rng)
    world = _World(rng, pick)
    hid = f"gen-{index:04d}"
    asks: list[_Ask] = []
    noise: list[str] = []
    makers = [*_SINGLES, *_TEMPORALS, *_MULTIS, *_OPENS]
    for make in makers:
        got, extra = make(rng, pick, world)
        asks += got
        noise += extra

    start = datetime(2026, 1, 5, tzinfo=UTC).timestamp() + rng.randrange(60) * DAY
    dates = session_dates(rng, start, sessions, 3.5)
    names = list(_TOPICS)
    topics = [_WORK if rng.random() < 0.5 else _TOPICS[rng.choice(names)]
              for _ in range(sessions)]
    requests = [_work_requests(rng, world.team, world.projects, rng.randint(3, 6))
                if t is _WORK else _requests(rng, t, rng.randint(3, 6)) for t in topics]

    free = {(s, i) for s in range(sessions) for i in range(len(requests[s]))}
    by_ask = [list(a.plants) for a in asks]
    for plants in by_ask:  # one session per remark of a question, in the windows' order
        taken: set[int] = set()
        for p in plants:
            lo, hi = int(p.sessions[0] * sessions), int(p.sessions[1] * sessions)
            choices = sorted((s, i) for s, i in free
                             if lo <= s < max(hi, lo + 1) and s not in taken)
            s, i = rng.choice(choices)
            free.discard((s, i))
            taken.add(s)
            requests[s][i], p.text = _plant_in(rng, requests[s][i], p.text)
            p.key = (f"{hid}-s{s:02d}", 2 * i)
    built = assemble(rng, hid, requests, topics, dates, noise, free)
    now = dates[-1] + DAY
    questions = tuple(
        Question(f"{hid}-q{n:02d}", a.kind, _ago(a, dates, now), a.answer,
                 tuple(p.key for p in a.plants if p.key is not None),
                 tuple(p.text for p in a.plants), a.sub)
        for n, a in enumerate(asks))
    return Haystack(hid, split, seed, built, questions, dates[-1] + DAY)


def _ago(ask: _Ask, dates: Sequence[float], now: float) -> str:
    """The question with ``AGO`` replaced by how long before ``now`` its evidence was said,
    in whole weeks, as a user would put it ("about 9 weeks ago")."""
    if "AGO" not in ask.text or ask.plants[0].key is None:
        return ask.text
    session = int(ask.plants[0].key[0].rsplit("-s", 1)[1])
    weeks = max(1, round((now - dates[session]) / (7 * DAY)))
    return ask.text.replace("AGO", f"about {weeks} weeks ago")


def histories(split: str, count: int, *, sessions: int = 30) -> list[Haystack]:
    """The first ``count`` users of ``split``."""
    return [history(i, sessions=sessions) for i in users(split)[:count]]
