"""The detailed (L1) and compact (L2) texts of context objects: the extractive excerpts
every object is made with, and the helper model's summaries with their declared losses,
made in a background job (memd.engine.virtual.summaries), with a scripted helper and
once with the real bundled one."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from memd.engine.conversation.chat import WindowInfo
from memd.engine.memory import Memd
from memd.engine.virtual.call import for_call
from memd.engine.virtual.fidelity import DETAILED, extractive
from memd.engine.virtual.summaries import JOB, MIN_TOKENS, summarize_object
from memd.models.helper import load_helper
from memd.models.tokens import count_text, message_tokens
from tests.scripted_helper import ScriptedHelper

ANSWER = {
    "detailed": "src/ledger.py defines ledger_entry_0 .. ledger_entry_39; each returns "
                "{'account', 'amount': amount_cents * k}. PORT = 8443 at the top.",
    "compact": "Ledger helpers in src/ledger.py; PORT = 8443.",
    "detailed_dropped": ["the bodies of the functions past their return values"],
    "detailed_answers": ["which functions src/ledger.py defines", "the port"],
    "compact_dropped": ["every function's name and body"],
    "compact_answers": ["what src/ledger.py is for", "the port"],
}


def ledger(n: int = 40) -> str:
    return "PORT = 8443\n" + "\n".join(
        f"def ledger_entry_{k}(amount_cents, account):\n    return {{'account': account, "
        f"'amount': amount_cents * {k + 3}}}" for k in range(n))


def history(text: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Read the ledger."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"path": "src/ledger.py"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]


def virtualize_call(engine: Memd, session_id: str, messages: list[dict[str, Any]],
                    window: int = 100_000) -> dict[str, Any]:
    """One call of ``messages`` with virtualization on; its report's ``virtual``."""
    session = engine.session(session_id, "local")
    tokens = sum(message_tokens(m) for m in messages)
    done = for_call(engine.store, engine.settings, engine.now, engine.jobs.llm_enabled,
                    session, messages, tokens, WindowInfo(window, "test"), 100, "on",
                    None, "call-x")
    assert done is not None
    return done.report


def the_object(engine: Memd, session_id: str) -> Any:
    [o] = engine.store.context_objects("local", session_id)
    return o


def test_every_object_has_an_extractive_detailed_text_flagged_as_such(engine: Memd) -> None:
    s = engine.create_session("local")
    text = ledger()
    virtualize_call(engine, s.id, history(text))
    o = the_object(engine, s.id)
    assert o.summarized_by == "extractive"
    assert o.detailed == extractive(o.object_id, "read", "src/ledger.py", text, o.tokens_l0,
                                    count_text, DETAILED)
    assert o.tokens_l2 < o.tokens_l1 <= 0.35 * o.tokens_l0
    assert o.detailed.startswith("[memd: extractive excerpt")
    assert set(o.losses) == {"detailed", "compact"}
    assert all(o.losses[k]["dropped"] and o.losses[k]["answers"] for k in o.losses)
    # no helper on: no job asks one
    assert not [j for j in engine.store.list_jobs("pending") if j.job.kind == JOB]


def test_the_helpers_summaries_replace_the_excerpts_with_their_losses(engine: Memd) -> None:
    helper = ScriptedHelper(detailed=ANSWER)
    engine.jobs.helper = helper
    s = engine.create_session("local")
    msgs = history(ledger())
    virtualize_call(engine, s.id, msgs)
    assert [j.job.kind for j in engine.store.list_jobs("pending")].count(JOB) == 1
    engine.jobs.run_due()
    assert engine.jobs.llm_counts["object_summaries_kept"] == 1
    assert "src/ledger.py" in helper.asked["detailed"][0]
    o = the_object(engine, s.id)
    assert o.summarized_by == "scripted"
    assert o.detailed.startswith(f"[memd: detailed summary by the helper model scripted of "
                                 f"the output of read src/ledger.py, object {o.object_id}")
    assert o.detailed.endswith(ANSWER["detailed"]) and o.compact.endswith(ANSWER["compact"])
    # the scripted helper's context (2048 tokens) held only the head of the file: both
    # summaries say so first
    unread = o.losses["compact"]["dropped"][0]
    read = int(re.fullmatch(r"everything after its first (\d+) characters \(not read by "
                            r"the helper\)", unread).group(1))  # type: ignore[union-attr]
    assert read < len(o.content) and o.content[:read] in helper.asked["detailed"][0]
    assert o.content[:read + 1] not in helper.asked["detailed"][0]
    assert f"It dropped: {unread}; every function's name and body." in o.compact
    assert o.losses["compact"] == {"dropped": [unread, *ANSWER["compact_dropped"]],
                                   "answers": ANSWER["compact_answers"]}
    assert o.losses["detailed"]["dropped"][0] == unread
    assert o.tokens_l1 == count_text(o.detailed) and o.tokens_l2 == count_text(o.compact)
    # under pressure the object degrades to the helper's text, and the report says whose
    # and what it lost
    more = [*msgs, {"role": "user", "content": "Now something else. " + "word " * 60}]
    report = virtualize_call(engine, s.id, more, window=message_tokens(msgs[-1]) + 100)
    [held] = report["held"]
    assert held["by"] == "scripted" and held["fidelity"] in ("detailed", "compact")
    assert held["loss"] == o.losses[held["fidelity"]]


@pytest.mark.parametrize(("answer", "why"), [
    ({**ANSWER, "compact": (ANSWER["compact"] + " ") * 40}, "compact_too_long"),
    ({**ANSWER, "detailed": ""}, "empty"),
    ({**ANSWER, "detailed_answers": "the port"}, "malformed"),
    ({**ANSWER, "detailed": "detailed_dropped"}, "ungrounded"),
])
def test_a_summary_that_does_not_hold_leaves_the_excerpts(engine: Memd, answer: Any,
                                                          why: str) -> None:
    engine.jobs.helper = ScriptedHelper(detailed=answer)
    s = engine.create_session("local")
    virtualize_call(engine, s.id, history(ledger()))
    before = the_object(engine, s.id)
    engine.jobs.run_due()
    assert engine.jobs.llm_counts[f"object_summaries_rejected_{why}"] == 1
    assert the_object(engine, s.id) == before  # extractive, flagged as such


def test_an_object_already_sent_degraded_keeps_the_text_sent(engine: Memd) -> None:
    """The prompt's prefix holds: a summary that comes after the object went out at a
    lower fidelity does not change its bytes."""
    s = engine.create_session("local")
    msgs = history(ledger())
    virtualize_call(engine, s.id, msgs)
    more = [*msgs, {"role": "user", "content": "Next. " + "word " * 60}]
    virtualize_call(engine, s.id, more, window=message_tokens(msgs[-1]) + 100)
    before = the_object(engine, s.id)
    assert before.fidelity != 0
    outcome = summarize_object(engine.store, ScriptedHelper(detailed=ANSWER), "local", s.id,
                               before.object_id, None, 5.0)
    assert outcome == "held" and the_object(engine, s.id) == before


def test_a_small_output_is_not_summarized(engine: Memd) -> None:
    engine.jobs.helper = ScriptedHelper(detailed=ANSWER)
    s = engine.create_session("local")
    virtualize_call(engine, s.id, history("PORT = 8443\n"))
    assert the_object(engine, s.id).tokens_l0 < MIN_TOKENS
    assert not [j for j in engine.store.list_jobs("pending") if j.job.kind == JOB]


@pytest.mark.real_model
def test_the_bundled_helper_summarizes_an_object_or_the_excerpts_stand(engine: Memd) -> None:
    """SmolLM2-135M under the JSON schema: its answer is kept when it holds (sizes, both
    texts), else the extractive excerpts stay; either way the object says which."""
    helper = load_helper("llama")
    s = engine.create_session("local")
    virtualize_call(engine, s.id, history(ledger(12)))
    o = the_object(engine, s.id)
    assert o.tokens_l0 >= MIN_TOKENS
    outcome = summarize_object(engine.store, helper, "local", s.id, o.object_id, None, 5.0)
    after = the_object(engine, s.id)
    if outcome == "kept":
        assert after.summarized_by == helper.model
        assert after.detailed.startswith("[memd: detailed summary by the helper model")
        assert after.tokens_l2 < after.tokens_l1 <= 1.5 * 0.3 * after.tokens_l0 + 80
        assert set(after.losses) == {"detailed", "compact"}
    else:
        assert outcome.startswith("rejected_")
        assert after == o and after.summarized_by == "extractive"
