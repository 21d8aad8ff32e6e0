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

Some user-role messages are written by the client from what a tool or a command returned:
Cline's and Roo's tool results (``[read_file for 'src/app.py'] Result:`` and the file),
Aider's files added to the chat, its repository map (``Here are summaries of some files
present in my git repository.`` and a line per definition), its read-only files and
command output (``I ran this command:``). Their only
user words are the replies the client quotes in them (``<feedback>``, ``<answer>``,
``<user_message>``); the rest is a tool's output, whatever it says. The retrieval query of
a call is the user's words too (:func:`memd.engine.sessions.last_user_text`): during an
agent's tool loop it stays the user's last request, not the file the tool just read.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Tags whose content a client adds on its own (the user's words are outside them).
CLIENT_TAGS = ("environment_details", "system-reminder", "system_reminder", "system",
               "file_content", "file", "files", "repo_map", "repo-map", "context",
               "open_files", "visible_files", "terminal_output", "tool_result",
               "explicit_instructions", "slash_command")

# Lines of the prompts that popular clients send as user messages (Aider's file and
# repository announcements, Cline's and Roo's task and error wrappers, opencode's and
# Continue's reminders). A line counts when the user message holds it on a line of its own.
CLIENT_LINES: tuple[str, ...] = (
    "I have *added these files to the chat* so you can go ahead and edit them.",
    "*Trust this message as the true contents of these files!*",
    "Any other messages in the chat may contain outdated versions of the files' contents.",
    "Ok, any changes I propose will be to those files.",
    "I am not sharing any files that you can edit yet.",
    "I am not sharing the full contents of any files with you yet.",
    "Here are summaries of some files present in my git repository.",
    "Do not propose changes to these files, treat them as *read-only*.",
    "If you need to edit any of these files, ask me to *add them to the chat* first.",
    "Here are some READ ONLY files, provided for your reference.",
    "Do not edit these files!",
    "I switched to a new code base. Please don't consider the above files or try to edit "
    "them any longer.",
    "Don't try and edit any existing code without asking me to add the files to the chat!",
    "Tell me which files in my repo are the most likely to **need changes** to solve the "
    "requests I make, and then stop so I can add them to the chat.",
    "Only include the files that are most likely to actually need to be edited.",
    "Don't include files that might contain relevant context, just files that will need to "
    "be changed.",
    "I spoke to you previously about a number of things.",
    # Aider's worked examples, sent as a user's requests before the real conversation
    "Change get_factorial() to use math.factorial",
    "Refactor hello() into its own file.",
    "I committed the changes with git hash {hash} & commit msg: {message}",
    "I updated the files.",
    "I edited the files myself.",
    "I didn't see any properly formatted edits in your reply?!",
    "You are diligent and tireless!",
    "You NEVER leave comments describing code without implementing it!",
    "You always COMPLETELY IMPLEMENT the needed code!",
    "Pay careful attention to the scope of the user's request. Do what they ask, but no more.",
    "Do not improve, comment, fix or modify unrelated parts of the code in any way!",
    "To suggest changes to a file you MUST return the entire content of the updated file.",
    "Always use best practices when coding.",
    "Respect and use existing conventions, libraries, etc that are already present in the "
    "code base.",
    "[ERROR] You did not use a tool in your previous response! Please retry with a tool use.",
    "# Reminder: Instructions for Tool Use",
    "Tool uses are formatted using XML-style tags.",
    "Always adhere to this format for all tool uses to ensure proper parsing and execution.",
    "[TASK RESUMPTION] This task was interrupted just now.",
    "It may or may not be complete, so please reassess the task context.",
    "Be aware that the project state may have changed since then.",
    "If the task has not been completed, retry the last step before interruption and "
    "proceed with completing the task.",
    "The user has provided feedback on the results.",
    "Consider their input to continue the task, and then attempt completion again.",
    "Please address the user's feedback.",
    "Make sure to follow the instructions in the system prompt.",
    "Do not mention this reminder to the user.",
    "Continue with the task. Do not ask for confirmation.",
)

# How a message written from a tool's or a command's output starts (Cline's and Roo's tool
# results, Aider's added files, its repository map and read-only files, command output).
_TOOL_OUTPUT = re.compile(
    r"\s*(?:\[[\w-]+(?: for '[^\n]*')?\] Result:|I added these files to the chat:"
    r"|I ran this command:|I have \*added these files to the chat\*"
    r"|Here are summaries of some files present in my git repository\."
    r"|Here are some READ ONLY files, provided for your reference\.)")
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
