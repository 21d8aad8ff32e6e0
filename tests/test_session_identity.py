"""Session identity: one session per conversation, whatever a client rewrites between its
calls (tool-call JSON spacing and key order, text parts, line endings, the date and file
listing in its system prompt), and one session per client when two clients open with the
same words (the User-Agent, model family and system prompt tell them apart)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servers import memd_in_front, open_memd

from memd.engine.conversation.chat import WindowInfo, finish_chat, prepare_chat
from memd.engine.conversation.identity import Identity, client_family, model_family, prompt_sketch
from memd.engine.conversation.resolve import conversation_of
from memd.engine.memory import Memd
from tests.agent_traffic import ScriptedUpstream

WINDOW = WindowInfo(128_000, "config")


@pytest.fixture
def engine(tmp_path: Path, backend: str) -> Iterator[Memd]:
    m = open_memd(tmp_path / "d", backend)
    yield m
    m.close()


def turn(engine: Memd, messages: list[dict[str, Any]], reply: dict[str, Any], *,
         client: str | None = "opencode/1.18.0", model: str = "gpt-4o",
         conversation: str | None = None) -> str:
    """One proxied call and its reply, as the proxy makes them; the session's id."""
    call = prepare_chat(engine, "local", None, copy.deepcopy(messages), model=model,
                        window=WINDOW, client=client, conversation=conversation)
    finish_chat(engine, call, status=200, reply=reply, finish_reason="stop", usage=None,
                model=model)
    return call.session.id


def stored(engine: Memd, session_id: str) -> list[tuple[str, str | None]]:
    return [(m.role, m.content) for m in engine.messages(session_id, "local")]


def tool_call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "read", "arguments": arguments}}]}


OPENCODE = ("You are opencode, an interactive CLI tool that helps users with software "
            "engineering tasks. Use the instructions below and the tools available to you "
            "to assist the user.\n\n# Tone and style\nBe concise, direct, and to the point. "
            "Answer in fewer than 4 lines unless asked for detail.\n\n# Doing tasks\nUse "
            "the search tools to understand the codebase, implement the solution, verify "
            "it with the project's tests.\n")
CLINE = ("You are Cline, a highly skilled software engineer with extensive knowledge in "
         "many programming languages, frameworks, design patterns, and best practices.\n\n"
         "TOOL USE\n\nYou have access to a set of tools that are executed upon the user's "
         "approval. You can use one tool per message.\n\nSYSTEM INFORMATION\n\nOperating "
         "System: Linux\nDefault Shell: /bin/bash\n")


def environment(date: str, files: list[str]) -> str:
    return (f"<env>\n  Working directory: /home/dev/rocket\n  Platform: linux\n"
            f"  Today's date: {date}\n</env>\n<files>\n" + "\n".join(files) + "\n</files>")


def test_spaced_compact_and_reordered_tool_call_json_is_one_session(engine: Memd) -> None:
    """The model server answers with spaced JSON, the client resends it compacted and
    with its keys reordered: one session, and each message stored once."""
    system = {"role": "system", "content": OPENCODE}
    ask = {"role": "user", "content": "Read a.py and b.py."}
    first = tool_call("c1", '{"filePath": "a.py", "limit": 20}')
    second = tool_call("c2", '{"limit": 5, "filePath": "b.py"}')
    sid = turn(engine, [system, ask], first)
    step2 = [system, ask, tool_call("c1", '{"filePath":"a.py","limit":20}'),
             {"role": "tool", "tool_call_id": "c1", "content": "x = 1"}]
    assert turn(engine, step2, second) == sid
    step3 = [*step2, tool_call("c2", '{\n  "filePath": "b.py",\n  "limit": 5\n}'),
             {"role": "tool", "tool_call_id": "c2", "content": "y = 2"}]
    assert turn(engine, step3, {"role": "assistant", "content": "Both read."}) == sid
    step4 = [*step3, {"role": "assistant", "content": "Both read."},
             {"role": "user", "content": "Thanks."}]
    assert turn(engine, step4, {"role": "assistant", "content": "You're welcome."}) == sid
    assert stored(engine, sid) == [
        ("user", "Read a.py and b.py."), ("assistant", None), ("tool", "x = 1"),
        ("assistant", None), ("tool", "y = 2"), ("assistant", "Both read."),
        ("user", "Thanks."), ("assistant", "You're welcome.")]
    assert len(engine.store.list_sessions("local")) == 1


def test_two_clients_opening_with_the_same_words_get_a_session_each(engine: Memd) -> None:
    """Continue and Cline both open with the same question: neither continues nor retries
    the other's session, and each one's reply is stored in its own."""
    ask = {"role": "user", "content": "What does the deploy script do?"}
    cont = turn(engine, [{"role": "system", "content": "<important_rules>\n  You are in "
                          "agent mode.\n</important_rules>"}, ask],
                {"role": "assistant", "content": "It builds and uploads."},
                client="continue-cli/1.5.0")
    cline = turn(engine, [{"role": "system", "content": CLINE}, ask],
                 {"role": "assistant", "content": "It runs make deploy."},
                 client="OpenAI/JS 4.104.0")
    assert cline != cont
    assert stored(engine, cont) == [("user", ask["content"]),
                                    ("assistant", "It builds and uploads.")]
    assert stored(engine, cline) == [("user", ask["content"]),
                                     ("assistant", "It runs make deploy.")]
    assert engine.session(cline, "local").parent_session_id is None


def test_the_system_prompt_alone_tells_two_clients_apart(engine: Memd) -> None:
    """Two clients built on the same SDK send the same User-Agent: their system prompts
    still differ, and so do their sessions; the same prompt again is the same client."""
    ask = {"role": "user", "content": "Explain the build."}
    reply = {"role": "assistant", "content": "It uses make."}
    a = turn(engine, [{"role": "system", "content": OPENCODE}, ask], reply,
             client="OpenAI/JS 4.104.0")
    b = turn(engine, [{"role": "system", "content": CLINE}, ask], reply,
             client="OpenAI/JS 4.104.0")
    assert a != b
    again = [{"role": "system", "content": OPENCODE}, ask, reply,
             {"role": "user", "content": "And the tests?"}]
    assert turn(engine, again, reply, client="OpenAI/JS 4.104.0") == a


def test_a_system_prompt_whose_date_and_listing_change_is_one_session(engine: Memd) -> None:
    files = [f"src/rocket/{name}.py" for name in (
        "launch", "engine", "fuel", "telemetry", "guidance", "staging", "payload",
        "abort", "weather", "range", "orbit", "docking")]
    def system(date: str, listing: list[str]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": OPENCODE},
                {"role": "system", "content": environment(date, listing)}]

    ask = {"role": "user", "content": "Add a countdown to launch.py."}
    sid = turn(engine, [*system("Fri Mar 14 2025", files), ask],
               {"role": "assistant", "content": "Added."})
    later = [*system("Sat Mar 15 2025", [*files[2:], "src/rocket/countdown.py",
                                         "tests/test_countdown.py"]),
             ask, {"role": "assistant", "content": "Added."},
             {"role": "user", "content": "Now test it."}]
    assert turn(engine, later, {"role": "assistant", "content": "Tested."}) == sid
    assert [r for r, _ in stored(engine, sid)] == ["user", "assistant"] * 2


def test_another_model_family_is_another_session_a_dated_snapshot_is_not(
        engine: Memd) -> None:
    ask = [{"role": "system", "content": OPENCODE},
           {"role": "user", "content": "Summarize the README."}]
    reply = {"role": "assistant", "content": "It is about rockets."}
    sid = turn(engine, ask, reply, model="gpt-4o")
    follow = [*ask, reply, {"role": "user", "content": "Shorter."}]
    assert turn(engine, follow, {"role": "assistant", "content": "Rockets."},
                model="claude-3-5-sonnet-20241022") != sid
    assert turn(engine, follow, {"role": "assistant", "content": "Rockets."},
                model="gpt-4o-2024-08-06") == sid
    assert stored(engine, sid)[-1] == ("assistant", "Rockets.")


def test_a_session_stored_without_an_identity_is_continued_and_takes_one(
        engine: Memd) -> None:
    """Sessions made through the API, or stored by a memd that kept no identity, agree
    with any call; the first call that continues one records its identity."""
    old = engine.create_session("local")
    history = [{"role": "user", "content": "Pick a name for the service."},
               {"role": "assistant", "content": "Orbit."}]
    engine.append(old.id, "local", history)
    follow = [{"role": "system", "content": CLINE}, *history,
              {"role": "user", "content": "Why?"}]
    assert turn(engine, follow, {"role": "assistant", "content": "It is short."},
                client="OpenAI/JS 4.104.0") == old.id
    identity = Identity.of_session(engine.session(old.id, "local").metadata)
    assert identity is not None and identity.client == "OpenAI/JS"
    assert identity.model == "gpt-4o" and identity.prompt == prompt_sketch(CLINE)


def test_a_pinned_session_is_the_session_whoever_calls(engine: Memd) -> None:
    ask = [{"role": "user", "content": "Note the staging host."}]
    first = prepare_chat(engine, "local", None, ask, session_id="notes", model="gpt-4o",
                         client="opencode/1.0", window=WINDOW)
    other = prepare_chat(engine, "local", None,
                         [{"role": "system", "content": CLINE}, *ask], session_id="notes",
                         model="llama-3.1-8b", client="OpenAI/JS 4.0", window=WINDOW)
    assert first.session.id == other.session.id == "notes"


def test_client_and_model_families() -> None:
    assert client_family("opencode/1.18.0 ai-sdk/5.0") == "opencode"
    assert client_family("OpenAI/Python 1.52.0") == "OpenAI/Python"
    assert client_family("qwen-code/0.15.0 (linux; x64)") == "qwen-code"
    assert client_family("opencode") == "opencode"
    assert client_family("") is None and client_family(None) is None
    assert model_family("gpt-4o-2024-08-06") == model_family("openai/gpt-4o") == "gpt-4o"
    assert model_family("gpt-4o-mini-2024-07-18") == "gpt-4o-mini"
    assert model_family("claude-3-5-sonnet-20241022") == "claude-3-5-sonnet"
    assert model_family("gpt-4-1106-preview") == model_family("gpt-4-0613") == "gpt-4"
    assert model_family("qwen2.5-coder:7b") == "qwen2.5-coder"
    assert model_family("deepseek-v3") == "deepseek-v3"
    assert model_family(None) is None


def test_unknown_parts_agree_and_known_ones_must_match() -> None:
    mine = Identity.of_request("opencode/1.2", "gpt-4o", [{"role": "system",
                                                           "content": OPENCODE}])
    assert mine.agrees(None)
    assert mine.agrees(Identity(None, None, None))
    assert mine.agrees(Identity("OPENCODE", "gpt-4o", prompt_sketch(OPENCODE)))
    assert not mine.agrees(Identity("cline", None, None))
    assert not mine.agrees(Identity(None, "gpt-4.1", None))
    assert not mine.agrees(Identity(None, None, prompt_sketch(CLINE)))
    assert not mine.agrees(Identity(None, None, prompt_sketch("")))
    assert Identity.of_session({"identity": {"client": 3}}) is None
    assert Identity.of_session({"identity": mine.to_metadata()}) == mine


def test_the_proxy_tells_clients_apart_by_their_user_agent(tmp_path: Path) -> None:
    """Through the daemon: the same request from two User-Agents is two sessions, each
    with its own reply; the same client's next step continues its own."""
    upstream = ScriptedUpstream()
    upstream.script([{"role": "assistant", "content": "From A."},
                     {"role": "assistant", "content": "From B."},
                     {"role": "assistant", "content": "A again."}])
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello there."}]}
    with memd_in_front(upstream.app, tmp_path / "d") as (base, engine):
        def post(payload: dict[str, Any], agent: str) -> str:
            resp = httpx.post(f"{base}/v1/chat/completions", json=payload, timeout=60,
                              headers={"User-Agent": agent})
            assert resp.status_code == 200, resp.text
            return resp.headers["x-memd-session"]

        a = post(body, "client-a/1.0")
        b = post(body, "client-b/2.0")
        follow = {**body, "messages": [*body["messages"],
                                       {"role": "assistant", "content": "From A."},
                                       {"role": "user", "content": "More."}]}
        assert post(follow, "client-a/1.1") == a != b
        assert stored(engine, b) == [("user", "Hello there."), ("assistant", "From B.")]
        assert stored(engine, a) == [("user", "Hello there."), ("assistant", "From A."),
                                     ("user", "More."), ("assistant", "A again.")]


SUMMARY = ("Summary of the conversation so far: we read a.py and b.py and found that the "
           "batch limit is never checked.")


def test_a_compacted_history_with_the_same_conversation_name_goes_on(engine: Memd) -> None:
    """A client compacts its history (it chains to nothing stored) and names the same
    conversation in its header: the same session, the new turns stored after the old."""
    system = {"role": "system", "content": OPENCODE}
    ask = {"role": "user", "content": "Read a.py and b.py."}
    sid = turn(engine, [system, ask], {"role": "assistant", "content": "Both read."},
               conversation="ses_1")
    compacted = [system, {"role": "user", "content": SUMMARY},
                 {"role": "user", "content": "Now add the check."}]
    assert turn(engine, compacted, {"role": "assistant", "content": "Added."},
                conversation="ses_1") == sid
    assert stored(engine, sid)[-3:] == [("user", SUMMARY), ("user", "Now add the check."),
                                        ("assistant", "Added.")]
    # without the name, or under another, a history that chains to nothing is new
    assert turn(engine, compacted, {"role": "assistant", "content": "Added."}) != sid
    assert turn(engine, compacted, {"role": "assistant", "content": "Added."},
                conversation="ses_2") != sid


def test_a_sub_agent_under_its_parents_name_is_a_session_of_its_own(engine: Memd) -> None:
    """Claude Code's sub-agents send their parent's session id with a system prompt of
    their own: the name does not merge them into the parent's session."""
    ask = {"role": "user", "content": "Read a.py and b.py."}
    sid = turn(engine, [{"role": "system", "content": OPENCODE}, ask],
               {"role": "assistant", "content": "Both read."}, conversation="ses_1")
    sub = [{"role": "system", "content": CLINE},
           {"role": "user", "content": "Find every caller of load()."}]
    assert turn(engine, sub, {"role": "assistant", "content": "Two."},
                conversation="ses_1") != sid


def test_a_branch_under_the_same_name_still_branches(engine: Memd) -> None:
    """An edited earlier turn chains to part of the session: a branch, as without a name
    (the name is read only for a history that chains to nothing)."""
    system = {"role": "system", "content": OPENCODE}
    ask = {"role": "user", "content": "Read a.py."}
    sid = turn(engine, [system, ask], {"role": "assistant", "content": "Read."},
               conversation="ses_1")
    turn(engine, [system, ask, {"role": "assistant", "content": "Read."},
                  {"role": "user", "content": "Now b.py."}],
         {"role": "assistant", "content": "Read b."}, conversation="ses_1")
    edited = [system, ask, {"role": "assistant", "content": "Read."},
              {"role": "user", "content": "Now c.py instead."}]
    branch = turn(engine, edited, {"role": "assistant", "content": "Read c."},
                  conversation="ses_1")
    assert branch != sid
    assert engine.session(branch, "local").parent_session_id == sid


def test_the_conversation_headers_clients_send() -> None:
    assert conversation_of({"x-session-id": "ses_de1f", "x-session-affinity": "x"}) \
        == "ses_de1f"
    assert conversation_of({"x-claude-code-session-id": " 0b5c-11 "}) == "0b5c-11"
    assert conversation_of({"session-id": "019a"}) == "019a"
    assert conversation_of({"user-agent": "curl/8"}) is None
    assert conversation_of({"x-session-id": "a\x00b"}) is None  # not a name
    assert conversation_of({"x-session-id": "x" * 201}) is None


def test_the_proxy_reads_the_conversation_header(tmp_path: Path) -> None:
    """Through the daemon: opencode's compacted history under its x-session-id header
    continues its session."""
    upstream = ScriptedUpstream()
    upstream.script([{"role": "assistant", "content": "Both read."},
                     {"role": "assistant", "content": "Added."}])
    system = {"role": "system", "content": OPENCODE}
    with memd_in_front(upstream.app, tmp_path / "d") as (base, engine):
        def post(messages: list[dict[str, Any]]) -> str:
            resp = httpx.post(f"{base}/v1/chat/completions", timeout=60,
                              json={"model": "gpt-4o", "messages": messages},
                              headers={"User-Agent": "opencode/1.18.0",
                                       "x-session-id": "ses_de1f36984ffeb"})
            assert resp.status_code == 200, resp.text
            return resp.headers["x-memd-session"]

        first = post([system, {"role": "user", "content": "Read a.py and b.py."}])
        assert post([system, {"role": "user", "content": SUMMARY},
                     {"role": "user", "content": "Now add the check."}]) == first
