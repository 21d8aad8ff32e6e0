"""What a long agent session establishes outlives it: the user's decisions and an error
with its fix become memories through the normal write path, found by a later session;
client boilerplate and failed runs never fixed become none; erasing the session erases
them; ``virtual_keep = false`` keeps the work to the session."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from servers import memd_in_front
from test_virtual_replay import MODEL, RESERVE, WINDOW, WindowedUpstream, replay
from virtual_session import TOOLS, AgentSession, agent_session

from memd.engine.memory import Memd
from memd.engine.virtual.keep import Fix, fixes, memory_text
from memd.engine.virtual.segment import segment
from memd.types import Memory, Provenance

DECISION = "Let's use SQLite for the ledger cache, not Redis."
FAILED = ("$ python -m pytest tests/test_ledger.py -q\n..F\n"
          "Traceback (most recent call last):\n"
          '  File "/srv/billing/billing/ledger.py", line 88, in post_entry\n'
          "ledger.LedgerError: E7031 unbalanced entry in billing/ledger.py\n"
          "FAILED 1 tests, passed 41 in 1.20s")
CLEAN = "$ python -m pytest tests/test_ledger.py -q\n" + "." * 42 + "\n42 passed in 1.10s"
COMMAND = "python -m pytest tests/test_ledger.py -q"
EDIT_TOOL = {"type": "function", "function": {
    "name": "edit", "description": "Edit a file. Error: never edit files under gen/.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}


def _exchange(session: AgentSession, call_id: str, name: str, args: dict[str, str],
              result: str) -> None:
    session.calls.append(len(session.messages))
    session.messages += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result}]


def worked_session(fixed: bool = True) -> AgentSession:
    """A replayed session (long enough to engage virtualization in a 16k window) that
    ends with a turn where the user decides something and a failing test run is fixed
    (``fixed``: run again, clean, after an edit; else only the failure)."""
    session = agent_session(turns=3)
    session.tools = [*TOOLS, EDIT_TOOL]
    session.messages.append({"role": "user", "content": f"{DECISION} Then fix the ledger."})
    _exchange(session, "call_9001", "bash", {"command": COMMAND}, FAILED)
    if fixed:
        _exchange(session, "call_9002", "edit", {"path": "billing/ledger.py"},
                  "Edited billing/ledger.py: 3 lines changed.")
        _exchange(session, "call_9003", "bash", {"command": COMMAND}, CLEAN)
    session.calls.append(len(session.messages))
    session.messages.append({"role": "assistant", "content": "The ledger tests pass."})
    return session


def kept(engine: Memd, tag: str) -> list[Memory]:
    """The memories tagged ``tag``, once the background jobs (the ingests) are done."""
    engine.jobs.flush()
    deadline = time.monotonic() + 60  # a bound on the wait, not a claim of speed
    while engine.store.pending_jobs() and time.monotonic() < deadline:
        if not engine.jobs.run_due():
            time.sleep(0.01)
    assert not engine.store.pending_jobs()
    return [m for m in engine.list("local", limit=1000) if tag in m.tags]


def test_a_clean_run_after_a_failed_one_is_a_fix_naming_the_error() -> None:
    session = worked_session()
    segments = segment("s", session.messages)
    at = {s.tool_call_id: s for s in segments}
    error, clean = at["call_9001"], at["call_9003"]
    assert error.object_type == "error_context" and clean.object_type != "error_context"
    found = fixes(segments, {error.object_id: clean.object_id})
    assert found == [Fix(error, clean, ("billing/ledger.py",))]
    text = memory_text(found[0])
    for exact in (COMMAND, "E7031", "billing/ledger.py", "LedgerError"):
        assert exact in text, text
    # an error superseded by another failure is not fixed; nor one by an earlier run
    again = at["call_9001"]
    assert fixes(segments, {clean.object_id: again.object_id}) == []


def test_a_session_s_decision_and_fixed_error_are_found_by_a_later_session(
        tmp_path: Path, backend: str) -> None:
    session = worked_session()
    upstream = WindowedUpstream()
    with memd_in_front(upstream.app, tmp_path, backend, context_window=WINDOW) as (base,
                                                                                   engine):
        ids, sessions = replay(session, base, upstream)
        (sid,) = sessions
        with httpx.Client(base_url=base) as client:
            assert "virtual" in client.get(f"/v1/calls/{ids[-1]}").json()["report"]
        (fix,) = kept(engine, "error-fix")
        assert fix.provenance == Provenance.TOOL_OUTPUT and fix.session_id == sid
        for exact in (COMMAND, "E7031", "billing/ledger.py"):
            assert exact in fix.text
        objects = {o.object_id: o for o in engine.store.context_objects("local", sid)}
        assert objects[fix.metadata["error_object"]].tool_call_id == "call_9001"
        assert objects[fix.metadata["fixed_object"]].tool_call_id == "call_9003"
        assert fix.metadata["session_id"] == sid
        stored = {m.id: m for m in engine.store.get_messages("local", sid)}
        assert stored[fix.provenance_message_id].tool_call_id == "call_9003"
        decisions = [m for m in engine.list("local", limit=1000) if "SQLite" in m.text]
        assert [m.text for m in decisions] == [
            "User decided to use SQLite for the ledger cache, not Redis"]
        # only the work's outcomes: no memory of the system prompt, the tool definitions
        # or the failed runs of the replay (never run clean again)
        texts = " ".join(m.text for m in engine.list("local", limit=1000))
        assert "Rule 1" not in texts and "gen/" not in texts and "AssertionError" not in texts

        # a later conversation asks about it: the search and the memory block find both
        hits = engine.search("E7031 unbalanced entry ledger test fails", "local")
        assert fix.id in [h.id for h in hits[:3]]
        with httpx.Client(base_url=base, timeout=60) as client:
            r = client.post("/v1/chat/completions", json={
                "model": MODEL, "max_tokens": RESERVE, "messages": [
                    {"role": "user", "content": "The ledger test fails with E7031 again, "
                                                "what fixed it last time?"}]})
            assert r.status_code == 200 and r.headers["x-memd-session"] != sid
        block = upstream.requests[-1]["messages"][-1]["content"]
        assert '<memory source="memd">' in block and "E7031" in block.split("</memory>")[0]

        engine.erase_session("local", sid)
        assert kept(engine, "error-fix") == []
        assert not [m for m in engine.list("local", limit=1000) if "SQLite" in m.text]


def test_boilerplate_and_unfixed_errors_make_no_memory(tmp_path: Path, backend: str) -> None:
    session = worked_session(fixed=False)
    session.messages[-4]["content"] = "Then fix the ledger."  # no decision either
    upstream = WindowedUpstream()
    with memd_in_front(upstream.app, tmp_path, backend, context_window=WINDOW) as (base,
                                                                                   engine):
        replay(session, base, upstream)
        assert kept(engine, "error-fix") == []
        made = engine.list("local", limit=1000)
        assert not [m for m in made if m.provenance == Provenance.TOOL_OUTPUT
                    or "decided" in m.text or "E7031" in m.text], made


def test_the_setting_off_keeps_the_work_to_the_session(tmp_path: Path) -> None:
    upstream = WindowedUpstream()
    with memd_in_front(upstream.app, tmp_path, context_window=WINDOW,
                       virtual_keep=False) as (base, engine):
        _, (sid,) = replay(worked_session(), base, upstream)
        assert engine.store.context_objects("local", sid)  # virtualized all the same
        assert kept(engine, "error-fix") == []
