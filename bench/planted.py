"""Planted facts: generated multi-session conversations with facts at known places, and
questions about them, for a retrieval evaluation that memd was not tuned on.

``haystack(split, index)`` builds one user's history: dated sessions of everyday and
coding-assistant chit-chat (user requests, assistant answers of realistic lengths), into
whose user turns facts are planted at known (session, turn) positions, and the questions
that those facts answer, each with its evidence turns:

- ``single-hop``: one planted fact ("My sister's name is Priya." -> "What is my sister's
  name?").
- ``multi-hop``: two facts in different sessions that only together answer the question
  ("My cousin lives in Lisbon." + "Priya is my cousin." -> "Which city does Priya live
  in?"); the evidence is both turns.
- ``temporal``: a value that changes over time, in sessions whose dates increase ("I
  moved to Berlin" early, "we just moved into our place in Oslo" later): "Which city do I
  live in now?" has the later turn as evidence, "Where did I live before Oslo?" the
  earlier one.
- ``open-domain``: a question worded apart from its evidence ("I'm allergic to
  shellfish" -> "Is there anything I should stay away from at a seafood restaurant?").
- ``verbatim``: a control whose question quotes its evidence word for word, so that a
  harness that finds nothing fails; it is not part of the overall figures.

Every question also gets distractor turns: user turns that share the question's words
(another person's sister, a friend who moved, a seafood dinner) without answering it.

Everything comes from one seeded ``random.Random`` per haystack (no network, no model,
no files), so a haystack is the same in every process. Two splits: ``dev`` and
``heldout`` draw from the same templates with seeds that never meet. ``heldout`` is kept
aside: it is never used to tune memd (weights, thresholds, rules), only to check that
figures measured on ``dev`` hold on haystacks nobody looked at.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from random import Random

SPLITS: tuple[str, ...] = ("dev", "heldout")
KINDS: tuple[str, ...] = ("single-hop", "multi-hop", "temporal", "open-domain")
CONTROL = "verbatim"  # the control kind, outside the overall figures
ALL_KINDS: tuple[str, ...] = (*KINDS, CONTROL)
_SEED_BASE = {"dev": 0, "heldout": 7_000_003}  # the splits' seeds never meet
DAY = 86_400.0

TurnKey = tuple[str, int]  # (session id, index of the turn in its session)


@dataclass(frozen=True)
class Turn:
    role: str
    content: str


@dataclass(frozen=True)
class Session:
    id: str
    date: float  # epoch seconds, UTC
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    answer: str
    evidence: tuple[TurnKey, ...]  # the user turns holding the planted facts
    planted: tuple[str, ...]  # the planted sentence of each evidence turn, in order
    sub: str = ""  # temporal: the asked side ("now", "before"...); generalize: the template


@dataclass(frozen=True)
class Haystack:
    id: str
    split: str
    seed: int
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    date: float  # when the questions are asked: after the last session

    def turn(self, key: TurnKey) -> Turn:
        sid, i = key
        return next(s for s in self.sessions if s.id == sid).turns[i]


# --- words ----------------------------------------------------------------------------

_WOMEN = ("Priya Aiko Leila Amara Ingrid Sofia Nadia Yuki Chiara Mei Zainab Esme Hana "
          "Ines Elif Maren Saoirse Lotte Vera Noor").split()
_MEN = ("Tomasz Mateo Jonas Rafael Kwame Dmitri Hugo Omar Felix Anders Lucas Tariq Bruno "
        "Kofi Ravi Diego Kenji Emeka Sami Pablo").split()
_NAMES = [*_WOMEN, *_MEN]
_SURNAMES = ("Okafor Lindqvist Moreau Castellanos Nakamura Kowalski Haddad Brennan "
             "Ferreira Novak Achterberg Delacroix Mbeki Sorensen Quintero Abernathy").split()
_RELATIVES = {  # relative -> the names that suit them
    **dict.fromkeys("sister aunt grandmother niece stepmom godmother sister-in-law".split(),
                    _WOMEN),
    **dict.fromkeys("brother uncle grandfather nephew stepdad brother-in-law".split(), _MEN),
    "cousin": _NAMES,
}
_CITIES = ("Lisbon Oslo Berlin Montreal Nairobi Kraków Valencia Osaka Melbourne Denver "
           "Edinburgh Porto Seattle Tallinn Lyon Austin Dublin Ljubljana Bogotá Halifax "
           "Gothenburg Rotterdam Bordeaux Leipzig").split()
_COMPANIES = ("Northwind Logistics", "Brightwave Health", "Copperleaf Analytics",
              "Helios Robotics", "Bluefin Insurance", "Stonebridge Bank", "Larkspur Games",
              "Tidewater Energy", "Quillon Software", "Maple & Rowe", "Kestrel Aerospace",
              "Orchard Street Media")
_CARS = ("Honda Civic", "Subaru Outback", "Toyota Corolla", "Volkswagen Golf",
         "Mazda CX-5", "Ford Focus", "Kia Niro", "Hyundai Ioniq", "Volvo V60",
         "Skoda Octavia", "Nissan Leaf", "Tesla Model 3")
_PHONES = ("Pixel 7", "iPhone 12", "Galaxy S21", "Fairphone 4", "iPhone 15", "OnePlus 11",
           "Pixel 8a", "Galaxy A54", "Moto G Power", "iPhone SE")
_JOBS = ("pediatric nurse", "structural engineer", "high school chemistry teacher",
         "pastry chef", "air traffic controller", "marine biologist", "tax accountant",
         "physiotherapist", "locksmith", "court stenographer", "veterinarian",
         "sound engineer")
_INSTRUMENTS = ("cello", "trombone", "bass guitar", "drums", "violin", "saxophone",
                "accordion", "banjo", "clarinet", "harp")
_PETS = ("dog", "cat", "rabbit", "parrot", "hamster", "tortoise")
_PET_NAMES = ("Mochi Biscuit Sprocket Juniper Waffles Ziggy Clementine Noodle Pistachio "
              "Truffle Marble Gizmo Dumpling Pickles").split()
_PET_KINDS = ("a golden retriever", "two cats", "a bearded dragon", "an old beagle",
              "a pair of budgies", "a corgi", "a lop-eared rabbit", "three chickens")
_MONTHS = ("January February March April May June July August September October "
           "November December").split()
_DISHES = ("mushroom risotto", "chicken biryani", "shakshuka", "pad see ew",
           "lamb tagine", "spinach lasagna", "pierogi", "fish tacos", "bibimbap",
           "ramen with soft eggs")
_LANGUAGES = ("Portuguese", "Japanese", "Turkish", "Dutch", "Korean", "Swahili",
              "Greek", "Polish", "Italian", "Mandarin")
_EDITORS = ("Neovim", "VS Code", "Emacs", "Sublime Text", "IntelliJ IDEA", "Helix", "Zed")
_COLORS = "red blue green yellow orange purple teal grey".split()
_PLACES = ("garage", "old library", "community garden", "train station", "bakery",
           "school gym", "harbour", "bike shop")
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()

# everyday and coding topics of the filler: requests, follow-ups and answer sentences
_INGREDIENTS = ("chickpeas", "zucchini", "leftover rice", "feta", "sweet potatoes", "tofu",
                "spinach", "eggplant", "ground turkey", "cauliflower", "lentils", "kale")
_RECIPES = ("curry", "stir fry", "soup", "frittata", "pasta bake", "grain bowl", "stew",
            "salad", "casserole", "quesadilla")
_SPICES = ("smoked paprika", "cumin", "garam masala", "chili flakes", "oregano",
           "ginger", "za'atar", "black pepper")
_TRIPS = ("Kyoto", "the Amalfi coast", "Patagonia", "the Scottish Highlands", "Vietnam",
          "Iceland", "the Dolomites", "Morocco", "Crete", "Vancouver Island")
_SEASONS = ("spring", "summer", "autumn", "winter")
_BOOKS = ("a mystery", "a space opera", "a memoir", "a cozy fantasy", "a thriller",
          "a history of the Silk Road", "a short story collection", "a graphic novel")
_LIBS = ("pandas", "FastAPI", "SQLAlchemy", "React", "Django", "pytest", "asyncio",
         "NumPy", "Express", "Celery")
_ERRORS = ("KeyError", "TypeError: 'NoneType' object is not subscriptable",
           "a timeout", "a race condition", "IndexError: list index out of range",
           "a memory leak", "UnicodeDecodeError", "a deadlock", "a 502 from the gateway")
_THINGS = ("invoices", "user profiles", "orders", "log lines", "sensor readings",
           "support tickets", "shipments", "events", "payments", "bookmarks")
_FIELDS = ("created_at", "status", "customer_id", "amount", "email", "region",
           "priority", "updated_at")
_CHORES = ("a leaky faucet", "a squeaky door hinge", "a running toilet",
           "peeling paint in the bathroom", "a wobbly table leg", "a drafty window")
_PLANTS = ("tomatoes", "basil plants", "fiddle leaf figs", "succulents", "chili plants",
           "strawberries", "herbs", "lavender bushes")

_W: dict[str, Sequence[str]] = {
    "ingredient": _INGREDIENTS, "recipe": _RECIPES, "spice": _SPICES, "trip": _TRIPS,
    "season": _SEASONS, "book": _BOOKS, "lib": _LIBS, "error": _ERRORS, "things": _THINGS,
    "field": _FIELDS, "chore": _CHORES, "plant": _PLANTS, "n": ("2", "3", "4", "5", "6"),
    "weekday": _WEEKDAYS,
}


@dataclass(frozen=True)
class _Topic:
    opens: tuple[str, ...]  # a session's first request
    follows: tuple[str, ...]  # later requests in the same session
    says: tuple[str, ...]  # sentences of the assistant's answers


_TOPICS: dict[str, _Topic] = {
    "cooking": _Topic(
        ("Can you give me a quick {recipe} recipe for {n} people? I only have about half "
         "an hour tonight.",
         "I have {ingredient}, some {ingredient} and a bit of cream left in the fridge. "
         "What could I make for dinner without going to the store?",
         "What's a good substitute for {spice} in a {recipe}? I ran out.",
         "How do I keep {ingredient} from going soggy when I meal prep for the week?"),
        ("Could I make it the day before and reheat it?", "Would it work with {ingredient} "
         "instead?", "How much {spice} would you add for {n} servings?",
         "Thanks! Is there a lighter version of that?"),
        ("Start by heating a wide pan with a little oil and softening an onion.",
         "A {recipe} is forgiving, so the amounts do not need to be exact.",
         "Add the {spice} early so it blooms in the oil.",
         "If you add {ingredient}, put it in for the last ten minutes so it keeps some "
         "bite.", "Leftovers keep for about three days in a closed container.",
         "Taste it at the end and adjust the salt and acidity.",
         "A squeeze of lemon brightens it a lot.",
         "Roasting at a high temperature gives you browning without extra fat."),
    ),
    "travel": _Topic(
        ("I'm planning a {n}-day trip to {trip} in {season}. What should I not miss?",
         "Is it worth renting a car in {trip}, or is public transport good enough?",
         "What should I pack for a week in {trip} in {season}? I always overpack."),
        ("What about a rainy day plan?", "Is it better to stay in one place or move "
         "around?", "Any tips for eating well there on a budget?",
         "How early should I book the accommodation?"),
        ("The shoulder season is usually the sweet spot for crowds and prices.",
         "Plan one slow day for every three busy ones; you will enjoy it more.",
         "Regional trains are often cheaper when booked a few weeks ahead.",
         "Layers beat one heavy coat, since the weather can change within an hour.",
         "Local markets are a good way to eat well without spending much.",
         "Check whether the main sights need timed tickets in advance.",
         "Staying in two bases instead of five saves a lot of packing time."),
    ),
    "fitness": _Topic(
        ("I want to get back into running after a long break. Can you sketch a {n}-week "
         "plan?", "What's a good {n}-day strength routine I can do at home with two "
         "dumbbells?", "How do I stop getting a stitch when I run in the morning?"),
        ("Should I stretch before or after?", "How many rest days do I need?",
         "What if I miss a week?", "Is it fine to do this on an empty stomach?"),
        ("Build up slowly: no more than about ten percent more volume each week.",
         "Easy days should feel genuinely easy, at a pace where you can talk.",
         "Compound movements like squats and rows give you the most for your time.",
         "Sleep matters as much as the training itself for recovery.",
         "A short dynamic warm-up is better than long static stretches beforehand.",
         "If something hurts sharply rather than aches, stop and rest it."),
    ),
    "reading": _Topic(
        ("Can you recommend {book} for a long flight? I liked the last one you "
         "suggested.", "I'm in a reading slump. What's something short and gripping?",
         "My book club wants {book} for next month. Any ideas that would spark debate?"),
        ("Something less dark, maybe?", "Is there an audiobook version that's good?",
         "What should we read after that?", "Is it too long for a month?"),
        ("Short chapters help a lot when you are in a slump.",
         "Book clubs tend to enjoy stories with a morally grey narrator.",
         "A novella is a good way to get the habit back.",
         "The audiobook narration can make or break it, so try a sample first.",
         "Pairing a dense book with a light one keeps the momentum going."),
    ),
    "home": _Topic(
        ("How do I fix {chore}? I'd rather not call someone for something small.",
         "My {plant} keep dying on the balcony. What am I doing wrong?",
         "What's the cheapest way to make a small living room feel bigger?"),
        ("Do I need any special tools?", "How long will it take?",
         "What if that doesn't work?", "Is it safe to do myself?"),
        ("Turn off the water supply first; the valve is usually under the sink.",
         "Most of the time the cause is a worn washer, which costs next to nothing.",
         "Overwatering kills more plants than underwatering.",
         "Mirrors opposite a window make a room feel much larger.",
         "Take a photo before you take anything apart, so you know how it goes back.",
         "Light colours on the walls and fewer, larger pieces of furniture help."),
    ),
    "money": _Topic(
        ("Can you help me set up a simple monthly budget? I keep losing track of small "
         "expenses.", "Is it better to pay off my car loan early or put the money into "
         "savings?", "How much should I keep in an emergency fund?"),
        ("What app would you use for that?", "What about irregular expenses?",
         "How do I stick to it?", "Should my partner and I merge our accounts?"),
        ("Tracking every expense for one month shows where the money actually goes.",
         "Three to six months of essential costs is the usual emergency fund.",
         "Automating the transfer to savings on payday removes the temptation.",
         "Irregular costs are easiest as a monthly amount set aside in advance.",
         "Compare the loan's interest rate with what the savings would earn."),
    ),
    "python": _Topic(
        ("I'm getting {error} in my {lib} code when I load {things}. Any idea where to "
         "start?", "How do I test a function that parses {things} with {lib}?",
         "What's the cleanest way to group {things} by {field} in Python?",
         "My script that processes {things} got really slow after the data grew. How do I "
         "profile it?"),
        ("Could you show a minimal example?", "Would a dataclass be better here?",
         "How would I type-annotate that?", "It still fails when {field} is missing.",
         "Can you make it work with async?"),
        ("Start by printing the exact input that triggers it; most of these come from one "
         "odd record.", "A dictionary of lists keyed by the {field} does the grouping in "
         "one pass.", "Run it under cProfile and sort by cumulative time.",
         "Guard the lookup with .get() and decide what a missing {field} should mean.",
         "Keep the parsing separate from the I/O so that the test needs no files.",
         "A generator keeps memory flat when the input does not fit in RAM.",
         "Pin the {lib} version in your requirements so the behaviour does not shift.",
         "Write the failing case as a test first, then fix it."),
    ),
    "databases": _Topic(
        ("How do I write a SQL query that returns the latest row per {field} from a table "
         "of {things}?", "My Postgres query over {things} takes seconds. What index "
         "should I add?", "Should I store {things} as JSON columns or normalize them?"),
        ("What would the index look like?", "Does this work in SQLite too?",
         "How do I check that it uses the index?", "What about null values in {field}?"),
        ("A window function with ROW_NUMBER() partitioned by the {field} does it.",
         "EXPLAIN ANALYZE shows whether the planner actually uses the index.",
         "A composite index on the filter column then the sort column usually helps.",
         "Normalize what you query on; keep JSON for what you only display.",
         "Vacuum and analyze after a big import so the statistics are fresh."),
    ),
    "git": _Topic(
        ("I committed to the wrong branch in git. How do I move the last {n} commits?",
         "How do I undo a merge that I already pushed?",
         "What's a good branching workflow for a team of {n} people?"),
        ("Will that rewrite history for everyone?", "What if there are conflicts?",
         "How do I do that from a graphical client?", "Can I get the old state back?"),
        ("git reflog shows every position HEAD has been at, so nothing is really lost.",
         "A revert commit is the safe way to undo something already pushed.",
         "Short-lived feature branches merged through reviewed pull requests work well.",
         "Cherry-pick the commits onto the right branch, then reset the wrong one.",
         "Avoid force-pushing a shared branch without telling the team first."),
    ),
    "writing": _Topic(
        ("Can you help me write a polite email asking my landlord about {chore}?",
         "I need a short toast for a friend's wedding next {weekday}. Where do I start?",
         "Can you make this cover letter opening sound less stiff?"),
        ("Make it a bit shorter?", "Can you make it warmer?", "Is that too formal?",
         "How would I end it?"),
        ("Open with the reason for writing in the first sentence.",
         "A specific, small story says more than a list of adjectives.",
         "Keep the request concrete and give a date you would like an answer by.",
         "Read it aloud once; anything you stumble over is worth rewriting.",
         "End with a thank-you and one clear next step."),
    ),
}
_ACKS = ("Thanks, that helps a lot.", "Perfect, I'll try that tonight.",
         "Great, that worked!", "Makes sense, thank you.", "Okay, I'll report back.",
         "Nice, that's exactly what I needed.")
_OPENERS = ("Sure!", "Good question.", "Happy to help.", "Here's how I'd approach it.",
            "Absolutely.", "Let's sort it out.", "")
_CLOSERS = ("Let me know if you want more detail on any step.",
            "Want me to write out the full version?", "Tell me how it goes.",
            "I can adjust it if your situation is different.", "")


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    vowel = noun[:1].lower() in "aeiou" and not noun.startswith("One")
    return f"{'an' if vowel else 'a'} {noun}"


def _fill(template: str, rng: Random) -> str:
    """``template`` with each ``{slot}`` replaced by a random word of that slot."""
    out, rest = [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        slot, _, rest = tail.partition("}")
        out += [head, rng.choice(_W[slot])]
    return "".join([*out, rest])


def _answer(rng: Random, topic: _Topic) -> str:
    says = rng.sample(topic.says, min(len(topic.says), rng.randint(2, 5)))
    parts = [rng.choice(_OPENERS), *(_fill(s, rng) for s in says), rng.choice(_CLOSERS)]
    return " ".join(p for p in parts if p)


def _requests(rng: Random, topic: _Topic, n: int) -> list[str]:
    """A session's ``n`` user requests: an opening, then follow-ups that do not repeat."""
    out = [_fill(rng.choice(topic.opens), rng)]
    for follow in rng.sample(topic.follows, min(n - 1, len(topic.follows))):
        text = _fill(follow, rng)
        out.append(f"{rng.choice(_ACKS)} {text}" if rng.random() < 0.25 else text)
    return out


# --- what is planted -----------------------------------------------------------------

@dataclass
class _Plant:
    text: str  # the planted sentence
    sessions: tuple[float, float]  # where it may go, as shares of the haystack's sessions
    key: TurnKey | None = None  # where it went


@dataclass
class _Ask:
    kind: str
    text: str
    answer: str
    plants: list[_Plant]
    sub: str = ""


class _Picker:
    """Draws words without repeating them within one haystack, so that no two planted
    facts answer the same question."""

    def __init__(self, rng: Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def __call__(self, words: Sequence[str]) -> str:
        free = [w for w in words if w not in self.used]
        word = self.rng.choice(free)
        self.used.add(word)
        return word


_ANY = (0.0, 1.0)
_EARLY = (0.0, 0.4)
_LATE = (0.6, 1.0)

_Maker = Callable[[Random, _Picker], tuple[list[_Ask], list[str]]]


def _single_relative(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    rel = pick(list(_RELATIVES))
    name = pick(_RELATIVES[rel])
    said = rng.choice((f"My {rel}'s name is {name}.", f"My {rel} is called {name}.",
                       f"My {rel}, {name}, is visiting us next month."))
    other = pick(list(_RELATIVES))
    return ([_Ask("single-hop", f"What is my {rel}'s name?", name, [_Plant(said, _ANY)])],
            [f"I keep forgetting the names of my {rel}'s coworkers, which is awkward at "
             "parties.",
             f"What name would you give a grumpy {rel} in a short story?",
             f"My {other}'s name always gets misspelled on forms."])


def _single_pet(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    pet, name = pick(_PETS), pick(_PET_NAMES)
    said = rng.choice((f"Our {pet} is named {name}.", f"We call our {pet} {name}.",
                       f"{name}, our {pet}, knocked over my coffee this morning."))
    return ([_Ask("single-hop", f"What's the name of my {pet}?", name, [_Plant(said, _ANY)])],
            [f"My neighbour's {pet} kept everyone up last night.",
             f"What are some good names for a {pet}? Asking for a friend.",
             f"Is it true that a {pet} can recognise its own name?"])


def _single_birthday(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    month, day = pick(_MONTHS), rng.randint(2, 28)
    said = rng.choice((f"My birthday is on {month} {day}.",
                       f"I was born on {month} {day}, so {month} is my favourite month."))
    return ([_Ask("single-hop", "When is my birthday?", f"{month} {day}",
                  [_Plant(said, _ANY)])],
            ["My coworker's birthday party ran way too late on a weeknight.",
             "What's a good birthday present for someone who has everything?"])


def _single_dish(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    dish = pick(_DISHES)
    said = rng.choice((f"My favourite dish is {dish}.",
                       f"Nothing beats {dish}; it's my favourite thing to eat."))
    return ([_Ask("single-hop", "What is my favourite dish?", dish, [_Plant(said, _ANY)])],
            ["My partner's favourite dish is anything with too much garlic.",
             "What dish would you bring to a potluck with picky eaters?"])


def _single_language(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    lang = pick(_LANGUAGES)
    said = rng.choice((f"I've been learning {lang} for about a year now.",
                       f"I practise {lang} every morning on the tram."))
    return ([_Ask("single-hop", "Which language am I learning?", lang,
                  [_Plant(said, _ANY)])],
            ["Which programming language is best for learning data structures?",
             "My kid is learning to read and it is going faster than I expected."])


def _single_editor(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    editor = pick(_EDITORS)
    said = rng.choice((f"I write all my code in {editor}.",
                       f"I do my coding in {editor}, with almost no plugins."))
    return ([_Ask("single-hop", "Which editor do I use for coding?", editor,
                  [_Plant(said, _ANY)])],
            ["My editor at the magazine wants the draft by Friday.",
             "Which code formatter do most teams use these days?"])


def _single_dentist(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    surname = pick(_SURNAMES)
    said = rng.choice((f"My dentist is Dr. {surname}, over on the east side.",
                       f"I finally found a dentist I like: Dr. {surname}."))
    return ([_Ask("single-hop", "What's my dentist's name?", surname,
                  [_Plant(said, _ANY)])],
            ["My dentist appointment got moved again, third time this year.",
             "What's the name of that thing dentists use to check your gums?"])


def _multi(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    rel = pick(list(_RELATIVES))
    name = pick(_RELATIVES[rel])
    who = rng.choice((f"{name} is my {rel}, by the way.",
                      f"I'm having lunch with {name} tomorrow; {name} is my {rel}.",
                      f"Oh, {name}? That's my {rel}."))
    what = rng.randrange(4)
    if what == 0:
        city = pick(_CITIES)
        fact = rng.choice((f"My {rel} lives in {city}.",
                           f"My {rel} has lived in {city} for years."))
        ask = _Ask("multi-hop", f"Which city does {name} live in?", city, [])
        noise = [f"Which city has the best public transport? {name} and I argued about "
                 "it all evening."]
    elif what == 1:
        job = pick(_JOBS)
        fact = rng.choice((f"My {rel} works as {_a(job)}.", f"My {rel} is {_a(job)}."))
        ask = _Ask("multi-hop", f"What does {name} do for a living?", job, [])
        noise = [f"What do people even do for a living in a town that small? {name} "
                 "asked me and I had no idea."]
    elif what == 2:
        inst = pick(_INSTRUMENTS)
        fact = rng.choice((f"My {rel} plays the {inst} in a local band.",
                           f"My {rel} has played the {inst} since childhood."))
        ask = _Ask("multi-hop", f"What instrument does {name} play?", inst, [])
        noise = [f"What instrument should a total beginner play? I asked {name} and got "
                 "no useful answer."]
    else:
        kind = pick(_PET_KINDS)
        fact = rng.choice((f"My {rel} has {kind} at home.",
                           f"My {rel} just adopted {kind}."))
        ask = _Ask("multi-hop", f"What pets does {name} have?", kind, [])
        noise = ["What pets are easiest for a small apartment?"]
    first, second = rng.sample((_EARLY, _LATE), 2)  # never in the same session
    ask.plants = [_Plant(fact, first), _Plant(who, second)]
    return [ask], noise


def _temporal(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    what = int(pick([f"temporal:{i}" for i in range(4)]).split(":")[1])  # one chain each
    if what == 0:
        old, new = pick(_CITIES), pick(_CITIES)
        before = rng.choice((f"I moved to {old} for work.", f"I live in {old} these days."))
        after = rng.choice((f"I just moved to {new}; the boxes are everywhere.",
                            f"We finally finished moving into our new place in {new}."))
        now_q, before_q = "Which city do I live in now?", f"Where did I live before {new}?"
        noise = [f"My friend moved to {pick(_CITIES)} last year and loves it.",
                 "Where do people usually live when they work downtown?"]
    elif what == 1:
        old, new = pick(_COMPANIES), pick(_COMPANIES)
        before = rng.choice((f"I started a new job at {old} this week.",
                             f"I work at {old} as an analyst."))
        after = rng.choice((f"First week at {new} went well; the new team is great.",
                            f"I just accepted an offer from {new} and start on Monday."))
        now_q = "Where do I work now?"
        before_q = f"Which company did I work for before {new}?"
        noise = [f"My brother's company got bought by {pick(_COMPANIES)}.",
                 "Where do I find remote work that is not a scam?"]
    elif what == 2:
        old, new = pick(_CARS), pick(_CARS)
        before = rng.choice((f"I bought a used {old} last weekend.",
                             f"I drive {_a(old)}, nothing fancy."))
        after = rng.choice((f"I sold my old car and got {_a(new)}.",
                            f"Picked up my new {new} from the dealer today."))
        now_q, before_q = "What car do I drive now?", f"What car did I have before the {new}?"
        noise = [f"My neighbour's {pick(_CARS)} blocked the driveway again.",
                 "What car seat do you recommend for a toddler?"]
    else:
        old, new = pick(_PHONES), pick(_PHONES)
        before = rng.choice((f"I got {_a(old)} for my birthday.",
                             f"I'm using {_a(old)} at the moment."))
        after = rng.choice((f"I switched to {_a(new)} last week.",
                            f"My new {new} arrived today, finally."))
        now_q, before_q = "What phone do I use now?", f"Which phone did I have before the {new}?"
        noise = [f"My mum's {pick(_PHONES)} keeps freezing.",
                 "What phone plan do you recommend for travelling?"]
    early, late = _Plant(before, _EARLY), _Plant(after, _LATE)
    return ([_Ask("temporal", now_q, new, [late], "now"),
             _Ask("temporal", before_q, old, [early], "before")], noise)


# planted statement, question (worded apart from it), answer, distractors sharing the
# question's words
_PARAPHRASES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("I'm allergic to shellfish, so I always have to check menus.",
     "Is there anything I should stay away from when ordering at a seafood restaurant?",
     "shellfish", ("We went to a seafood restaurant for my dad's birthday; the view was "
                   "lovely.", "What should I order at a fancy restaurant to look like I "
                   "know what I'm doing?")),
    ("I get terribly seasick, even on short ferry crossings.",
     "Would a whale-watching boat tour be a good birthday gift for me?",
     "seasick", ("My friend booked a whale-watching trip for her birthday.",
                 "What's a good gift for someone who likes tours and museums?")),
    ("I'm terrified of heights; I can't even use glass elevators.",
     "Would a hot air balloon ride be a fun weekend plan for me?",
     "heights", ("What is a fun weekend plan for a rainy city?",
                 "A hot air balloon festival is coming to town next month.")),
    ("I'm lactose intolerant, which makes pizza night complicated.",
     "Can I have the cheesecake at the bakery on the corner?",
     "lactose", ("The bakery on the corner has the best sourdough in town.",
                 "Can you give me a cheesecake recipe for a crowd of ten?")),
    ("I don't have a driver's license; I never learned.",
     "Could I rent a vehicle for the road trip we're planning?",
     "license", ("We're planning a road trip along the coast next summer.",
                 "Is it cheaper to rent or to buy a bike for a month?")),
    ("I work night shifts at the hospital, so I sleep until about 3 pm.",
     "When would be a good time to schedule a video call with me?",
     "night shifts", ("Can you help me schedule a call with the plumber?",
                      "What time is good for a video meeting across three time zones?")),
    ("I can't handle spicy food at all; even mild salsa is too much for me.",
     "Should I try the ghost pepper challenge at the wing place downtown?",
     "spicy", ("The wing place downtown has a quiz night on Thursdays.",
               "Should I try a cooking challenge to get better at weeknight meals?")),
    ("I'm red-green colorblind, which makes some charts unreadable for me.",
     "Which palette should I pick for my dashboard so I can read it?",
     "colorblind", ("Which dashboard tool do you recommend for a small team?",
                    "I want to pick a new palette for the living room walls.")),
    ("I'm vegetarian and have been since college.",
     "What should I get at a steakhouse my team booked for Friday?",
     "vegetarian", ("My team booked an escape room for Friday.",
                    "What is the best way to cook a steak at home?")),
    ("I'm pregnant with our first child, due in the spring.",
     "Is it okay if I go on the roller coasters during the theme park trip?",
     "pregnant", ("The theme park trip is booked for the long weekend.",
                  "Which roller coasters are the fastest in Europe?")),
    ("I have a bad knee from an old football injury and stairs are painful.",
     "Should I take the fourth-floor walk-up apartment that's cheaper?",
     "knee", ("The apartment viewing is on the fourth floor, I think.",
              "Is it cheaper to take the train or to fly to the coast?")),
    ("I don't drink alcohol; I quit five years ago.",
     "What should the bartender make for me at the wedding reception?",
     "alcohol", ("The wedding reception is at a vineyard up north.",
                 "What should I tip the bartender at a private event?")),
    ("I'm afraid of dogs since I was bitten as a kid.",
     "Would volunteering at the animal shelter be a good fit for me?",
     "dogs", ("Is volunteering a good way to meet people in a new town?",
              "The animal shelter is running an adoption day on Saturday.")),
    ("I only have a Linux laptop at home, no Windows machine.",
     "Will I be able to play that new game that only runs on Windows?",
     "Linux", ("That new game everyone talks about looks amazing.",
               "Will I be able to upgrade the memory in an old laptop?")),
)


def _open_domain(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    idx = int(pick([f"paraphrase:{i}" for i in range(len(_PARAPHRASES))]).split(":")[1])
    said, question, answer, noise = _PARAPHRASES[idx]
    return [_Ask("open-domain", question, answer, [_Plant(said, _ANY)])], list(noise)


def _control(rng: Random, pick: _Picker) -> tuple[list[_Ask], list[str]]:
    said = (f"{pick(_NAMES)} and I painted the {rng.choice(_COLORS)} fence behind the "
            f"{pick(_PLACES)} last {rng.choice(_WEEKDAYS)}.")
    return [_Ask(CONTROL, f"Do you remember when I told you: {said}", said,
                 [_Plant(said, _ANY)])], []


_SINGLES: tuple[_Maker, ...] = (_single_relative, _single_pet, _single_birthday,
                                _single_dish, _single_language, _single_editor,
                                _single_dentist)


def _lower(text: str) -> str:
    """``text`` with its first letter in lower case, unless it opens with a name or "I"."""
    first = text.split(" ", 1)[0].strip(",.?!;:")
    if first == "I" or first.startswith("I'") or first in _NAMES or first in _KEEP:
        return text
    return text[:1].lower() + text[1:]


def _plant_in(rng: Random, request: str, plant: str) -> tuple[str, str]:
    """A user turn holding ``plant`` beside an ordinary request, and the planted sentence
    as the turn words it."""
    how = rng.randrange(4)
    if how == 0:
        return f"{plant} {request}", plant
    if how == 1:
        return f"Before I forget: {_lower(plant)} Anyway, {_lower(request)}", _lower(plant)
    if how == 2:
        return f"{request} Also, unrelated: {_lower(plant)}", _lower(plant)
    return f"{request} (Side note: {_lower(plant)})", _lower(plant)


_KEEP = frozenset("Dr. Postgres SQL FastAPI React Django NumPy Express Celery SQLAlchemy".split())


# --- haystacks ------------------------------------------------------------------------

def session_dates(rng: Random, start: float, sessions: int, most_days: float) -> list[float]:
    """Increasing session dates from ``start``, between half a day and ``most_days``
    apart."""
    dates: list[float] = []
    at = start
    for _ in range(sessions):
        at += rng.uniform(0.5, most_days) * DAY
        dates.append(float(int(at)))
    return dates


def assemble(rng: Random, hid: str, requests: list[list[str]], topics: Sequence[_Topic],
             dates: Sequence[float], noise: Sequence[str],
             free: set[tuple[int, int]]) -> tuple[Session, ...]:
    """The sessions: ``noise`` (distractors) put into the ``free`` requests (a small
    haystack gets fewer), then each request followed by an answer of its topic."""
    for text in noise[:len(free)]:
        s, i = rng.choice(sorted(free))
        free.discard((s, i))
        requests[s][i] = _plant_in(rng, requests[s][i], text)[0]
    return tuple(
        Session(f"{hid}-s{s:02d}", dates[s], tuple(
            t for req in requests[s]
            for t in (Turn("user", req), Turn("assistant", _answer(rng, topics[s])))))
        for s in range(len(requests)))

def seed_of(split: str, index: int) -> int:
    if split not in _SEED_BASE:
        raise ValueError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    return _SEED_BASE[split] + index


def haystack(split: str, index: int, *, sessions: int = 30, singles: int = 3,
             multis: int = 2, temporals: int = 2, opens: int = 3) -> Haystack:
    """One user's history with planted facts and the questions about them (see the
    module docstring); the same arguments give the same haystack in every process."""
    if sessions < 10:
        raise ValueError("a haystack needs at least 10 sessions")
    seed = seed_of(split, index)
    rng = Random(seed)
    pick = _Picker(rng)
    hid = f"{split}-{index:04d}"

    asks: list[_Ask] = []
    noise: list[str] = []
    makers: list[_Maker] = [*rng.sample(_SINGLES, singles), *[_multi] * multis,
                            *[_temporal] * temporals, *[_open_domain] * opens, _control]
    for make in makers:
        got, extra = make(rng, pick)
        asks += got
        noise += extra

    # the filler: dated sessions of one topic each, user and assistant turns alternating
    start = datetime(2024, 1, 1, tzinfo=UTC).timestamp() + rng.randrange(540) * DAY
    dates = session_dates(rng, start, sessions, 5.0)
    names = list(_TOPICS)
    topics = [_TOPICS[rng.choice(names)] for _ in range(sessions)]
    requests = [_requests(rng, t, rng.randint(3, 6)) for t in topics]

    # every planted sentence and distractor goes into its own user turn
    free = {(s, i) for s in range(sessions) for i in range(len(requests[s]))}
    plants = [p for a in asks for p in a.plants]
    rng.shuffle(plants)
    for p in sorted(plants, key=lambda p: p.sessions[1] - p.sessions[0]):  # narrow first
        lo, hi = int(p.sessions[0] * sessions), int(p.sessions[1] * sessions)
        choices = sorted((s, i) for s, i in free if lo <= s < max(hi, lo + 1))
        if not choices:
            raise ValueError(f"{sessions} sessions are too few for the planted facts")
        s, i = rng.choice(choices)
        free.discard((s, i))
        requests[s][i], p.text = _plant_in(rng, requests[s][i], p.text)
        p.key = (f"{hid}-s{s:02d}", 2 * i)
    built = assemble(rng, hid, requests, topics, dates, noise, free)
    questions = []
    for n, a in enumerate(asks):
        keys = tuple(p.key for p in a.plants if p.key is not None)
        questions.append(Question(f"{hid}-q{n:02d}", a.kind, a.text, a.answer, keys,
                                  tuple(p.text for p in a.plants), a.sub))
    return Haystack(hid, split, seed, built, tuple(questions), dates[-1] + DAY)


def haystacks(split: str, users: int, **sizes: int) -> list[Haystack]:
    """The first ``users`` haystacks of ``split``."""
    return [haystack(split, i, **sizes) for i in range(users)]
