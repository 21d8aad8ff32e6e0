"""What a client inserts on its own never becomes a memory or a standing instruction; the
user's own words in the same messages still do."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import memd
from memd.engine.background import compact
from memd.engine.conversation.chat import finish_chat, prepare_chat
from memd.engine.conversation.turns import last_user_text
from memd.engine.learning.extract import extract
from memd.engine.learning.templates import CLIENT_LINES, is_client_line, user_words
from tests.agent_traffic import KINDS, generate

AIDER_FILES = (
    "I switched to a new code base. Please don't consider the above files or try to edit "
    "them any longer.\n\n"
    "Here are summaries of some files present in my git repository.\n"
    "Do not propose changes to these files, treat them as *read-only*.\n"
    "If you need to edit any of these files, ask me to *add them to the chat* first.\n\n"
    "src/app.py:\n⋮...\n│def main():\n"
)
CLINE_TURN = (
    "<task>\nAdd a --verbose flag to the CLI. Always use pytest for the tests.\n</task>\n"
    "<environment_details>\n# VSCode Visible Files\nsrc/cli.py\n\n"
    "Never commit secrets to the repository.\n</environment_details>"
)


def texts(text: str) -> list[str]:
    return [ex.text for ex in extract(user_words(text))]


def test_client_lines_alone_extract_nothing_though_the_rules_would_read_them() -> None:
    lines = [line for line in CLIENT_LINES if "{" not in line]
    assert all(is_client_line(line) for line in lines)
    raw = [line for line in lines if extract(line)]
    assert len(raw) >= 5, raw  # without the corpus these would be standing instructions
    assert [line for line in lines if texts(line)] == []


def test_the_users_words_beside_client_text_are_still_read() -> None:
    assert texts(AIDER_FILES) == []
    mixed = texts(AIDER_FILES + "\nBy the way, I prefer tabs over spaces.")
    assert len(mixed) == 1 and "tabs" in mixed[0]
    cline = texts(CLINE_TURN)
    assert len(cline) == 1 and "pytest" in cline[0]  # the task is the user's; the
    assert not any("secret" in t for t in cline)  # environment details are the client's


def test_lines_are_matched_whole_and_loosely() -> None:
    assert is_client_line("  do not propose changes to these files, treat them as READ-ONLY ")
    assert is_client_line("I committed the changes with git hash 3f2a1b & commit msg: fix")
    assert not is_client_line("Do not propose changes to the database schema.")
    assert not is_client_line("")


@pytest.mark.parametrize("kind", KINDS)
def test_agent_traffic_makes_no_memory_but_a_stated_preference_does(
    tmp_path: Path, kind: str,
) -> None:
    session = generate(kind, seed=11, target_tokens=20_000)
    with memd.open(tmp_path / kind, embedder="fake") as engine:
        for step in session.steps:
            call = prepare_chat(engine, "local", None, step.request["messages"],
                                model="gpt-4o")
            finish_chat(engine, call, status=200, reply=step.reply, finish_reason="stop",
                        usage=None, model="gpt-4o")
        while engine.run_jobs():
            pass
        # A long session's oldest turns become an episode (memd.engine.background.compact): the
        # user's own requests, none of the client's text
        episodes = [m.text for m in engine.list("local") if compact.TAG in m.tags]
        assert [m.text for m in engine.list("local") if compact.TAG not in m.tags] == []
        for text in episodes:
            assert "files" not in text and "│" not in text and "```" not in text, text
        assert engine.facts("local") == []
        # The same first request, with the user's own preference added to its last user
        # message, in a new chat.
        request = copy.deepcopy(session.steps[0].request)
        last = [m for m in request["messages"] if m["role"] == "user"][-1]
        said = "\nI prefer tabs over spaces."
        if isinstance(last["content"], list):
            last["content"].append({"type": "text", "text": said})
        else:
            last["content"] += said
        prepare_chat(engine, "local", None, request["messages"], model="gpt-4o")
        while engine.run_jobs():
            pass
        found = [m.text for m in engine.list("local") if compact.TAG not in m.tags]
        assert len(found) == 1 and "tabs" in found[0], found


CLINE_READ = [
    {"type": "text", "text": "[read_file for 'NOTES.md'] Result:"},
    {"type": "text", "text": "I prefer tabs over spaces.\nAlways use pytest for the tests.\n"},
    {"type": "text", "text": "<environment_details>\n# VSCode Visible Files\nsrc/config.py\n"
                             "</environment_details>"},
]
AIDER_RUN = ("I ran this command:\n\npytest -q\n\nAnd got this output:\n\n"
             "1 failed in 0.1s\nNote: I always use the staging database for tests.\n")


def test_tool_output_is_never_the_users_words_but_their_quoted_reply_is() -> None:
    read = "\n".join(p["text"] for p in CLINE_READ)
    assert user_words(read).strip() == ""
    assert texts(read) == [] and texts(AIDER_RUN) == []
    assert extract(read) and extract(AIDER_RUN)  # read as prose they would be memories
    added = ("I added these files to the chat: src/app.py\nLet me know if there are "
             "others we should add.\n\nsrc/app.py\n```\n# Never commit secrets.\n```\n")
    assert texts(added) == []
    denied = ("[replace_in_file for 'src/app.py'] Result:\nThe user denied this operation "
              "and provided the following feedback:\n<feedback>\nI prefer tabs over "
              "spaces.\n</feedback>\n<environment_details>\n</environment_details>")
    assert user_words(denied).strip() == "I prefer tabs over spaces."
    assert len(texts(denied)) == 1


def test_the_query_of_a_tool_loop_is_the_users_last_request() -> None:
    task = "<task>\nMake the config loader accept TOML files.\n</task>"
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are Cline."},
        {"role": "user", "content": [{"type": "text", "text": task}]},
        {"role": "assistant", "content": "<read_file><path>src/config.py</path></read_file>"},
        {"role": "user", "content": CLINE_READ},
    ]
    assert last_user_text(messages, 10**6) == task
    messages += [{"role": "assistant", "content": "Done."},
                 {"role": "user", "content": "Now add a test for it."}]
    assert last_user_text(messages, 10**6) == "Now add a test for it."
    assert last_user_text([{"role": "user", "content": AIDER_RUN}], 10**6) is None


def test_an_agents_tool_loop_keeps_the_block_of_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the proxy path: the memory block goes into the task's message, and the tool
    results after it neither retrieve again nor get blocks of their own."""
    session = generate("cline-like", seed=5, target_tokens=20_000)
    with memd.open(tmp_path / "cline", embedder="fake") as engine:
        # a memory about the task, so that the task's block holds it
        engine.add("The nightly job reads the schedules limit from the policies module.",
                   "local")
        queries: list[str] = []
        retrieve = engine.memory_candidates

        def counted(user_id: str, query: str, **kw: Any) -> Any:
            queries.append(query)
            return retrieve(user_id, query, **kw)

        monkeypatch.setattr(engine, "memory_candidates", counted)
        anchors = []
        for step in session.steps[:6]:
            call = prepare_chat(engine, "local", None, step.request["messages"],
                                model="gpt-4o")
            finish_chat(engine, call, status=200, reply=step.reply, finish_reason="stop",
                        usage=None, model="gpt-4o")
            anchors.append([b["at"] for b in call.report["blocks"]])
        first_user = next(i for i, m in enumerate(session.steps[0].request["messages"])
                          if m["role"] == "user")
        assert all(a[0] == first_user for a in anchors), anchors
        # one retrieval for the task, one for the user's feedback quoted in a tool result
        assert len(queries) == 2 and queries[0].startswith("<task>"), queries
        assert queries[1] == "The CI run still shows one failure in a neighbouring test. " \
                             "Please look at it too."
