"""Tests of the inline rules-based extractor (memd.engine.learning.extract)."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.engine.learning import extract as extract_module
from memd.engine.learning.extract import ExtractedFact, Extraction, extract, extract_entities
from memd.types import Provenance, Tier

PROPS = settings(max_examples=300, deadline=None)


def facts(text: str) -> list[tuple[str, str, str]]:
    return [(e.fact.category, e.fact.key, e.fact.value) for e in extract(text) if e.fact]


def only(text: str) -> Extraction:
    found = extract(text)
    assert len(found) == 1, found
    return found[0]


# -- facts -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "category", "key", "value", "confidence"),
    [
        ("My name is Alex", "identity", "name", "Alex", 1.0),
        ("my name is alex", "identity", "name", "alex", 1.0),
        ("Call me Sam", "identity", "name", "Sam", 0.9),
        ("I'm Alex", "identity", "name", "Alex", 0.8),
        ("Hi, I am Priya Sharma.", "identity", "name", "Priya Sharma", 0.8),
        ("I go by Alex", "identity", "name", "Alex", 0.9),
        ("I work at Google", "identity", "employer", "Google", 0.9),
        ("I work for a small startup in Berlin", "identity", "employer", "a small startup", 0.9),
        ("I'm a backend developer", "identity", "role", "backend developer", 0.9),
        ("I work as an SRE", "identity", "role", "SRE", 0.9),
        ("I live in New York City", "identity", "location", "New York City", 0.9),
        ("I'm based in Berlin, Germany", "identity", "location", "Berlin", 0.9),
        ("I'm from India", "identity", "location", "India", 0.8),
        ("My pronouns are they/them", "identity", "pronouns", "they/them", 1.0),
        ("I use she/her pronouns", "identity", "pronouns", "she/her", 1.0),
        ("My timezone is Europe/Berlin", "identity", "timezone", "Europe/Berlin", 1.0),
        ("I'm in PST", "identity", "timezone", "PST", 0.9),
        ("My project is called memd", "identity", "project", "memd", 0.9),
        ("I prefer tabs over spaces", "preference", "indentation", "tabs", 0.9),
        ("I prefer Python", "preference", "language", "Python", 0.9),
        ("I prefer Python and Go for backend work", "preference", "language", "Python and Go",
         0.9),
        ("I think I prefer tabs", "preference", "indentation", "tabs", 0.6),
        ("I'd rather use spaces", "preference", "indentation", "spaces", 0.8),
        ("I like Python", "preference", "language", "Python", 0.8),
        ("I love vim", "preference", "editor", "vim", 0.8),
        ("I use Neovim for editing", "preference", "editor", "Neovim", 0.85),
        ("I always use 4 spaces", "preference", "indentation", "4 spaces", 0.85),
        ("I'm on macOS", "preference", "os", "macOS", 0.85),
        ("I'm running Ubuntu 22.04 on my laptop", "preference", "os", "Ubuntu 22.04", 0.85),
        ("I mostly write Python", "preference", "language", "Python", 0.85),
        ("My favorite language is Rust", "preference", "language", "Rust", 0.95),
        ("My favourite color is dark blue", "preference", "favorite_color", "dark blue", 0.95),
        ("My editor is Kakoune", "preference", "editor", "Kakoune", 0.95),
        ("I deploy with Kubernetes", "preference", "deploy_tool", "Kubernetes", 0.9),
        ("We deploy everything to Fly.io", "preference", "deploy_tool", "Fly.io", 0.9),
        ("We use Postgres for everything", "preference", "database", "Postgres", 0.85),
        ("Our stack is Django, Postgres and React", "preference", "stack",
         "Django, Postgres and React", 0.9),
        ("We're based in Austin", "identity", "company_location", "Austin", 0.8),
        ("I'm allergic to peanuts", "constraint", "allergy", "peanuts", 1.0),
        ("I'm a vegetarian", "constraint", "diet", "vegetarian", 0.95),
        ("I don't eat pork", "constraint", "diet", "pork", 0.9),
        ("We're using GitHub Actions for CI", "preference", "ci", "GitHub Actions", 0.85),
        ("I've been using Rust for years", "preference", "language", "Rust", 0.8),
        ("my timezone is UTC+2", "identity", "timezone", "UTC+2", 1.0),
        ("I'm in the CET timezone", "identity", "timezone", "CET", 0.9),
        ("My name is Dr.  Smith", "identity", "name", "Dr.  Smith", 1.0),
        ("I want short answers", "preference", "response_style", "short answers", 0.8),
    ],
)
def test_fact(text: str, category: str, key: str, value: str, confidence: float) -> None:
    found = [e for e in extract(text) if e.fact]
    assert found, f"no fact in {text!r}"
    fact = found[0].fact
    assert fact == ExtractedFact(category, key, value, confidence)
    assert value in text
    assert not found[0].is_correction


@pytest.mark.parametrize(
    ("text", "provenance", "tier"),
    [
        ("My name is Alex", Provenance.USER_STATED, Tier.SEMANTIC),
        ("I prefer tabs over spaces", Provenance.PREFERENCE, Tier.PROCEDURAL),
        ("I deploy with Kubernetes", Provenance.FACT, Tier.SEMANTIC),
        ("I'm allergic to peanuts", Provenance.USER_STATED, Tier.PROCEDURAL),
        ("Never use semicolons in JS", Provenance.INSTRUCTION, Tier.PROCEDURAL),
        ("Actually, call me Sam", Provenance.CORRECTION, Tier.SEMANTIC),
    ],
)
def test_provenance_and_tier(text: str, provenance: Provenance, tier: Tier) -> None:
    ex = only(text)
    assert (ex.provenance, ex.tier) == (provenance, tier)
    assert 0.0 <= ex.importance <= 1.0 and 0.0 <= ex.confidence <= 1.0


# -- memory text -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "memory"),
    [
        ("My name is Alex", "User's name is Alex"),
        ("I prefer tabs over spaces", "User prefers tabs over spaces"),
        ("I deploy with Kubernetes", "User deploys with Kubernetes"),
        ("Never use semicolons in JS", "User wants the assistant to never use semicolons in JS"),
        ("Please always reply to me in French",
         "User wants the assistant to always reply to the user in French"),
        ("Don't add comments to the code",
         "User doesn't want the assistant to add comments to the code"),
        ("Stop adding emojis", "User wants the assistant to stop adding emojis"),
        ("I'd like you to answer in bullet points",
         "User wants the assistant to answer in bullet points"),
        ("From now on, respond in French",
         "User wants the assistant to respond in French from now on"),
        ("Use tabs from now on", "User wants the assistant to use tabs from now on"),
        ("Remember that the staging DB is on port 5433", "the staging DB is on port 5433"),
        ("Remember to run the linter", "User wants the assistant to run the linter"),
        # the request to remember said after what it is about
        ("Our deploy database is called rocketdb_prod_v7, remember that.",
         "Our deploy database is called rocketdb_prod_v7"),
        ("The staging host is staging.rocket.internal, please remember it.",
         "The staging host is staging.rocket.internal"),
        ("We deploy from the release branch, keep that in mind.",
         "We deploy from the release branch"),
        ("The build uses Bazel; don't forget that!", "The build uses Bazel"),
        ("I never use semicolons", "User never uses semicolons"),
        ("I never learned Rust", "User never learned Rust"),  # a past tense stays one
        ("I always need coffee first", "User always needs coffee first"),
        ("I can't share customer data with third parties",
         "User can't share customer data with third parties"),
        ("We must support Safari", "User's team must support Safari"),
        ("I must not have sugar after dinner", "User must not have sugar after dinner"),
        ("I shouldn't share the API key", "User shouldn't share the API key"),
        ("I don't want posts longer than 800 words",
         "User doesn't want posts longer than 800 words"),
        ("I hate meetings", "User hates meetings"),
        ("We are a small agency in Pune", "User's team is a small agency in Pune"),
        ("We sell handmade soap", "User's team sells handmade soap"),
        ("Our company sells accounting software", "User's company sells accounting software"),
        ("I'm a senior engineer at Stripe", "User is a senior engineer"),
        ("I like to keep functions under 20 lines",
         "User likes to keep functions under 20 lines"),
        ("I'm running Ubuntu on my laptop", "User is running Ubuntu on the user's laptop"),
        # the user's own verb, and "we" as the user's team, not a company never named
        ("I'm currently living in Roppongi", "User is living in Roppongi"),
        ("We're based in Canada", "User's team is based in Canada"),
        ("Our office is located in Lyon", "User's office is located in Lyon"),
        # a clause that leaves out its subject has the one before it, not the assistant
        ("I want to stock up, but don't want to waste any", "User doesn't want to waste any"),
        ("I wake up early and always drink coffee", "User always drinks coffee"),
        ("Use tabs and never add comments",
         "User wants the assistant to never add comments"),
        ("I'll send the rest, so don't summarize yet",
         "User doesn't want the assistant to summarize yet"),
    ],
)
def test_memory_text(text: str, memory: str) -> None:
    assert extract(text)[0].text == memory


def test_instruction_has_no_fact() -> None:
    ex = only("Never use semicolons in JS")
    assert ex.fact is None and not ex.is_correction
    assert ex.entities == ("javascript", "semicolons")


def test_role_at_company_gives_role_and_employer() -> None:
    assert facts("I'm a senior engineer at Stripe") == [
        ("identity", "role", "senior engineer"), ("identity", "employer", "Stripe")]


# -- several per message -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My name is Priya and I deploy with Kubernetes",
         [("identity", "name", "Priya"), ("preference", "deploy_tool", "Kubernetes")]),
        ("My name is Alex and I prefer Python",
         [("identity", "name", "Alex"), ("preference", "language", "Python")]),
        ("i live in berlin and i work at zalando",
         [("identity", "location", "berlin"), ("identity", "employer", "zalando")]),
        ("Hey! I'm Jordan. I mostly write Python, and I prefer Jupyter.",
         [("identity", "name", "Jordan"), ("preference", "language", "Python"),
          ("preference", "editor", "Jupyter")]),
        ("I like Python and Go", [("preference", "language", "Python and Go")]),
        # a fact said in passing, inside a message about something else
        ("Before I forget: I live in Rotterdam these days. Anyway, what about taxes?",
         [("identity", "location", "Rotterdam")]),
        ("Perfect, I'll try that tonight. Also, unrelated: I just moved to Edinburgh; "
         "the boxes are everywhere.", [("identity", "location", "Edinburgh")]),
        ("Does that rewrite history? (Side note: I'm allergic to shellfish.)",
         [("constraint", "allergy", "shellfish")]),
        ("On a side note, I prefer tabs over spaces.",
         [("preference", "indentation", "tabs")]),
    ],
)
def test_several_facts_in_order(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert facts(text) == expected


def test_priya_gives_two_readable_extractions() -> None:
    found = extract("My name is Priya and I deploy with Kubernetes")
    assert [e.text for e in found] == ["User's name is Priya", "User deploys with Kubernetes"]
    assert found[1].entities == ("kubernetes",)


def test_duplicates_in_one_message_collapse() -> None:
    assert len(extract("I prefer tabs. I prefer tabs! I prefer tabs")) == 1


# -- corrections -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("Actually, call me Sam", "name", "Sam"),
        ("No, my name is Sam", "name", "Sam"),
        ("Correction: I use spaces", "indentation", "spaces"),
        ("I meant to say my name is Sam", "name", "Sam"),
        ("Call me Sam instead", "name", "Sam"),
        ("From now on, call me Sam", "name", "Sam"),
        ("My name is actually Sam", "name", "Sam"),
        ("My editor is not VS Code but Neovim", "editor", "Neovim"),
        ("No. I use spaces.", "indentation", "spaces"),
        ("Actually I prefer spaces", "indentation", "spaces"),
        ("I've switched from vim to Emacs", "editor", "Emacs"),
        ("I moved to Lisbon", "location", "Lisbon"),
        ("No, that's wrong. I'm using Python 3.12, not 3.8", "language", "Python 3.12"),
    ],
)
def test_correction(text: str, key: str, value: str) -> None:
    found = [e for e in extract(text) if e.fact]
    assert len(found) == 1
    ex = found[0]
    assert ex.is_correction and ex.provenance == Provenance.CORRECTION
    assert ex.fact is not None and (ex.fact.key, ex.fact.value) == (key, value)
    assert ex.importance >= 0.9


def test_call_me_after_a_name_corrects_it() -> None:
    first, second = extract("My name is Alexander but call me Al")
    assert first.fact and first.fact.value == "Alexander" and not first.is_correction
    assert second.fact and (second.fact.key, second.fact.value) == ("name", "Al")
    assert second.is_correction


def test_call_me_confidence_survives_a_correction() -> None:
    ex = only("Actually, call me Sam")
    assert ex.fact == ExtractedFact("identity", "name", "Sam", 0.9)
    assert ex.text == "User wants to be called Sam"


def test_not_x_but_y_only_when_explicit() -> None:
    ex = only("I deploy with Podman, not Docker")
    assert ex.fact and ex.fact.value == "Podman" and not ex.is_correction


def test_from_now_on_instruction_is_a_correction() -> None:
    ex = only("From now on, respond in French")
    assert ex.is_correction and ex.tier == Tier.PROCEDURAL and ex.fact is None


# -- nothing to extract ------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t ",
        "I'm tired",
        "I'M TIRED",
        "I'm a bit confused",
        "I'm Java developer",
        "I'm Sam's manager",
        "What is my name?",
        "Do you know my name is Alex?",
        "what editor should I use",
        "Can you remember that I prefer tabs?",
        "Unrelated question: what is a monad?",
        "Side note: the build is slow today.",
        "I prefer tabs, do you?",
        "I wonder if I prefer tabs",
        "If I prefer tabs, what then",
        "```\nmy name is Bob\nI prefer tabs over spaces\n```",
        "```python\n# I deploy with Kubernetes\nname = 'Alex'",
        "    my name is Bob  # indented code",
        "> My name is Bob and I prefer emacs",
        "asdf qwer zxcv",
        "!!! ??? ### ;;; ...",
        "Je m'appelle Alex et je préfère Python",
        "Ich heiße Alex",
        "これはテストです",
        "lol",
        "ok thanks",
        "Never mind",
        "Don't worry about it",
        "I can't believe it works",
        "I can't figure out why this fails",
        "I should not have reacted to your mention of digital coupons",
        "I shouldn't have eaten so late",
        "I shouldn't have to go through all this hassle",
        "I like your answer",
        "I like it",
        "I prefer the second option",
        "I work at night",
        "I live in fear of merge conflicts",
        "My editor is broken",
        "My company is small",
        "My project is crashing on startup",
        "My name is not important",
        "My name is important to me",
        "I'm running late",
        "I want to refactor this function",
        "I need to deploy this to AWS by Friday",
        "Can you help me fix this bug?",
        "call me later",
        "I'm not Alex",
        "I don't prefer tabs",
        "I hate to ask again but can you explain closures",
        "Never seen this error before",
        "My favorite part is the error handling",
        "I just moved to the new API",
        "My app is crashing on startup",
        "My name is Dr.",
        "I'm getting a TypeError when I call this function with None",
        "I use this helper in three places, can we make it generic",
        # statements and other people's words, not orders or facts about the user
        "I live in the same area as the school",
        "It's frustrating that we rely on plastic and don't have better alternatives.",
        "I've been busy lately and don't have a lot of time to cook.",
        "In the future, the continued development of these technologies will lead to more.",
        "\"I'm Lirien,\" she says, extending a hand.",
        "WE ARE THE POWER OF TRUE LOVE ~ Zarina",
        # advice a pasted reply gives its reader, and a courtesy
        "Don't forget to take care of yourself too!",
        "Don't be too hard on yourself if you miss a workout.",
        "Don't hesitate to reach out if you have more questions.",
        "Don't be so robotic.",
        "I would like you to do so.",
    ],
)
def test_nothing_extracted(text: str) -> None:
    assert extract(text) == []


def test_code_fence_hides_only_the_code() -> None:
    text = "```\nmy name is Bob\n```\nMy name is Alex"
    assert facts(text) == [("identity", "name", "Alex")]


def test_over_long_and_short_clauses_are_ignored() -> None:
    long_clause = "I prefer " + "very " * 70 + "tabs"
    assert extract(long_clause) == []
    assert extract("Use tabs") == []


def test_im_name_needs_a_name_like_word() -> None:
    assert facts("I'm Alex from Berlin") == [("identity", "name", "Alex")]
    assert facts("I'm Google certified") == []


def test_hedge_caps_confidence() -> None:
    ex = only("Maybe I prefer spaces")
    assert ex.confidence == 0.6 and ex.fact and ex.fact.confidence == 0.6


def test_negated_preference_keeps_text_but_no_fact() -> None:
    ex = only("I prefer not using Docker")
    assert ex.text == "User prefers not using Docker" and ex.fact is None


# -- entities ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "entities"),
    [
        ("I deploy with Kubernetes", ("kubernetes",)),
        ("We run k8s on AWS with Terraform", ("aws", "kubernetes", "terraform")),
        ("I prefer tabs over spaces", ("spaces", "tabs")),
        ("I moved from VS Code to Visual Studio Code", ("vscode",)),
        ("My name is Priya Sharma and I live in New York", ("new york", "priya sharma")),
        ("learning #rust and #WebDev this week", ("rust", "webdev")),
        ("Node.js vs. Deno, or C++ and C#?", ("c#", "c++", "deno", "node.js")),
        ("I go to the shop", ()),
        ("Go is great, I write Go daily", ("go",)),
        ("the rust on my bike", ()),
        ("", ()),
        ("```\nimport Kubernetes\n```", ()),
    ],
)
def test_extract_entities(text: str, entities: tuple[str, ...]) -> None:
    assert extract_entities(text) == entities


def test_extraction_entities_are_sorted_lowercase_and_unique() -> None:
    (ex,) = extract("I prefer Python over Java and PYTHON over Ruby")
    assert ex.entities == tuple(sorted(set(ex.entities)))
    assert all(e == e.lower() for e in ex.entities)
    assert {"python", "java", "ruby"} <= set(ex.entities)


# -- robustness --------------------------------------------------------------------------
def test_deterministic() -> None:
    text = "My name is Priya and I deploy with Kubernetes. Always use tabs. I'm on Linux."
    assert extract(text) == extract(text)


def _patterns() -> list[re.Pattern[str]]:
    """Every compiled pattern in the package's modules, rule regexes included."""
    modules = [importlib.import_module(f"{extract_module.__name__}.{m.name}")
               for m in pkgutil.iter_modules(extract_module.__path__)]
    found: list[re.Pattern[str]] = []
    for value in (v for mod in (extract_module, *modules) for v in vars(mod).values()):
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, re.Pattern):
                found.append(item)
            elif isinstance(getattr(item, "regex", None), re.Pattern):
                found.append(item.regex)
    return list({id(p): p for p in found}.values())  # a pattern imported elsewhere: once


def test_no_regex_nests_unbounded_repeats() -> None:
    """Catastrophic backtracking needs a repeat inside a repeat; the module has none."""
    parser = pytest.importorskip("re._parser")
    constants = pytest.importorskip("re._constants")
    repeats = {constants.MAX_REPEAT, constants.MIN_REPEAT,
               getattr(constants, "POSSESSIVE_REPEAT", constants.MAX_REPEAT)}

    def children(av: object) -> list[object]:
        if isinstance(av, parser.SubPattern):
            return [av]
        if isinstance(av, tuple | list):
            return [c for x in av for c in children(x)]
        return []

    def nested(tree: object, inside: bool) -> bool:
        for op, av in tree:  # type: ignore[attr-defined]
            if op in repeats:
                many = av[1] > 1
                if (many and inside) or nested(av[2], inside or many):
                    return True
            elif any(nested(c, inside) for c in children(av)):
                return True
        return False

    patterns = _patterns()
    assert len(patterns) > 40
    bad = [p.pattern for p in patterns if nested(parser.parse(p.pattern, p.flags), False)]
    assert bad == []


@pytest.mark.parametrize(
    "chunk",
    [
        "a" * 64, " " * 64, "." * 64, "," * 64, "?" * 64, "`" * 63, "I " * 32, "my name is ",
        "not " * 16, "and I " * 8, "I prefer tabs over spaces and ", "#" * 64, "call me " * 8,
        "I'm " * 16, "- " * 32, "\n" * 16, "'" * 64, "Always never don't ",
    ],
)
def test_20kb_message_is_handled(chunk: str) -> None:
    """No catastrophic backtracking: a pathological 20 KB message completes at once."""
    text = (chunk * (20_000 // len(chunk) + 1))[:20_000]
    found = extract(text)
    assert all(e.fact is None or e.fact.value in text for e in found)
    assert isinstance(extract_entities(text), tuple)


TRIGGERS = st.sampled_from([
    "my name is ", "call me ", "I'm ", "I am a ", "I work at ", "I live in ", "I prefer ",
    " over ", "I like ", "I use ", " for ", "I deploy with ", "we use ", "our stack is ",
    "my favorite ", " is ", "I can't ", "never ", "always ", "don't ", "from now on ",
    "remember that ", "actually, ", "no, ", " and I ", ", ", ". ", "? ", "\n", "```", " not ",
    " but ", "Python", "Kubernetes", "Alex", "tabs", "spaces", "İ", "ΑΣ", "’", "Dr.  ",
    "e.g.  ", "  ", "\u2028", "I switched to ", "not Docker but ",
])
MESSAGES = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(TRIGGERS, st.text(max_size=12)), max_size=30).map("".join),
)


@PROPS
@given(MESSAGES)
def test_never_raises_and_facts_are_grounded(text: str) -> None:
    for ex in extract(text):
        assert ex.text and isinstance(ex.entities, tuple)
        assert 0.0 <= ex.confidence <= 1.0 and 0.0 <= ex.importance <= 1.0
        if ex.fact is not None:
            assert ex.fact.value and ex.fact.value in text  # a slice: stricter than casefold
            assert ex.fact.category in ("identity", "preference", "constraint", "instruction",
                                        "note")
    assert extract(text) == extract(text)


@PROPS
@given(MESSAGES)
def test_entities_never_raise(text: str) -> None:
    entities = extract_entities(text)
    assert list(entities) == sorted(set(entities))
    assert all(e == e.lower() for e in entities)


@pytest.mark.parametrize("text,memory", [
    ("Let's use SQLite for the cache, not Redis.",
     "User decided to use SQLite for the cache, not Redis"),
    ("We decided to keep the retry limit at 3.", "User decided: keep the retry limit at 3"),
    ("Decision: store timestamps as UTC epoch seconds.",
     "User decided: store timestamps as UTC epoch seconds"),
    ("we'll stick with port 8431 for the dev server",
     "User decided to stick with port 8431 for the dev server"),
])
def test_a_decision_about_the_work_is_kept(text: str, memory: str) -> None:
    found = extract(text)
    assert [e.text for e in found] == [memory]
    assert found[0].fact is None and found[0].importance >= 0.8


@pytest.mark.parametrize("text", ["Let's see what happens.", "Let's use a different approach?",
                                  "Should we decide on Postgres?"])
def test_a_suggestion_or_question_is_no_decision(text: str) -> None:
    assert extract(text) == []
