"""Recall that helps: a block's lines in score order and each said once, nothing for an
unrelated question, the user's statements before their questions, the assistant's
replies shown as the assistant's, and standing instructions only when they apply."""

from __future__ import annotations

from pathlib import Path

import memd
from memd.engine.block.compile import (
    MEMORIES_HEADER,
    RECALL_HEADER,
    RECALL_KIND,
    RULES_HEADER,
    STYLE_RULE,
    TOPIC_RULE,
    Candidate,
    memory_block_lines,
    pack_memory_block,
    same_line,
)
from memd.engine.block.inject import build
from memd.engine.learning.extract import STYLE_TAG
from memd.engine.memory import Memd
from memd.engine.retrieval.recall import only_asks
from memd.engine.retrieval.relevance import content_words, related
from memd.models.tokens import count_text
from memd.types import Scope, Tier


def cand(kind: str, cid: str, text: str, score: float, rule: str = "") -> Candidate:
    return Candidate(kind, cid, text, count_text(text), score, 0.5, rule)


def test_each_section_is_in_score_order() -> None:
    mems = [cand("memory", "low", "User keeps bees on the roof", 0.2),
            cand("memory", "high", "User lives in Lisbon near the river", 0.9),
            cand(RECALL_KIND, "r1", "[2024-01-02] User: my cat is called Miso", 0.3),
            cand(RECALL_KIND, "r2", "[2024-01-03] User: the staging host is db7", 0.6)]
    lines = memory_block_lines([], mems)
    mem_at, recall_at = lines.index(MEMORIES_HEADER), lines.index(RECALL_HEADER)
    assert lines[mem_at + 1:mem_at + 3] == ["- User lives in Lisbon near the river",
                                            "- User keeps bees on the roof"]
    assert lines[recall_at + 1].endswith("the staging host is db7")
    assert lines[recall_at + 2].endswith("my cat is called Miso")


def test_no_line_is_said_twice() -> None:
    memory = cand("memory", "m", "User's staging host is staging.rocket.internal", 0.9)
    recalled = cand(RECALL_KIND, "r", "[2024-01-02] User: the staging host is "
                    "staging.rocket.internal\nAssistant (earlier reply): Noted.", 0.5)
    twice = cand(RECALL_KIND, "r2", "[2024-01-02] User: the staging host is "
                 "staging.rocket.internal\nAssistant (earlier reply): Noted.", 0.4)
    other = cand("memory", "o", "User's cat is called Miso", 0.3)
    _, mems, lines, _ = pack_memory_block([], [memory, recalled, twice, other], 2000, None)
    assert [m.id for m in mems] == ["m", "o"]
    assert sum("staging.rocket.internal" in line for line in lines) == 1
    # a line a block sent earlier in the session holds is not sent again
    _, mems, _, _ = pack_memory_block([], [recalled, other], 2000, None,
                                      held=[memory.text])
    assert [m.id for m in mems] == ["o"]
    assert same_line(content_words("the staging host is db7"),
                     content_words("The staging host is db7."))
    assert not same_line(content_words("the staging host is db7"),
                         content_words("the production host is db9"))


def test_instructions_stay_within_their_share_and_come_first() -> None:
    rules = [cand("memory", f"rule{i}", f"Always answer questions about topic{i} with a "
                  f"numbered list of steps{i}", 0.9, TOPIC_RULE) for i in range(20)]
    fact = cand("fact", "f", "editor: vim", 0.5)
    memory = cand("memory", "m", "User's laptop runs Debian", 0.4)
    budget = 400
    facts, mems, lines, tokens = pack_memory_block([fact], [*rules, memory], budget, None,
                                                   share=0.25)
    assert tokens <= budget and facts == [fact] and memory in mems
    taken = [m for m in mems if m.rule]
    assert 0 < len(taken) < len(rules)
    assert sum(m.tokens + 2 for m in taken) <= budget // 4
    assert lines[1] == RULES_HEADER


def test_an_item_is_related_by_its_cosine_and_the_words_it_shares() -> None:
    query = content_words("What is the name of my cat?")
    assert query == {"name", "cat"}
    assert related(0.35, query, "My cat's name is Miso.", 0.3, 0.5)
    assert not related(0.35, query, "I adopted a dog last week.", 0.3, 0.5)  # no words
    assert not related(0.25, query, "My cat is asleep.", 0.3, 0.5)  # under the floor
    # every word the request is about: half the floor is enough, not less
    assert related(0.2, query, "My cat's name is Miso.", 0.3, 0.5)
    assert not related(0.1, query, "My cat's name is Miso.", 0.3, 0.5)
    assert related(0.55, query, "Miso sleeps all day.", 0.3, 0.5)  # close enough alone
    assert related(0.35, content_words("otters"), "otters hold hands", 0.3, 0.5)


def test_a_question_alone_only_asks() -> None:
    assert only_asks("What is the staging host?")
    assert only_asks("what is the staging host again")
    assert only_asks("Where is it? And who runs it?")
    assert not only_asks("The staging host is db7.")
    assert not only_asks("I moved the staging host to db7. Can you update the docs?")
    assert not only_asks("")


def settle(engine: Memd) -> None:
    while engine.run_jobs():
        pass


def chat(engine: Memd, user: str, *turns: str) -> None:
    s = engine.create_session(user)
    roles = ("user", "assistant")
    engine.append(s.id, user, [{"role": roles[i % 2], "content": t}
                               for i, t in enumerate(turns)])


def block_for(engine: Memd, user: str, query: str) -> str:
    facts, mems = engine.memory_candidates(user, query, sent_chains=())
    block = build(facts, mems, 2000, "user", None,
                  share=engine.settings.instruction_share)
    return "" if block is None else block.text


def test_an_unrelated_question_gets_no_block(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        chat(engine, "u", "My sourdough starter needs feeding twice a day with rye flour.",
             "Rye flour keeps a starter lively.")
        engine.add("User bakes sourdough bread with rye flour every weekend", "u")
        engine.add("When the user asks about bread, answer with grams not cups", "u",
                   tier=Tier.PROCEDURAL, provenance="instruction")
        settle(engine)
        assert "rye flour" in block_for(engine, "u", "How much rye flour does my sourdough "
                                                     "starter need?")
        assert block_for(engine, "u", "Which kubernetes ingress controller is fastest?") == ""


def test_a_style_rule_applies_to_every_question_a_topic_rule_only_to_its_topic(
    tmp_path: Path,
) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        engine.add("Answer in French", "u", tier=Tier.PROCEDURAL, provenance="instruction",
                   tags=[STYLE_TAG])
        engine.add("When writing SQL migrations use lowercase keywords", "u",
                   tier=Tier.PROCEDURAL, provenance="instruction")
        settle(engine)
        unrelated = block_for(engine, "u", "Which kubernetes ingress controller is fastest?")
        assert "Answer in French" in unrelated and "lowercase" not in unrelated
        related = block_for(engine, "u", "When writing SQL migrations for the users table, "
                                            "which keywords do I use?")
        assert "Answer in French" in related and "lowercase keywords" in related
        facts, mems = engine.memory_candidates("u", "anything at all", sent_chains=())
        assert [(m.text, m.rule) for m in mems] == [("Answer in French", STYLE_RULE)]


def test_a_session_local_memory_reaches_only_its_own_session(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        here = engine.create_session("u")
        there = engine.create_session("u")
        engine.add("Stay in character as a pirate captain", "u", tier=Tier.PROCEDURAL,
                   provenance="instruction", scope=Scope.LOCAL, session_id=here.id)
        settle(engine)
        query = "Stay in character as the pirate captain please"
        _, own = engine.memory_candidates("u", query, session=here)
        _, other = engine.memory_candidates("u", query, session=there)
        _, none = engine.memory_candidates("u", query)
        assert [m.text for m in own] == ["Stay in character as a pirate captain"]
        assert other == [] and none == []


def test_statements_come_before_questions_and_replies_are_the_assistants(
    tmp_path: Path,
) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        chat(engine, "u", "What is the staging host for the rocket project?",
             "The staging host is the mock-up server.")
        chat(engine, "u", "The staging host for the rocket project is "
             "staging.rocket.internal.", "Noted.")
        chat(engine, "u", "Thanks.", "The rocket project staging host is surely the "
             "mock-up server for the rocket project staging host.")
        settle(engine)
        _, mems = engine.memory_candidates("u", "What is the staging host for the rocket "
                                                "project?", sent_chains=())
        recalled = [m for m in mems if m.kind == RECALL_KIND]
        # the user's statement first, then the user's question with the reply it got;
        # the assistant's message alone (its user turn says nothing of it) never
        assert len(recalled) == 2, [m.text for m in recalled]
        statement, question = sorted(recalled, key=lambda m: -m.score)
        assert "User: The staging host for the rocket project is staging" in statement.text
        assert "User: What is the staging host" in question.text
        assert "Assistant (earlier reply): The staging host is the mock-up" in question.text
        assert not any("surely" in m.text for m in recalled)


def test_a_question_that_got_no_answer_is_not_recalled(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        s = engine.create_session("u")
        engine.append(s.id, "u", [  # an agent answered with a tool call, no text
            {"role": "user", "content": "What is the staging host for the rocket project?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "read", "arguments": "{}"}}]}])
        chat(engine, "u", "The staging host for the rocket project is "
             "staging.rocket.internal.", "Noted.")
        settle(engine)
        _, mems = engine.memory_candidates("u", "What is the staging host for the rocket "
                                                "project?", sent_chains=())
        recalled = [m.text for m in mems if m.kind == RECALL_KIND]
        assert len(recalled) == 1 and "staging.rocket.internal" in recalled[0], recalled


def test_recall_gives_the_users_words_without_the_clients_text(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake") as engine:
        # a message that is all client text: a file the agent added, nothing typed
        chat(engine, "u", "I have *added these files to the chat* so you can go ahead and "
             "edit them.\n\ndeploy.cfg\n```\nstaging host for the rocket project = old\n```",
             "Ok.")
        chat(engine, "u", "<environment_details>\ncwd: /srv/rocket, 41 files\n"
             "</environment_details>\nThe staging host for the rocket project is "
             "staging.rocket.internal.", "Noted.")
        settle(engine)
        _, mems = engine.memory_candidates("u", "What is the staging host for the rocket "
                                                "project?", sent_chains=())
        recalled = [m.text for m in mems if m.kind == RECALL_KIND]
        assert len(recalled) == 1, recalled
        assert "User: The staging host for the rocket project is staging" in recalled[0]
        assert "environment_details" not in recalled[0] and "41 files" not in recalled[0]
