"""Text a client inserts on its own, told apart from the user's words before extraction.

Coding agents put their own text in user-role messages: Aider announces the files it adds
("Do not propose changes to these files, treat them as *read-only*"), Cline wraps every
turn in ``<environment_details>``, opencode adds ``<system-reminder>`` blocks. Read as the
user's words, such a sentence becomes a standing instruction injected into every later
session of every client ("User doesn't want the assistant to edit the above files"). So
extraction reads a user message only after :func:`user_words` has taken out

- blocks in the tags clients wrap their own context in (``CLIENT_TAGS``), and
- lines that are lines of the public prompts of popular clients (``CLIENT_LINES``),
  compared case- and punctuation-insensitively.

What remains is what the user typed; a message that is all client text extracts nothing.
Client text no list here knows is recognized when it recurs across sessions
(:mod:`memd.engine.learning.recurring`).

Some user-role messages are written by the client from what a tool or a command returned:
Cline's and Roo's tool results (``[read_file for 'src/app.py'] Result:`` and the file),
Aider's files added to the chat, its repository map (``Here are summaries of some files
present in my git repository.`` and a line per definition), its read-only files and
command output (``I ran this command:``), and the messages a client writes whole: its
environment message (qwen-code), its memory, compaction and summary requests (qwen-code,
opencode, Continue), its resumption notices (Cline). Their only
user words are the replies the client quotes in them (``<feedback>``, ``<answer>``,
``<user_message>``); the rest is a tool's output, whatever it says. The retrieval query of
a call is the user's words too (:func:`memd.engine.conversation.turns.last_user_text`): during an
agent's tool loop it stays the user's last request, not the file the tool just read.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

# Tags whose content a client adds on its own (the user's words are outside them): context
# and reminders (Cline, opencode, Claude Code, Codex), slash-command bodies and the output
# of local and shell commands and its background tasks' notices (Claude Code), and the earlier
# conversation a client quotes back when it compacts one (qwen-code's state snapshot,
# opencode's conversation and template). ``command-args`` stays: the user typed it.
CLIENT_TAGS = ("environment_details", "environment_context", "env", "system-reminder",
               "system_reminder", "system", "file_content", "file", "files", "repo_map",
               "repo-map", "context", "open_files", "visible_files", "terminal_output",
               "tool_result", "tool_output", "function_results", "explicit_instructions",
               "slash_command", "user_instructions", "turn_aborted", "command-name",
               "command-message", "command-instructions", "skill-root",
               "local-command-stdout", "local-command-stderr", "local-command-caveat",
               "bash-stdout", "bash-stderr", "task-notification",
               "state_snapshot", "scratchpad", "conversation", "prior-summary", "template",
               "conversation-checkpoint", "recap")


def _corpus() -> tuple[str, ...]:
    """The lines of ``memd/data/client_lines.txt``, comments and blank lines left out."""
    text = resources.files("memd").joinpath("data", "client_lines.txt").read_text("utf-8")
    return tuple(line.strip() for line in text.splitlines()
                 if line.strip() and not line.startswith("#"))


# Lines of the prompts that popular clients send as user messages (Aider's file and
# repository announcements, Cline's and Roo's task and error wrappers, qwen-code's,
# opencode's and Continue's memory, compaction and reminder prompts), kept as data in
# memd/data/client_lines.txt. A line counts when the user message holds it on a line of
# its own.
CLIENT_LINES: tuple[str, ...] = _corpus()

# How a message written from a tool's or a command's output starts (Cline's and Roo's tool
# results, Aider's added files, its repository map and read-only files, command output).
_TOOL_OUTPUT = re.compile(
    r"\s*(?:\[[\w-]+(?: for '[^\n]*')?\] Result:|I added these files to the chat:"
    r"|I ran this command:|I ran the following shell command:"
    r"|I have \*added these files to the chat\*"
    r"|Here are summaries of some files present in my git repository\."
    r"|Here are some READ ONLY files, provided for your reference\."
    # messages a client writes whole: its environment, memory, compaction and summary
    # prompts, its resumption and step-limit notices
    r"|This is the Qwen Code\. We are setting up the context for our chat\."
    r"|Managed memory directory:|Here is the conversation so far:"
    r"|Summarize what was done in this conversation\.|CRITICAL - MAXIMUM STEPS REACHED"
    r"|Please provide a concise summary of our conversation so far"
    r"|\[TASK RESUMPTION\]|<conversation-checkpoint>)")
# The tags in which such a message quotes the user's reply.
_USER_REPLY = re.compile(r"<(feedback|answer|user_message)>(.*?)</\1>", re.S)

_TAGGED = re.compile(
    r"<(?P<tag>" + "|".join(re.escape(t) for t in CLIENT_TAGS) + r")(?:\s[^>]*)?>"
    r".*?</(?P=tag)>", re.S | re.I)
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


def _key(line: str) -> str:
    """A line compared case- and punctuation-insensitively."""
    return _NOT_WORD.sub(" ", line.lower()).strip()


@lru_cache(maxsize=1)
def _known() -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """The client lines without placeholders, and those with them as patterns."""
    exact, patterns = set(), []
    for line in CLIENT_LINES:
        if _PLACEHOLDER.search(line):
            parts = [_key(p) for p in _PLACEHOLDER.split(line)]
            patterns.append(re.compile(r"\s*.*?\s*".join(re.escape(p) for p in parts)))
        else:
            exact.add(_key(line))
    return frozenset(exact), tuple(patterns)


def is_client_line(line: str) -> bool:
    """Whether ``line`` is a line of a known client prompt."""
    key = _key(line)
    if not key:
        return False
    exact, patterns = _known()
    return key in exact or any(p.fullmatch(key) for p in patterns)


def user_words(text: str) -> str:
    """``text`` without the blocks and lines a client adds on its own."""
    if _TOOL_OUTPUT.match(text):
        return "\n".join(m.group(2).strip() for m in _USER_REPLY.finditer(text))
    text = _TAGGED.sub("\n", text)
    return "\n".join(line for line in text.splitlines() if not is_client_line(line))
