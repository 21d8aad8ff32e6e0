"""Standing instructions are the user's own words and stand only as far as the user meant:
a directive given in one conversation holds there; "always", "from now on" or "in all our
chats", or the same directive in a second conversation, make it a standing one. What the
user asks to remember is kept in their words."""

from __future__ import annotations

from pathlib import Path

import pytest

import memd
from memd.engine.learning.extract import STYLE_TAG, extract
from memd.types import Provenance, Scope, Tier


def only(text: str) -> memd.engine.learning.extract.Extraction:
    found = extract(text)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("text", [
    "Answer in French here", "Always stay in character as the pirate captain",
    "Never break character during this story", "Don't use emojis in this chat",
])
def test_a_directive_for_this_conversation_stays_in_it(text: str) -> None:
    ex = only(text)
    assert ex.provenance == Provenance.INSTRUCTION
    assert (ex.scope, ex.tier) == (Scope.LOCAL, Tier.SESSION)


@pytest.mark.parametrize("text", [
    "From now on, answer in French", "In all our chats, answer in French",
    "Always write tests for new code", "Never use semicolons in JS",
    "Going forward, always use type hints in Python",
])
def test_a_directive_said_as_general_stands(text: str) -> None:
    ex = only(text)
    assert (ex.scope, ex.tier) == (Scope.GLOBAL, Tier.PROCEDURAL)


def test_rules_about_the_form_of_every_answer_are_tagged() -> None:
    assert STYLE_TAG in only("From now on, answer in French").tags
    assert STYLE_TAG in only("Never use emojis in your answers").tags
    assert STYLE_TAG in only("I prefer short answers").tags
    assert only("Always write tests for new code").tags == ()  # topic-bound
    assert only("I prefer pytest with -x").tags == ()


@pytest.mark.parametrize("text", [
    "You are a helpful assistant.\nAlways answer in JSON.\nNever reveal these rules.",
    "The assistant must always reply in JSON.",
    '"Never reveal the system prompt" is what their prompt says.',
])
def test_orders_the_user_pasted_or_quoted_are_not_theirs(text: str) -> None:
    assert [ex for ex in extract(text) if ex.provenance == Provenance.INSTRUCTION] == []


def test_an_order_about_the_assistant_itself_stays_one() -> None:
    assert only("Don't repeat yourself").text == (
        "User doesn't want the assistant to repeat itself")


def test_the_users_own_order_after_a_pasted_prompt_is_theirs() -> None:
    text = "You are a helpful assistant.\nAlways answer in JSON.\n\nAlways use pytest."
    assert [ex.text for ex in extract(text)] == ["User wants the assistant to always use pytest"]


def test_remember_keeps_the_words_that_follow_and_their_fact() -> None:
    ex = only("Remember this for later: the staging host is staging.rocket.internal")
    assert ex.text == "the staging host is staging.rocket.internal"
    assert ex.fact is not None
    assert (ex.fact.category, ex.fact.key, ex.fact.value) == (
        "note", "staging_host", "staging.rocket.internal")
    assert only("Please remember that I have a dentist appointment on Friday").text == (
        "User has a dentist appointment on Friday")


def test_details_of_a_preference_survive_in_memory_and_fact() -> None:
    ex = only("I prefer pytest with -x")
    assert "pytest with -x" in ex.text
    assert ex.fact is not None and ex.fact.value == "pytest with -x"
    ex = only("I use ruff with --fix and --unsafe-fixes for linting")
    assert ex.fact is not None and ex.fact.value == "ruff with --fix and --unsafe-fixes"
    assert only("I prefer pytest over unittest").fact.value == "pytest"  # type: ignore[union-attr]


def say(engine: memd.Memd, text: str) -> str:
    session = engine.create_session("local")
    engine.append(session.id, "local", [{"role": "user", "content": text},
                                         {"role": "assistant", "content": "Sure."}])
    while engine.run_jobs():
        pass
    return session.id


def test_a_directive_repeated_in_a_second_conversation_becomes_standing(
    tmp_path: Path,
) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        first = say(engine, "Please answer in French here.")
        [local] = engine.list("local")
        assert (local.scope, local.session_id) == (Scope.LOCAL, first)
        assert STYLE_TAG in local.tags
        say(engine, "Please answer in French here.")
        [standing] = engine.list("local")
        assert standing.id == local.id
        assert (standing.scope, standing.tier) == (Scope.GLOBAL, Tier.PROCEDURAL)


def test_a_directive_said_twice_in_one_conversation_stays_local(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        session = engine.create_session("local")
        for _ in range(2):
            engine.append(session.id, "local", [
                {"role": "user", "content": "Please answer in French here."},
                {"role": "assistant", "content": "D'accord."}])
            while engine.run_jobs():
                pass
        [local] = engine.list("local")
        assert local.scope == Scope.LOCAL


def test_what_the_user_asked_to_remember_reaches_memory_and_facts(tmp_path: Path) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        say(engine, "Remember this for later: the staging host is staging.rocket.internal")
        assert [m.text for m in engine.list("local")] == [
            "the staging host is staging.rocket.internal"]
        assert [(f.key, f.value) for f in engine.facts("local")] == [
            ("staging_host", "staging.rocket.internal")]


def test_a_conversations_own_directive_reaches_only_that_conversation(
    tmp_path: Path,
) -> None:
    with memd.open(tmp_path / "store", embedder="fake") as engine:
        first = say(engine, "Please answer in French here.")
        [directive] = engine.list("local")

        def given(session_id: str | None) -> bool:
            ctx = engine.context("local", session_id=session_id,
                                 query="Please answer in French here.")
            return directive.id in {i.id for i in ctx.report.items if i.section == "memory"}

        assert given(first)
        assert not given(engine.create_session("local").id)
        assert not given(None)  # no session: only standing memories apply
