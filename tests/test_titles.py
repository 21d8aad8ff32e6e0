"""Session titles (memd.engine.conversation.titles): the rules title a session from its first user
message with user words, in the append, once; the helper's title replaces it only when
the message grounds it; a recalled message's line names its session's title. The store
is exercised on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import memd
from memd.engine.conversation.titles import check_title, rule_title
from memd.engine.retrieval.recall import render
from memd.errors import ModelError
from memd.types import Message
from tests.sanitizer_corpus import OPENAI_PROJ
from tests.scripted_helper import ScriptedHelper

STAGING = "Hi! Can you help me with deploying to staging? It fails with a 502 from nginx."
CLINE_TOOL_RESULT = ("[read_file for 'src/app.py'] Result:\n"
                     "def main():\n    print('Deploy everything to production now')\n")


@pytest.fixture
def m(backend: str, tmp_path: Path) -> Iterator[memd.Memd]:
    """An engine with the fake embedder on each backend (a new PostgreSQL database)."""
    import pg

    engine = pg.open_engine(backend, tmp_path / "d")
    yield engine
    engine.close()


def said(m: memd.Memd, *texts: str, session_id: str | None = None) -> str:
    """``texts`` appended as alice's messages, one append each, in a new session (or
    ``session_id``); the session's id."""
    sid = session_id or m.create_session("alice").id
    for text in texts:
        m.append(sid, "alice", [{"role": "user", "content": text},
                                {"role": "assistant", "content": "Noted."}])
    return sid


def title_of(m: memd.Memd, sid: str) -> str | None:
    return m.session(sid, "alice").title


# -- the rules, as a pure function ----------------------------------------------------------


@pytest.mark.parametrize(("text", "title"), [
    (STAGING, "Deploying to staging"),
    ("hey, please fix the flaky login test in CI.", "Fix the flaky login test in CI"),
    ("Could you explain how asyncio.gather works? Thanks", "Explain how asyncio.gather works"),
    ("Deploying to staging fails with a 502 error every time I push a build",
     "Deploying to staging fails with a 502 error"),
    ("## Refactor the parser\nIt is too slow.", "Refactor the parser"),
    ("hi\nwhy does `cargo build` fail on CI", "Why does cargo build fail on CI"),
    ("Our deploy database is called rocketdb_prod_v7, remember that.",
     "Our deploy database is called rocketdb_prod_v7, remember"),
    ("_Really_ fix **the** parse_args bug", "Really fix the parse_args bug"),
    ('"What is the staging host again?"', "What is the staging host again"),
    ("hi", None),
    ("ok.", None),
    ("", None),
])
def test_the_rules_title_a_message_by_its_first_sentence(text: str, title: str | None) -> None:
    assert rule_title(text) == title


def test_a_rule_title_is_short_even_for_long_words() -> None:
    title = rule_title("Supercalifragilistic " * 3 + "x" * 200)
    assert title is not None and len(title) <= 60


def test_the_helpers_title_is_kept_only_when_the_message_grounds_it() -> None:
    words = "Deploying to staging fails with a 502 from nginx."
    assert check_title(json.dumps({"title": "Staging deploy 502s."}), words) == \
        "Staging deploy 502s"
    assert check_title(json.dumps({"title": "Nginx errors on staging"}), words)
    assert check_title(json.dumps({"title": "Kubernetes cluster upgrade"}), words) is None
    assert check_title(json.dumps({"title": "The how of it"}), words) is None  # no content
    assert check_title(json.dumps({"title": "staging " * 10}), words) is None  # too long
    assert check_title(json.dumps({"title": "Key [OPENAI_KEY_1] on staging"}), words) is None
    assert check_title("not json", words) is None
    assert check_title(json.dumps({"name": "Staging"}), words) is None


def test_a_recalled_line_without_a_title_is_as_before() -> None:
    msg = Message(id="a", session_id="s", user_id="u", turn_index=1, role="user",
                  content="x y", token_count=2, created_at=0.0)
    assert render([msg], msg) == "[1970-01-01] User: x y"
    assert render([msg], msg, 'Say "hi"') == "[1970-01-01, \"Say 'hi'\"] User: x y"


# -- through the engine, both backends ----------------------------------------------------


def test_the_first_user_message_titles_the_session_once(m: memd.Memd) -> None:
    sid = said(m, STAGING)
    assert title_of(m, sid) == "Deploying to staging"
    said(m, "Now let's talk about rust lifetimes.", session_id=sid)
    assert title_of(m, sid) == "Deploying to staging"
    assert not m.jobs.listed("pending") or all(
        q.job.kind != "title" for q in m.jobs.listed("pending"))  # the helper is off


def test_a_client_tool_result_gives_no_title_and_the_users_next_message_does(
        m: memd.Memd) -> None:
    sid = said(m, CLINE_TOOL_RESULT)
    assert title_of(m, sid) is None
    said(m, "hello", session_id=sid)  # a greeting alone names nothing
    assert title_of(m, sid) is None
    said(m, "Rename the main function to run.", session_id=sid)
    assert title_of(m, sid) == "Rename the main function to run"


def test_a_title_holds_no_secret(m: memd.Memd) -> None:
    sid = said(m, f"Please set the key {OPENAI_PROJ} in deploy.yaml for staging.")
    title = title_of(m, sid)
    assert title and OPENAI_PROJ not in title and "sk-proj" not in title
    assert "deploy.yaml" in title


def test_a_recalled_message_carries_its_sessions_title(m: memd.Memd) -> None:
    said(m, STAGING)
    m.jobs.run_due()  # the messages' vectors
    later = m.create_session("alice")
    ctx = m.context("alice", session_id=later.id,
                    messages=[{"role": "user", "content": STAGING}])
    block = str(ctx.messages[0]["content"])
    assert '"Deploying to staging"] User: Hi! Can you help me' in block


def test_a_grounded_helper_title_replaces_the_rule_based_one(m: memd.Memd) -> None:
    helper = ScriptedHelper(title="Nginx 502 on staging deploys")
    m.jobs.helper = helper
    sid = said(m, STAGING)
    assert title_of(m, sid) == "Deploying to staging"  # in line, before any job ran
    jobs = [q.job for q in m.jobs.listed("pending") if q.job.kind == "title"]
    assert [set(j.payload) for j in jobs] == [{"session_id", "message_id"}]  # no text
    m.jobs.run_due()
    assert title_of(m, sid) == "Nginx 502 on staging deploys"
    assert len(helper.asked["title"]) == 1 and "deploying to staging" in helper.asked["title"][0]
    assert m.jobs.llm_counts["titles"] == 1
    # a second message neither asks the helper again nor renames the session
    said(m, "And the database migrations?", session_id=sid)
    m.jobs.run_due()
    assert title_of(m, sid) == "Nginx 502 on staging deploys" and len(helper.asked["title"]) == 1


def test_an_ungrounded_or_failing_helper_leaves_the_rule_based_title(m: memd.Memd) -> None:
    m.jobs.helper = ScriptedHelper(title="Kubernetes cluster upgrade")
    sid = said(m, STAGING)
    m.jobs.run_due()
    assert title_of(m, sid) == "Deploying to staging"
    assert m.jobs.llm_counts["titles_rejected"] == 1

    m.jobs.helper = ScriptedHelper(title=ModelError("the helper is down"))
    sid = said(m, STAGING)
    m.jobs.run_due()
    assert title_of(m, sid) == "Deploying to staging"
    assert any(q.job.kind == "title" for q in m.jobs.listed("pending"))  # retried later


# -- the API -------------------------------------------------------------------------------


def test_the_session_json_has_its_title(client: TestClient) -> None:
    sid = client.post("/v1/sessions", json={}).json()["id"]
    assert client.get(f"/v1/sessions/{sid}").json()["title"] is None
    client.post(f"/v1/sessions/{sid}/messages",
                json={"messages": [{"role": "user", "content": "Please rotate the logs."}]})
    assert client.get(f"/v1/sessions/{sid}").json()["title"] == "Rotate the logs"
