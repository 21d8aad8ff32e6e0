"""LLM extraction beside the rules (memd.engine.learning.extract.llm): scripted helpers prove that
an invented value, a bad category or an answer that is not JSON stores nothing and is
counted, while the rules' facts stand; the real bundled model reads a phrasing the rules
miss, and the fact reaches a new session's context."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from clock import Clock
from fastapi.testclient import TestClient

import memd
from memd.engine.learning.extract import extract
from memd.engine.learning.extract.llm import (
    MAX_CONFIDENCE,
    ExtractionFailed,
    grounded,
    llm_extract,
    schema,
    worth_asking,
)
from memd.engine.memory import Memd
from memd.errors import ModelError
from memd.models.helper import ChatMessage
from memd.server.app import create_app
from tests.sanitizer_corpus import OPENAI_PROJ

HALIBUT = "Our team ships everything from the monorepo called Halibut."
BISCUIT = "My dog is called Biscuit."


def answer(*items: tuple[str, str, str, float]) -> str:
    return json.dumps({"facts": [{"category": c, "key": k, "value": v, "confidence": p}
                                 for c, k, v, p in items]})


class Scripted:
    """A helper that answers LLM extraction from a script, in order (the last answer
    repeats), and keeps every prompt it was given; an exception in the script is raised.
    A session title's ask gets a title the message does not ground."""

    name = "scripted"
    model = "scripted"
    context_length = 2048

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.temperatures: list[float] = []

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        if json_schema is not None and "title" in json_schema.get("properties", {}):
            return json.dumps({"title": "Untitled"})  # a session title's (test_titles.py)
        self.prompts.append("\n".join(m["content"] for m in messages))
        self.temperatures.append(temperature)
        out = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(out, Exception):
            raise out
        return out

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        yield self.complete(messages, max_tokens=max_tokens, temperature=temperature)

    def count_tokens(self, text: str) -> int:
        return len(text.split())



@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def m(tmp_path: Path, clock: Clock) -> Iterator[Memd]:
    engine = memd.open(tmp_path / "d", clock=clock)
    yield engine
    engine.close()


def say(m: Memd, text: str, helper: Scripted | None = None) -> str:
    """``text`` appended as alice's message in a new session, its jobs run; its id."""
    if helper is not None:
        m.jobs.helper = helper
    s = m.create_session("alice")
    msg = m.append(s.id, "alice", [{"role": "user", "content": text}])[0]
    m.jobs.run_due()
    return msg.id


def facts_of(m: Memd) -> dict[str, str]:
    return {f"{f.category}/{f.key}": f.value for f in m.facts("alice")}


def dead_errors(m: Memd) -> list[str]:
    return [q.job.last_error or "" for q in m.jobs.listed("dead") if q.job.kind == "llm_extract"]


def run_until_parked(m: Memd, clock: Clock) -> None:
    for _ in range(3):
        clock.t += 60
        m.jobs.run_due()


# -- the checks, as pure functions ------------------------------------------------------


def test_grounding_accepts_the_messages_words_and_rejects_an_invented_value() -> None:
    assert grounded("Biscuit", BISCUIT)
    assert grounded("  biscuit ", BISCUIT)  # case and spaces do not matter
    assert grounded("the monorepo Halibut", HALIBUT)  # every content word is there
    assert not grounded("Rex", BISCUIT)
    assert not grounded("Biscuits", BISCUIT)  # words, not substrings
    assert not grounded("", BISCUIT)
    assert not grounded("the", HALIBUT + " x")  # no content word: nothing grounds it


def test_the_schema_allows_only_the_messages_words_and_the_categories() -> None:
    item = schema(BISCUIT)["properties"]["facts"]["items"]["properties"]
    assert item["category"]["enum"] == ["identity", "preference", "constraint"]
    assert "Biscuit" in item["value"]["enum"] and "Rex" not in item["value"]["enum"]
    assert "dog" in item["key"]["enum"] and "my" not in item["key"]["enum"]


def test_only_messages_about_the_user_are_worth_asking() -> None:
    assert worth_asking(HALIBUT) and worth_asking(BISCUIT)
    assert not worth_asking("The weather is nice today.")
    assert not worth_asking("my thing")


def test_a_valid_answer_is_kept_and_its_confidence_capped() -> None:
    helper = Scripted(answer(("identity", "Dog", "Biscuit", 0.9)))
    out = llm_extract(helper, BISCUIT)
    assert [(f.category, f.key, f.value) for f in out.facts] == [("identity", "dog", "Biscuit")]
    assert out.facts[0].confidence == MAX_CONFIDENCE and out.asks == 1
    assert helper.temperatures == [0.0]


def test_each_bad_item_is_rejected_by_reason() -> None:
    helper = Scripted(answer(("identity", "dog", "Biscuit", 0.9),
                             ("pets", "dog", "Biscuit", 0.9),  # not a category
                             ("identity", "owner", "Rex", 0.9)))  # not in the message
    out = llm_extract(helper, BISCUIT)
    assert [f.value for f in out.facts] == ["Biscuit"]
    assert out.rejected == {"category": 1, "ungrounded": 1}
    low = llm_extract(Scripted(answer(("identity", "dog", "Biscuit", 0.3)),
                               answer()), BISCUIT)
    assert low.facts == [] and low.rejected == {"confidence": 1} and low.asks == 2


def test_invalid_json_is_asked_again_then_fails() -> None:
    helper = Scripted('{"facts": [{"category": "iden')
    with pytest.raises(ExtractionFailed, match="not the JSON asked for"):
        llm_extract(helper, BISCUIT)
    assert helper.temperatures == [0.0, 0.7]
    retried = Scripted("not json", answer(("identity", "dog", "Biscuit", 0.9)))
    assert [f.value for f in llm_extract(retried, BISCUIT).facts] == ["Biscuit"]


def test_a_model_error_is_asked_again_then_fails() -> None:
    helper = Scripted(ModelError("the helper model server timed out"))
    with pytest.raises(ExtractionFailed, match="the helper failed: ModelError"):
        llm_extract(helper, BISCUIT)
    assert len(helper.prompts) == 2


def test_an_empty_answer_is_an_answer() -> None:
    helper = Scripted(answer())
    assert llm_extract(helper, "I had a long day at work today.").facts == []
    assert len(helper.prompts) == 1


# -- through the engine -----------------------------------------------------------------


def test_a_grounded_value_is_stored_with_the_message_as_its_source(m: Memd) -> None:
    helper = Scripted(answer(("identity", "monorepo", "Halibut", 0.9)))
    assert extract(HALIBUT) == []  # the rules miss this phrasing
    msg_id = say(m, HALIBUT, helper)
    [fact] = m.facts("alice")
    assert (fact.category, fact.key, fact.value) == ("identity", "monorepo", "Halibut")
    assert fact.source_message_id == msg_id and fact.metadata["extractor"] == "llm"
    assert fact.confidence == MAX_CONFIDENCE
    [mem] = m.list("alice")
    assert mem.text == "User's monorepo: Halibut" and mem.provenance_message_id == msg_id
    assert "llm" in mem.tags and "fact:identity/monorepo" in mem.tags
    assert m.jobs.llm_counts["facts"] == 1
    later = m.create_session("alice")
    # (the fake embedder's cosine needs the words themselves: MiniLM's would not)
    ctx = m.context("alice", session_id=later.id, query="What is our monorepo?")
    assert "Halibut" in json.dumps(ctx.messages)


def test_an_invented_value_stores_nothing_and_is_counted(m: Memd, clock: Clock) -> None:
    helper = Scripted(answer(("identity", "dog", "Rex", 0.9)))
    say(m, BISCUIT, helper)
    assert facts_of(m) == {} and m.list("alice") == []
    assert len(helper.prompts) == 2  # asked again before giving up
    assert m.jobs.llm_counts["failed"] == 1 and m.jobs.llm_counts["rejected_ungrounded"] == 2
    run_until_parked(m, clock)
    # the model answered: asking again would answer the same, so the job is done
    assert dead_errors(m) == [] and m.store.pending_jobs() == 0
    assert len(helper.prompts) == 2 and facts_of(m) == {}
    app = create_app(m, run_jobs=False)
    with TestClient(app, base_url="http://127.0.0.1") as c:  # where a user sees the count
        counted = c.get("/health").json()["helper"]
    assert counted["failed"] == 1 and counted["rejected_ungrounded"] == 2


def test_invalid_json_stores_nothing_and_the_rules_facts_stand(m: Memd, clock: Clock) -> None:
    helper = Scripted("{not json")
    say(m, "My name is Ada and our team ships from the monorepo called Halibut.", helper)
    assert facts_of(m) == {"identity/name": "Ada"}  # the rules' fact
    assert m.jobs.llm_counts["failed"] == 1
    run_until_parked(m, clock)
    assert dead_errors(m) == [] and facts_of(m) == {"identity/name": "Ada"}
    assert len(helper.prompts) == 2  # two asks, then the job is done


def test_a_helper_that_fails_itself_is_retried_then_parked_dead(m: Memd, clock: Clock) -> None:
    helper = Scripted(ModelError("the helper model server timed out"))
    say(m, HALIBUT, helper)
    assert m.jobs.llm_counts["failed"] == 1
    run_until_parked(m, clock)
    [error] = dead_errors(m)  # visible in GET /v1/jobs?state=dead and `memd jobs --dead`
    assert "the helper failed: ModelError" in error and "Halibut" not in error
    assert len(helper.prompts) == 4  # two asks in each of the job's two attempts


def test_a_disallowed_category_is_rejected(m: Memd) -> None:
    helper = Scripted(answer(("pets", "dog", "Biscuit", 0.9),
                             ("identity", "dog", "Biscuit", 0.9)))
    say(m, BISCUIT, helper)
    assert facts_of(m) == {"identity/dog": "Biscuit"}
    assert m.jobs.llm_counts["rejected_category"] == 1


def test_what_the_rules_read_is_not_read_again(m: Memd) -> None:
    helper = Scripted(answer(("identity", "name", "Ada", 0.9),
                             ("preference", "called", "Ada", 0.9)))
    say(m, "My name is Ada.", helper)
    [fact] = m.facts("alice")
    assert (fact.key, fact.confidence) == ("name", 1.0)  # the rules', not the model's
    assert "extractor" not in fact.metadata


def test_a_forgotten_fact_is_not_brought_back(m: Memd) -> None:
    helper = Scripted(answer(("identity", "monorepo", "Halibut", 0.9)))
    say(m, HALIBUT, helper)
    m.forget_fact("alice", "identity", "monorepo")
    assert facts_of(m) == {} and m.list("alice") == []
    say(m, HALIBUT)  # the same message again, in another session
    assert facts_of(m) == {} and m.list("alice") == []
    assert m.jobs.llm_counts["messages"] == 2


def test_the_job_names_the_message_and_holds_no_text(m: Memd) -> None:
    m.jobs.helper = Scripted(answer())
    s = m.create_session("alice")
    msg = m.append(s.id, "alice", [{"role": "user", "content": HALIBUT}])[0]
    [job] = [q.job for q in m.jobs.listed("pending") if q.job.kind == "llm_extract"]
    assert job.payload == {"message_id": msg.id} and job.user_id == "alice"
    assert "Halibut" not in json.dumps(job.payload)


def test_the_helper_sees_only_sanitized_text(m: Memd) -> None:
    helper = Scripted(answer())
    say(m, f"My deploy key is {OPENAI_PROJ} and our monorepo is called Halibut.", helper)
    [seen] = helper.prompts
    assert OPENAI_PROJ not in seen and OPENAI_PROJ[:16] not in seen
    assert "[API_KEY_" in seen and "Halibut" in seen


def test_no_job_without_a_helper_or_for_client_text(m: Memd) -> None:
    s = m.create_session("alice")
    m.append(s.id, "alice", [{"role": "user", "content": HALIBUT}])
    assert not [q for q in m.jobs.listed("pending") if q.job.kind == "llm_extract"]
    m.jobs.helper = Scripted(answer())
    m.append(s.id, "alice", [
        {"role": "user", "content": "<environment_details>\nI use the repo Halibut\n"
                                    "</environment_details>"},
        {"role": "user", "content": "The weather is nice today."},
    ])
    assert not [q for q in m.jobs.listed("pending") if q.job.kind == "llm_extract"]


# -- the real bundled model -------------------------------------------------------------


@pytest.mark.real_model
def test_the_bundled_model_reads_what_the_rules_miss(m: Memd) -> None:
    from memd.models.llama_helper import LlamaHelper

    assert extract(HALIBUT) == []
    helper = LlamaHelper()
    found = llm_extract(helper, HALIBUT)
    assert ("monorepo", "Halibut") in [(f.key, f.value) for f in found.facts], found
    m.jobs.helper = helper
    say(m, HALIBUT)
    assert facts_of(m).get("identity/monorepo") == "Halibut"
    later = m.create_session("alice")
    ctx = m.context("alice", session_id=later.id, query="What is our monorepo?")
    assert "monorepo: Halibut" in json.dumps(ctx.messages)
