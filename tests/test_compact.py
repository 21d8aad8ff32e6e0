"""History compaction (memd.engine.background.compact): past a threshold, a session's oldest turns
become an L2 episodic summary, the turns are marked compressed into it, the session's
summary is rolled, and the next compiled context gives that summary before the history
it keeps. A helper's summary that fails its checks is replaced by an extractive one,
flagged. The store is exercised on both backends; one test runs the bundled model."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

import memd
from memd.config import load_settings
from memd.engine.background import compact
from memd.engine.block.compile import SUMMARY_PREFIX, CompileInput, compile_context
from memd.errors import InvalidInput, ModelError
from memd.models.tokens import count_text
from memd.types import Memory, MemoryFilter, Message, Provenance, Session, Tier
from tests.sanitizer_corpus import OPENAI_PROJ
from tests.scripted_helper import ScriptedHelper

TOPICS = [("Postgres", 5432), ("Redis", 6379), ("Kafka", 9092), ("Nginx", 8080),
          ("Grafana", 3000)]
HELPER_SUMMARY = "The billing service moved to Postgres and Redis; deploys failed with error 401."


def user_text(i: int) -> str:
    name, port = TOPICS[i % len(TOPICS)]
    return (f"The billing service now talks to {name} on port {port}. "
            f"Its deploy number {100 + i} failed with error {400 + i}, so it was rolled back.")


def reply_text(i: int) -> str:
    name, _ = TOPICS[i % len(TOPICS)]
    return f"Check the {name} settings and the service logs for deploy {100 + i}."


def chat(m: memd.Memd, sid: str, turns: int, start: int = 0) -> None:
    """``turns`` turns of alice's, one append each."""
    for i in range(start, start + turns):
        m.append(sid, "alice", [{"role": "user", "content": user_text(i)},
                                {"role": "assistant", "content": reply_text(i)}])


def summaries(m: memd.Memd) -> list[Memory]:
    flt = MemoryFilter(tiers=(Tier.EPISODIC,), include_expired=True)
    return [x for x in m.store.list_memories("alice", flt)
            if x.provenance == Provenance.SUMMARY]


def pending(m: memd.Memd, kind: str) -> list[str]:
    return [q.job.id for q in m.jobs.listed("pending") if q.job.kind == kind]


def window_of(msgs: Sequence[Message], tokens: int | None = None) -> compact.Window:
    return compact.Window(tuple(msgs), tokens if tokens is not None
                          else sum(x.token_count for x in msgs))


def message(i: int, role: str, text: str) -> Message:
    return Message(id=f"m{i}", session_id="s", user_id="alice", turn_index=i, role=role,
                   content=text, token_count=count_text(text) + 4, created_at=0.0)


def sample_window(turns: int = 10) -> compact.Window:
    msgs = []
    for i in range(turns):
        msgs += [message(2 * i + 1, "user", user_text(i)),
                 message(2 * i + 2, "assistant", reply_text(i))]
    return window_of(msgs)


@pytest.fixture
def m(backend: str, tmp_path: Path) -> Iterator[memd.Memd]:
    """An engine on each backend that compacts every 20 turns, keeping the last 10."""
    import pg

    engine = pg.open_engine(backend, tmp_path / "d", compact_every_turns=20)
    yield engine
    engine.close()


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[memd.Memd]:
    """The same on SQLite only, for what does not touch a backend's own code."""
    engine = memd.open(tmp_path / "d", embedder="fake", compact_every_turns=20)
    yield engine
    engine.close()


# -- the checks and the extractive summary, as pure functions -----------------------------


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty"),
    ("   ", "empty"),
    (" ".join(user_text(i) for i in range(40)), "longer"),
    ("The billing service moved to Initech's servers.", "ungrounded"),
    ("Deploy 100 failed with error 999 today.", "ungrounded"),
    ("The billing service moved", "short"),
    ("The secret [API_KEY_3] was used for Postgres.", "ungrounded"),
    ("The conversation segment contains the following key facts, decisions and names:",
     "unrelated"),
    ("The user moved the billing service to Postgres on port 5432; deploy 100 failed.", None),
    ("They discussed Redis and Kafka settings, then the service logs.", None),
])
def test_a_summary_is_checked_against_its_window(text: str, reason: str | None) -> None:
    window = sample_window()
    assert compact.check_summary(text, compact.source_text(window),
                                 window.source_tokens) == reason


def test_the_extractive_summary_is_the_users_key_sentences_within_a_fifth() -> None:
    window = sample_window()
    text = compact.extractive_summary(window)
    assert text and count_text(text) <= window.source_tokens // compact.TARGET_RATIO
    users = " ".join(user_text(i) for i in range(10))
    assert all(sentence in users for sentence in text.split(". ") if sentence)
    assert "Check the" not in text  # the assistant's words only when the user said none
    assert compact.check_summary(text, compact.source_text(window),
                                 window.source_tokens) is None


def test_the_window_is_whole_old_turns_and_never_the_kept_ones() -> None:
    settings = load_settings(compact_every_turns=20, compact_after_tokens=0)
    session = Session(id="s", user_id="alice", workspace=None, created_at=0.0,
                           updated_at=0.0)
    msgs = list(sample_window(25).messages)
    msgs.insert(3, replace(msgs[2], id="tool", role="tool", tool_call_id="c1"))
    window = compact.choose_window(settings, session, msgs)
    assert window is not None
    assert [x.role for x in window.messages].count("user") == 15  # 25 turns, 10 kept
    assert window.messages[-1].role != "user" and msgs[len(window.messages)].role == "user"
    assert compact.choose_window(settings, session, msgs[:38]) is None  # 19 turns
    by_tokens = replace(settings, compact_every_turns=0, compact_after_tokens=400,
                        compact_keep_turns=2)
    window = compact.choose_window(by_tokens, session, msgs)
    assert window is not None
    left = sum(x.token_count for x in msgs) - window.source_tokens
    assert left <= 200 < left + sum(x.token_count for x in compact.turns(window.messages)[-1])


def test_the_compiler_gives_the_summary_when_compressed_turns_precede_the_history() -> None:
    history = list(sample_window(3).messages)
    inp = CompileInput(system=[], history=history, facts=[], memories=[],
                       context_window=8192, max_response_tokens=512,
                       session_summary="Turns 1-20: Postgres on port 5432.",
                       session_summary_tokens=12)
    uncut = compile_context(inp)
    assert not uncut.report.history_cut
    assert not any(x["content"].startswith(SUMMARY_PREFIX) for x in uncut.messages)
    ctx = compile_context(replace(inp, compressed_before=True))
    assert not ctx.report.history_cut
    assert ctx.messages[0] == {"role": "system",
                               "content": SUMMARY_PREFIX + "Turns 1-20: Postgres on port 5432."}
    assert ctx.messages[1]["content"] == history[0].content
    assert [i.section for i in ctx.report.items][:2] == ["summary", "history"]


def test_the_compaction_settings_are_checked() -> None:
    assert load_settings().compact_after_tokens is None  # twice the session's window
    assert load_settings(compact_every_turns=20).compact_every_turns == 20
    for bad in ({"compact_every_turns": -1}, {"compact_keep_turns": 0},
                {"compact_after_tokens": "many"}, {"compact_keep_turns": True}):
        with pytest.raises(InvalidInput):
            load_settings(**bad)
    assert load_settings(compact_after_tokens=0).compact_after_tokens == 0


# -- through the engine, on both backends --------------------------------------------------


def test_twenty_turns_fold_the_oldest_ten_into_an_episodic_summary(m: memd.Memd) -> None:
    sid = m.create_session("alice").id
    chat(m, sid, 19)
    m.jobs.run_due()
    assert summaries(m) == []  # 19 turns: below the threshold
    chat(m, sid, 1, start=19)
    assert pending(m, compact.JOB)  # queued by the append, run by the worker
    assert not any(x.is_compressed for x in m.messages(sid, "alice"))
    m.jobs.run_due()
    [summary] = summaries(m)
    stored = m.messages(sid, "alice")
    window, kept = stored[:20], stored[20:]
    meta = summary.metadata
    assert (summary.tier, summary.session_id) == (Tier.EPISODIC, sid)
    assert (meta["session_id"], meta["first_turn"], meta["last_turn"]) == (
        sid, window[0].turn_index, window[-1].turn_index)
    assert meta["source_tokens"] == sum(x.token_count for x in window)
    assert meta["summary_tokens"] == summary.token_count
    assert meta["ratio"] == round(meta["source_tokens"] / meta["summary_tokens"], 2)
    assert meta["ratio"] >= compact.TARGET_RATIO
    assert meta["extractive"] is True and meta["summarizer"] == "rules"
    assert all(x.is_compressed and x.compressed_summary_id == summary.id for x in window)
    assert not any(x.is_compressed for x in kept)
    session = m.session(sid, "alice")
    assert session.summary_text == (f"Turns {window[0].turn_index}-{window[-1].turn_index}: "
                                    f"{summary.text}")
    assert session.summary_token_count == count_text(session.summary_text)

    ctx = m.context("alice", session_id=sid)
    contents = [x["content"] for x in ctx.messages]
    at = contents.index(SUMMARY_PREFIX + session.summary_text)
    assert contents[at + 1:] == [x.content for x in kept]
    assert not ctx.report.history_cut
    assert [i.id for i in ctx.report.items if i.section == "memory"].count(summary.id) == 0


def test_a_rerun_of_the_job_stores_nothing_twice(m: memd.Memd) -> None:
    sid = m.create_session("alice").id
    chat(m, sid, 20)
    # a run whose job is gone (an earlier run of it committed) does nothing
    assert compact.compact_session(m.store, m.embedder, m.settings, None, "alice", sid,
                                   m.now(), job_id="gone") is None
    assert summaries(m) == [] and not any(x.is_compressed for x in m.messages(sid, "alice"))
    [job] = [j for j in m.store.claim_jobs(m.now(), 64) if j.kind == compact.JOB]
    m.jobs.handlers[compact.JOB](job)
    m.jobs.handlers[compact.JOB](job)  # its lease ran out, say: a second worker runs it
    m.jobs.run_due()
    assert len(summaries(m)) == 1
    compressed = [x for x in m.messages(sid, "alice") if x.is_compressed]
    assert len(compressed) == 20
    chat(m, sid, 1, start=20)  # 11 active turns: nothing more to fold
    m.jobs.run_due()
    assert len(summaries(m)) == 1


def test_a_summary_already_stored_for_the_window_is_reused(m: memd.Memd) -> None:
    sid = m.create_session("alice").id
    chat(m, sid, 20)
    session = m.session(sid, "alice")
    window = compact.choose_window(m.settings, session,
                                   m.messages(sid, "alice", active_only=True))
    assert window is not None
    earlier = compact._insert(m.store, m.embedder, session, window,
                              compact.Summary("Postgres on port 5432.", True, "rules"),
                              m.now())
    m.jobs.run_due()
    assert [x.id for x in summaries(m)] == [earlier.id]
    assert {x.compressed_summary_id for x in m.messages(sid, "alice")[:20]} == {earlier.id}


def test_a_grounded_helper_summary_is_kept(lite: memd.Memd) -> None:
    helper = ScriptedHelper(summary=HELPER_SUMMARY)
    lite.jobs.helper = helper
    sid = lite.create_session("alice").id
    chat(lite, sid, 20)
    lite.jobs.run_due()
    [summary] = summaries(lite)
    assert summary.text == HELPER_SUMMARY
    assert summary.metadata["extractive"] is False
    assert summary.metadata["summarizer"] == "scripted"
    assert "rejected" not in summary.metadata
    [asked] = helper.asked["summary"]
    assert user_text(0) in asked and user_text(10) not in asked  # the window only
    ctx = lite.context("alice", session_id=sid)
    assert any(HELPER_SUMMARY in x["content"] for x in ctx.messages)


@pytest.mark.parametrize(("answer", "reason"), [
    ("", "empty"),
    (" ".join(user_text(i) for i in range(40)), "longer"),
    ("Bob from Initech moved the billing service to Oracle.", "ungrounded"),
    ("The conversation segment contains the following key facts:", "unrelated"),
    (ModelError("the model is not installed"), "model_error"),
])
def test_a_rejected_helper_summary_is_replaced_by_an_extractive_one(
    lite: memd.Memd, answer: str | Exception, reason: str,
) -> None:
    lite.jobs.helper = ScriptedHelper(summary=answer)
    sid = lite.create_session("alice").id
    chat(lite, sid, 20)
    lite.jobs.run_due()
    [summary] = summaries(lite)
    assert summary.metadata["extractive"] is True
    assert summary.metadata["rejected"] == reason
    window = compact.Window(tuple(lite.messages(sid, "alice")[:20]),
                            summary.metadata["source_tokens"])
    assert summary.text == compact.extractive_summary(window)
    assert "Initech" not in (lite.session(sid, "alice").summary_text or "")


def test_the_summary_reads_sanitized_text_only(lite: memd.Memd) -> None:
    helper = ScriptedHelper(summary=HELPER_SUMMARY)
    lite.jobs.helper = helper
    sid = lite.create_session("alice").id
    key = OPENAI_PROJ
    lite.append(sid, "alice", [{"role": "user", "content": f"The deploy key is {key} now."},
                               {"role": "assistant", "content": "Noted."}])
    chat(lite, sid, 19, start=1)
    lite.jobs.run_due()
    [summary] = summaries(lite)
    assert key not in helper.asked["summary"][0] and key not in summary.text
    assert key not in (lite.session(sid, "alice").summary_text or "")


def test_one_log_line_per_compaction_with_its_ratio_and_no_text(
    lite: memd.Memd, caplog: pytest.LogCaptureFixture,
) -> None:
    sid = lite.create_session("alice").id
    chat(lite, sid, 20)
    caplog.set_level(logging.INFO, logger="memd.engine.background.compact")
    lite.jobs.run_due()
    [summary] = summaries(lite)
    lines = [r.getMessage() for r in caplog.records if r.name == "memd.engine.background.compact"]
    assert lines == [f"compacted session {sid} turns 1-20: "
                     f"{summary.metadata['source_tokens']} -> "
                     f"{summary.metadata['summary_tokens']} tokens, ratio "
                     f"{summary.metadata['ratio']:.1f} (extractive)"]
    assert "billing" not in lines[0]


def test_the_token_threshold_compacts_too(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake", compact_after_tokens=600,
                   compact_keep_turns=3) as m:
        sid = m.create_session("alice").id
        chat(m, sid, 6)
        m.jobs.run_due()
        assert summaries(m) == []
        chat(m, sid, 6, start=6)
        m.jobs.run_due()
        assert summaries(m)
        active = m.messages(sid, "alice", active_only=True)
        assert sum(x.token_count for x in active) <= 300 or len(active) == 6
        assert m.session(sid, "alice").summary_text


# -- the real bundled model ----------------------------------------------------------------


@pytest.mark.real_model
def test_the_bundled_model_compacts_a_thirty_turn_session(tmp_path: Path) -> None:
    with memd.open(tmp_path / "d", embedder="fake", helper="llama",
                   compact_every_turns=20) as m:
        sid = m.create_session("alice").id
        chat(m, sid, 30)
        m.jobs.run_due()
        [summary] = summaries(m)
        meta = summary.metadata
        assert meta["summarizer"] == "llama"  # the model was asked
        assert meta["extractive"] is (meta.get("rejected") is not None)
        stored = m.messages(sid, "alice")
        window = [x for x in stored if x.is_compressed]
        assert [x.turn_index for x in window] == list(range(1, 41))  # turns 1-20 of 30
        assert {x.compressed_summary_id for x in window} == {summary.id}
        source = compact.source_text(compact.Window(tuple(window), meta["source_tokens"]))
        assert compact.check_summary(summary.text, source, meta["source_tokens"]) is None
        ctx = m.context("alice", session_id=sid)
        contents = [x["content"] for x in ctx.messages]
        assert any(c.startswith(SUMMARY_PREFIX) and summary.text in c for c in contents)
        assert contents[-20:] == [x.content for x in stored[40:]]


def test_an_ended_session_becomes_one_episode_once(tmp_path: Path) -> None:
    """The compaction sweep folds an expired session's turns into one summary and marks
    it; an active session below its threshold, or an ended one of one turn, is left."""
    from memd.engine.background.schedule import TASKS
    from memd.types import SessionStatus

    with memd.open(tmp_path / "d", embedder="fake") as m:
        ended, short, active = (m.create_session("alice") for _ in range(3))
        for i in range(3):
            m.append(ended.id, "alice", [{"role": "user", "content": user_text(i)},
                                         {"role": "assistant", "content": reply_text(i)}])
        m.append(short.id, "alice", [{"role": "user", "content": user_text(5)}])
        m.append(active.id, "alice", [{"role": "user", "content": user_text(6)}])
        m.run_jobs()
        for s in (ended, short):
            m.store.update_session("alice", s.id, status=int(SessionStatus.EXPIRED))
        sweep = TASKS["compaction"]
        assert sweep.run(m.store, m.settings, m.now(), "alice") == {"queued": 0, "closing": 1}
        m.run_jobs()
        episode = m.store.get_session("alice", ended.id)
        assert episode is not None and episode.metadata.get(compact.EPISODE_KEY) is True
        assert m.store.get_messages("alice", ended.id, active_only=True) == []
        [summary] = [x for x in m.list("alice", limit=100) if compact.TAG in x.tags]
        assert summary.metadata["session_id"] == ended.id
        assert (summary.metadata["first_turn"], summary.metadata["last_turn"]) == (1, 6)
        assert sweep.run(m.store, m.settings, m.now(), "alice") == {"queued": 0, "closing": 0}
