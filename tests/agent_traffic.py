"""Realistic coding-agent traffic for tests and benchmarks: generated sessions, and a
scripted upstream to replay them against.

``generate(kind, ...)`` builds one session the way a popular coding agent talks to an
OpenAI-compatible ``/v1/chat/completions`` endpoint: a long system prompt that stays
byte-identical, tool definitions (or tool use written as XML tags in the assistant's
text), assistant tool calls (parallel ones included) answered by whole source files,
diffs, test logs and directory listings, and follow-up user turns. Every step resends the
whole history plus what is new, so step ``i + 1``'s messages are step ``i``'s messages,
then step ``i``'s reply, then the new tool results or user message: clients never edit
what they sent before.

Design decisions:

- Everything is derived from a seeded ``random.Random``; the project the agent works on
  (Python and TypeScript files, tests, logs) is synthetic, so a benchmark's input does not
  change when memd's own code does. Nothing touches the network or reads files.
- The agent edits its project for real: a file read after an edit shows the edit, and
  diffs and SEARCH/REPLACE blocks are computed from the two versions.
- Sizes are measured the way memd measures them (``memd.models.tokens.message_tokens``
  per message plus the tools JSON, see ``request_tokens``); a session grows until its last
  request is close to ``target_tokens``, and tool results are cut at a line boundary
  (with a note saying so, as agents do) when a whole file would overshoot.
- ``ScriptedUpstream`` answers requests with scripted assistant messages, as JSON or as
  SSE chunks, and records what it was sent; it never looks at the request to decide.
"""

from __future__ import annotations

import base64
import copy
import difflib
import itertools
import json
import re
import struct
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from random import Random
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memd.models.tokens import count_text, message_tokens

KINDS: tuple[str, ...] = (
    "cline-like", "aider-like", "opencode-like", "continue-like", "sdk-script",
)

Message = dict[str, Any]

CONTEXT_LENGTH_EXCEEDED: dict[str, Any] = {"error": {
    "message": "This model's maximum context length is 128000 tokens. However, your messages "
               "resulted in 131072 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
}}


@dataclass(frozen=True)
class Step:
    """One round trip: the full JSON body the client sends, and the assistant message the
    model answers, which the next step's request contains."""

    request: dict[str, Any]
    reply: dict[str, Any]


@dataclass(frozen=True)
class AgentSession:
    """A generated session: ``name`` is its kind, one of ``KINDS``:

    - ``cline-like``: no ``tools``; a ~9k-token system prompt (as one text part marked
      ``cache_control``) describing XML tool tags, which the assistant writes in its text;
      results come back as user messages of text parts with ``<environment_details>``.
    - ``aider-like``: no ``tools``; a repo map and whole files in fenced blocks in user
      messages, SEARCH/REPLACE blocks in the replies, command output pasted by the user.
    - ``opencode-like``: two system messages, 12 tools, parallel tool calls, numbered
      file reads.
    - ``continue-like``: 13 ``builtin_*`` tools, one call at a time, user content as parts
      with a PNG screenshot.
    - ``sdk-script``: a short script prompt, 10 tools, parallel calls, ``user``,
      ``metadata`` and ``seed`` in the body, assistant messages as the SDK dumps them.
    """

    name: str
    steps: list[Step]


def request_tokens(request: dict[str, Any], model: str | None = None) -> int:
    """A request's size as memd counts it: its messages plus its tools as JSON."""
    model = model or request.get("model")
    n = sum(message_tokens(m, model) for m in request["messages"])
    if request.get("tools"):
        n += count_text(json.dumps(request["tools"]), model)
    return n


# --- words and prose ---------------------------------------------------------------------

_NOUNS = ("session record batch window snapshot account policy route chunk event cursor "
          "ledger invoice shipment order profile token budget index cache queue worker "
          "schedule report metric alert tenant").split()
_VERBS = ("load store merge score prune fetch parse render resolve flush apply collect count "
          "split validate compact refresh export import sync retry").split()
_ADJS = "pending stale active local remote partial final primary cached raw".split()
_FIELDS = ("name created_at updated_at size weight owner status priority attempts "
           "deadline label source target version").split()
_PROJECTS = "harbor quill lattice beacon orchard tally meridian cobalt".split()

_WHEN = (
    "you change a public function", "a test fails only on CI", "you add a dependency",
    "a module grows past four hundred lines", "you touch the database layer",
    "you rename a symbol", "you add a configuration option", "a command needs network access",
    "you are unsure which file owns a behaviour", "you write a migration",
    "you handle user input", "an error crosses a module boundary", "you add logging",
    "the user asks for a quick fix", "a file is generated",
)
_DO = (
    "update its docstring and every caller in the same change",
    "run the narrowest test first, then the whole suite",
    "pin the version and say why in the commit message",
    "split it along its natural seams before adding more",
    "wrap the change in a single transaction",
    "search the whole repository for the old name before finishing",
    "give it a typed default in the settings module",
    "ask the user before running it",
    "read the module's tests before its code",
    "make it reversible and test the downgrade",
    "validate it at the edge and trust it inside",
    "translate it into the project's own exception type",
    "log at debug level and never log secrets",
    "still keep the change reviewable and covered by a test",
    "edit its source template instead of the output",
)
_WHY = (
    "reviewers read diffs, not whole files", "flaky tests hide real regressions",
    "the lock file is shared by three services", "small modules are read in one sitting",
    "partial writes have corrupted data before", "stale names break plugins silently",
    "operators configure through the environment", "the build runs offline",
    "tests document intent better than comments", "rollbacks happen under pressure",
    "internal code should not re-check the same invariant", "callers match on our errors",
    "logs are shipped to a shared index", "a quick fix still ships to production",
    "generated files are overwritten on every build",
)


def _rules(rng: Random, n: int) -> list[str]:
    combos = list(itertools.product(range(len(_WHEN)), range(len(_DO)), range(len(_WHY))))
    picked = rng.sample(combos, n)
    return [f"- When {_WHEN[a]}, {_DO[b]}: {_WHY[c]}." for a, b, c in picked]


def _sentence(rng: Random) -> str:
    noun, verb, adj = rng.choice(_NOUNS), rng.choice(_VERBS), rng.choice(_ADJS)
    return rng.choice((
        f"{verb.capitalize()}s {adj} {_plural(noun)} and keeps them in order",
        f"The {noun} store: {verb} and look up {_plural(noun)} by id",
        f"Helpers to {verb} {adj} {_plural(noun)} before they reach the {rng.choice(_NOUNS)} layer",
        f"Everything about {_plural(noun)} that the {rng.choice(_NOUNS)} worker needs",
    ))


# --- a synthetic project the agent works on ----------------------------------------------

def _plural(noun: str) -> str:
    if noun.endswith("y"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("ch", "sh", "x", "s")) else "s")


def _py_module(rng: Random, pkg: str, noun: str) -> str:
    cls = "".join(w.capitalize() for w in noun.split("_"))
    err = f"{cls}Error"
    fields = rng.sample(_FIELDS, rng.randint(4, 7))
    consts = [(f"DEFAULT_{rng.choice(_FIELDS).upper()}", rng.choice((3, 10, 30, 64, 500)))
              for _ in range(rng.randint(2, 4))]
    out = [f'"""{_sentence(rng)}."""', "", "from __future__ import annotations", "",
           "import json", "import logging", "from collections.abc import Iterable, Iterator",
           "from dataclasses import dataclass, field", "from pathlib import Path",
           "from typing import Any", "", f"from {pkg}.errors import {pkg.capitalize()}Error",
           "", "log = logging.getLogger(__name__)", ""]
    out += [f"{k} = {v}" for k, v in dict(consts).items()]
    out += ["", "", f"class {err}({pkg.capitalize()}Error):",
            f'    """Raised when a {noun} cannot be {rng.choice(_VERBS)}ed."""', "", "",
            "@dataclass(frozen=True)", f"class {cls}:",
            f'    """One {noun} as the {rng.choice(_NOUNS)} layer sees it."""', "",
            "    id: str"]
    out += [f"    {f}: {rng.choice(('str', 'int', 'float', 'str | None'))}"
            + (" = None" if i > 1 and rng.random() < 0.4 else "")
            for i, f in enumerate(fields)]
    out += ["    tags: list[str] = field(default_factory=list)", ""]
    for _ in range(rng.randint(3, 5)):
        out += _py_function(rng, cls, err, fields, consts, method=True)
    out += ["", "", f"class {cls}Store:", f'    """{_sentence(rng)}."""', "",
            "    def __init__(self, path: Path, limit: int = "
            f"{consts[0][0]}) -> None:",
            "        self.path = path", "        self.limit = limit",
            f"        self._items: dict[str, {cls}] = {{}}", ""]
    for _ in range(rng.randint(6, 10)):
        out += _py_function(rng, cls, err, fields, consts, method=True)
    for _ in range(rng.randint(4, 8)):
        out += ["", ""] + _py_function(rng, cls, err, fields, consts, method=False)[:-1]
    return "\n".join(out) + "\n"


def _py_function(rng: Random, cls: str, err: str, fields: list[str],
                 consts: list[tuple[str, int]], *, method: bool) -> list[str]:
    verb, noun = rng.choice(_VERBS), rng.choice(_NOUNS)
    arg, f1, f2 = _plural(noun), rng.choice(fields), rng.choice(fields)
    const = rng.choice(consts)[0]
    ind = "        " if method else "    "
    head = "    " if method else ""
    sig = "self, " if method else ""
    ret = rng.choice((f"list[{cls}]", "int", f"dict[str, {cls}]", "None", f"Iterator[{cls}]"))
    lines = [f"{head}def {verb}_{_plural(noun)}({sig}{arg}: Iterable[{cls}], "
             f"limit: int = {const}) -> {ret}:",
             f'{ind}"""{verb.capitalize()} {_plural(noun)}, at most ``limit`` of them; '
             f'{rng.choice(_WHY)}."""']
    blocks = [
        ["if limit <= 0:", f'    raise {err}(f"limit must be positive, got {{limit}}")'],
        ["kept = []", f"for item in {arg}:", f"    if item.{f1} is None:", "        continue",
         "    kept.append(item)", "    if len(kept) >= limit:", "        break"],
        [f"by_id = {{item.id: item for item in {arg}}}",
         f'log.debug("{verb} %d {_plural(noun)}", len(by_id))'],
        ["try:", "    payload = json.loads(self.path.read_text(encoding=\"utf-8\"))"
         if method else "    payload = json.loads(str(limit))",
         "except json.JSONDecodeError as exc:", f"    raise {err}(str(exc)) from exc"],
        [f"total = sum(1 for item in {arg} if item.{f2})",
         f'log.info("%s: %d of %d", "{noun}", total, limit)'],
        ["with open(\"/dev/null\", \"a\", encoding=\"utf-8\") as fh:",
         f"    for item in {arg}:",
         f"        fh.write(json.dumps({{\"id\": item.id, \"{f1}\": item.{f1}}}) + \"\\n\")"],
        [f"ordered = sorted({arg}, key=lambda item: (item.{f1} is None, str(item.{f1})))",
         "ordered = ordered[:limit]"],
    ]
    for block in rng.sample(blocks, rng.randint(2, 5)):
        lines += [ind + b for b in block]
    lines.append(ind + {f"list[{cls}]": f"return list({arg})[:limit]", "int": "return limit",
                        f"dict[str, {cls}]": f"return {{item.id: item for item in {arg}}}",
                        "None": "return None",
                        f"Iterator[{cls}]": f"yield from list({arg})[:limit]"}[ret])
    return [*lines, ""]


def _ts_module(rng: Random, stem: str) -> str:
    name = "".join(w.capitalize() for w in stem.split("-"))
    fields = rng.sample(_FIELDS, rng.randint(4, 7))
    out = [f"// {_sentence(rng)}.", "import { z } from \"zod\";",
           "import { api, ApiError } from \"./api\";", "",
           f"export interface {name} {{", "  id: string;"]
    out += [f"  {f}{'?' if rng.random() < 0.3 else ''}: "
            f"{rng.choice(('string', 'number', 'boolean', 'string | null'))};" for f in fields]
    out += ["}", "", f"export const {name}Schema = z.object({{", "  id: z.string(),"]
    out += [f"  {f}: z.{rng.choice(('string', 'number', 'boolean'))}().optional()," for f in fields]
    out += ["});", ""]
    for _ in range(rng.randint(8, 14)):
        verb, noun, f1 = rng.choice(_VERBS), rng.choice(_NOUNS), rng.choice(fields)
        fn = verb + _plural(noun).capitalize()
        out += [f"/** {verb.capitalize()} {_plural(noun)} for the {rng.choice(_NOUNS)} view. */",
                f"export async function {fn}(items: {name}[], limit = "
                f"{rng.choice((10, 25, 50))}): Promise<{name}[]> {{",
                "  if (limit <= 0) {",
                "    throw new ApiError(`limit must be positive, got ${limit}`);", "  }"]
        body = [
            ["  const kept: " + name + "[] = [];", "  for (const item of items) {",
             f"    if (item.{f1} === undefined) continue;", "    kept.push(item);",
             "    if (kept.length >= limit) break;", "  }"],
            [f"  const res = await api.post(\"/{_plural(noun)}/{verb}\", "
             "{ ids: items.map((i) => i.id) });",
             "  if (!res.ok) {", f"    throw new ApiError(`{verb} failed: ${{res.status}}`);",
             "  }"],
            ["  const byId = new Map(items.map((i) => [i.id, i] as const));",
             f"  console.debug(\"{verb}\", byId.size);"],
            [f"  items.sort((a, b) => String(a.{f1}).localeCompare(String(b.{f1})));"],
        ]
        for block in rng.sample(body, rng.randint(1, 3)):
            out += block
        out += ["  return items.slice(0, limit);", "}", ""]
    return "\n".join(out)


def _py_test(rng: Random, pkg: str, stem: str, module: str) -> str:
    funcs = re.findall(r"^def (\w+)\(", module, re.M)
    cls = re.search(r"^class (\w+):", module, re.M)
    out = [f'"""Tests for {pkg}.{stem}."""', "", "import pytest", "",
           f"from {pkg}.{stem} import {', '.join([cls.group(1)] if cls else [])}"
           + (", " if cls and funcs else "") + ", ".join(funcs[:4]), ""]
    for fn in funcs[:6] or ["nothing"]:
        for case in rng.sample(("empty", "limit", "order", "missing", "roundtrip"), 2):
            out += ["", f"def test_{fn}_{case}() -> None:",
                    f"    items = [{cls.group(1) if cls else 'dict'}(id=str(i)) for i in "
                    f"range({rng.randint(2, 9)})]",
                    f"    got = {fn}(items, limit={rng.randint(1, 5)})",
                    f"    assert len(list(got)) <= {rng.randint(1, 5)}"]
    return "\n".join(out) + "\n"


class Project:
    """A small repository the agent reads, searches, edits and tests; edits are real."""

    def __init__(self, rng: Random) -> None:
        self.rng = rng
        self.name = rng.choice(_PROJECTS)
        self.root = f"/home/dev/{self.name}"
        pkg = self.name
        self.files: dict[str, str] = {}
        nouns = rng.sample(_NOUNS, 12)
        stems = [_plural(n) for n in nouns]
        for noun, stem in zip(nouns, stems, strict=True):
            self.files[f"src/{pkg}/{stem}.py"] = _py_module(rng, pkg, noun)
        for stem in stems[:6]:
            self.files[f"tests/test_{stem}.py"] = _py_test(
                rng, pkg, stem, self.files[f"src/{pkg}/{stem}.py"])
        for stem in rng.sample(_NOUNS, 6):
            self.files[f"web/src/{stem}-view.ts"] = _ts_module(rng, f"{stem}-view")
        self.files[f"src/{pkg}/errors.py"] = (
            f'"""The {pkg} exception tree."""\n\n\nclass {pkg.capitalize()}Error(Exception):\n'
            f'    """Base of every error {pkg} raises."""\n')
        self.files["pyproject.toml"] = (
            f'[project]\nname = "{pkg}"\nversion = "0.{rng.randint(1, 9)}.0"\n'
            'requires-python = ">=3.11"\ndependencies = ["httpx>=0.27", "click>=8"]\n')
        self.files["web/package.json"] = json.dumps(
            {"name": f"{pkg}-web", "private": True, "scripts": {"build": "tsc -p .",
             "test": "vitest run"}, "dependencies": {"zod": "^3.23.8"}}, indent=2) + "\n"
        self.edits = 0
        self.test_runs = 0

    def source_files(self) -> list[str]:
        return [p for p in self.files if p.endswith((".py", ".ts")) and "errors" not in p]

    def pick(self, n: int) -> list[str]:
        return self.rng.sample(self.source_files(), n)

    def pick_editable(self) -> str:
        return self.rng.choice([p for p in self.source_files() if not p.startswith("tests/")])

    def listing(self, indent: bool = False) -> str:
        if not indent:
            dirs = sorted({p.rsplit("/", 1)[0] + "/" for p in self.files if "/" in p})
            return "\n".join(sorted([*dirs, *self.files]))
        out, seen = [f"{self.root}/"], set()
        for path in sorted(self.files):
            parts = path.split("/")
            for depth in range(len(parts) - 1):
                d = "/".join(parts[: depth + 1])
                if d not in seen:
                    seen.add(d)
                    out.append("  " * (depth + 1) + parts[depth] + "/")
            out.append("  " * len(parts) + parts[-1])
        return "\n".join(out)

    def grep(self, pattern: str) -> str:
        hits = [f"{path}:{i}:{line.strip()}" for path, text in sorted(self.files.items())
                for i, line in enumerate(text.splitlines(), 1) if pattern in line]
        return "\n".join(hits[:60]) or "No matches found."

    def pattern(self) -> str:
        return f"{self.rng.choice(_VERBS)}_" if self.rng.random() < 0.6 else "limit"

    def edit(self, path: str) -> tuple[str, str, str]:
        """Add a guard to one function of ``path``; returns (old snippet, new snippet,
        unified diff), the snippets being whole lines of the old and new file."""
        old = self.files[path]
        lines = old.splitlines()
        defs = [i for i, line in enumerate(lines)
                if re.match(r"\s*(def |export async function )", line)]
        i = self.rng.choice(defs)
        body = i + 2 if lines[i + 1].strip().startswith(('"""', "/**")) else i + 1
        indent = re.match(r"\s*", lines[body]).group(0)  # type: ignore[union-attr]
        self.edits += 1
        if path.endswith(".py"):
            guard = [f"{indent}if limit > MAX_BATCH_{self.edits}:",
                     f"{indent}    limit = MAX_BATCH_{self.edits}  # bounded: see the store's"
                     " docstring"]
        else:
            guard = [f"{indent}limit = Math.min(limit, MAX_BATCH_{self.edits});"]
        new_lines = lines[:body] + guard + lines[body:]
        self.files[path] = "\n".join(new_lines) + "\n"
        old_snip = "\n".join(lines[i:body + 1])
        new_snip = "\n".join(new_lines[i:body + 1 + len(guard)])
        diff = "".join(difflib.unified_diff(old.splitlines(True), self.files[path].splitlines(
            True), f"a/{path}", f"b/{path}"))
        return old_snip, new_snip, diff

    def git_diff(self, diffs: list[str]) -> str:
        return "".join(f"diff --git a/{d.split(chr(10))[0][6:]} b/{d.split(chr(10))[0][6:]}\n"
                       f"index {self.rng.getrandbits(28):07x}..{self.rng.getrandbits(28):07x} "
                       f"100644\n{d}" for d in diffs) or "(no changes)"

    def test_log(self) -> tuple[str, str]:
        """(command, output): the first run of a pair fails with a traceback, the second
        passes."""
        self.test_runs += 1
        tests = sorted(p for p in self.files if p.startswith("tests/"))
        failing = self.test_runs % 2 == 1
        n = sum(self.files[t].count("\ndef test_") for t in tests)
        out = ["============================= test session starts "
               "==============================",
               "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0",
               f"rootdir: {self.root}", "configfile: pyproject.toml",
               f"collected {n} items", ""]
        bad = self.rng.choice(tests)
        for t in tests:
            k = self.files[t].count("\ndef test_")
            dots = "." * k
            if failing and t == bad:
                dots = dots[:-1] + "F"
            done = 100 * (tests.index(t) + 1) // len(tests)
            out.append(f"{t} {dots}".ljust(76) + f"[{done:3d}%]")
        if failing:
            name = re.findall(r"^def (test_\w+)", self.files[bad], re.M)[-1]
            src = self.files[bad].split(f"def {name}", 1)[1].splitlines()[1:4]
            pkg_file = next(p for p in self.files if p.startswith("src/") and "errors" not in p)
            out += ["", "=================================== FAILURES "
                    "===================================",
                    f"_{'_' * 20} {name} {'_' * 20}", "",
                    f"    def {name}() -> None:", *(f"{s}" for s in src[:-1]),
                    f">   {src[-1].strip()}",
                    f"E   assert {self.rng.randint(3, 9)} <= {self.rng.randint(1, 2)}",
                    f"E    +  where {self.rng.randint(3, 9)} = len([...])", "",
                    f"{bad}:{self.rng.randint(8, 60)}: AssertionError",
                    "----------------------------- Captured log call "
                    "------------------------------",
                    f"DEBUG    {self.name}.{pkg_file.rsplit('/', 1)[1][:-3]}:"
                    f"{pkg_file.rsplit('/', 1)[1][:-3]}.py:{self.rng.randint(20, 200)} "
                    f"{self.rng.choice(_VERBS)} {self.rng.randint(2, 9)} records",
                    "=========================== short test summary info "
                    "============================",
                    f"FAILED {bad}::{name} - AssertionError",
                    f"========================= 1 failed, {n - 1} passed in "
                    f"{self.rng.uniform(0.5, 4):.2f}s ========================="]
        else:
            out += ["", f"============================== {n} passed in "
                    f"{self.rng.uniform(0.5, 4):.2f}s =============================="]
        return "python -m pytest -q tests", "\n".join(out)

    def big_log(self, nbytes: int) -> str:
        """A server log of exactly ``nbytes`` bytes (ASCII)."""
        rng, lines, size = self.rng, [], 0
        while size < nbytes:
            line = (f"2025-03-14T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                    f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z "
                    f"{rng.choice(('INFO ', 'DEBUG', 'WARN '))} worker[{rng.randint(1, 8)}] "
                    f"{rng.choice(_VERBS)} {rng.choice(_NOUNS)} id={rng.getrandbits(48):012x} "
                    f"size={rng.randint(1, 9999)} took={rng.uniform(0.1, 900):.1f}ms\n")
            lines.append(line)
            size += len(line)
        text = "".join(lines)[:nbytes]
        return text


def png_data_url(width: int = 8, height: int = 8) -> str:
    """A small valid RGB PNG (a colour gradient) as a ``data:`` URL."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    rows = b"".join(b"\x00" + bytes(v for x in range(width)
                                     for v in (x * 255 // width, y * 255 // height, 128))
                    for y in range(height))
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


# --- system prompts and tools ------------------------------------------------------------

_XML_TOOLS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("execute_command", "Run a CLI command on the user's machine. Tailor the command to the "
     "user's shell, explain what it does, and prefer one complex command over a script. "
     "Commands run in the current working directory.",
     [("command", "(required) The command to run; valid for the user's shell."),
      ("requires_approval", "(required) true for installs, deletions, network access or "
       "anything with side effects; false for reads and builds.")]),
    ("read_file", "Read a file's contents at a path relative to the working directory. Use it "
     "to inspect existing code, configuration and logs. Text is returned as it is; PDF and "
     "DOCX are converted to text.", [("path", "(required) The file's path.")]),
    ("write_to_file", "Write content to a file, creating it and its directories if needed and "
     "overwriting it otherwise. Always give the COMPLETE intended content, with no elision.",
     [("path", "(required) The file's path."), ("content", "(required) The full content.")]),
    ("replace_in_file", "Replace sections of an existing file with SEARCH/REPLACE blocks; use "
     "it for targeted changes. Each SEARCH must match the file exactly, character for "
     "character, and blocks replace only the first match, in file order.",
     [("path", "(required) The file's path."),
      ("diff", "(required) One or more SEARCH/REPLACE blocks.")]),
    ("search_files", "Run a regex search over the files of a directory, recursively, showing "
     "each match with context lines.", [("path", "(required) The directory."),
                                        ("regex", "(required) Rust regex syntax."),
                                        ("file_pattern", "(optional) A glob such as '*.ts'.")]),
    ("list_files", "List files and directories within a directory; recursively when asked. "
     "Do not use it to confirm that files you created exist.",
     [("path", "(required) The directory."), ("recursive", "(optional) true or false.")]),
    ("list_code_definition_names", "List the top-level definitions (classes, functions, "
     "methods) in the source files of a directory.", [("path", "(required) The directory.")]),
    ("browser_action", "Drive a headless browser: launch at a URL, click, type, scroll, close. "
     "Every action returns a screenshot and the console logs.",
     [("action", "(required) launch, click, type, scroll_down, scroll_up or close."),
      ("url", "(optional) For launch."), ("coordinate", "(optional) x,y for click."),
      ("text", "(optional) For type.")]),
    ("use_mcp_tool", "Call a tool of a connected MCP server.",
     [("server_name", "(required)"), ("tool_name", "(required)"),
      ("arguments", "(required) A JSON object following the tool's input schema.")]),
    ("access_mcp_resource", "Read a resource of a connected MCP server.",
     [("server_name", "(required)"), ("uri", "(required)")]),
    ("ask_followup_question", "Ask the user a question when you cannot proceed without an "
     "answer. Use it sparingly; prefer finding out with tools.",
     [("question", "(required)"), ("options", "(optional) A JSON array of 2-5 answers.")]),
    ("attempt_completion", "Present the result of your work once every tool use has been "
     "confirmed successful. The result must be final and not end with a question.",
     [("result", "(required) What was done."),
      ("command", "(optional) A command that demonstrates the result.")]),
    ("new_task", "Start a new task with a summary of the context so far.",
     [("context", "(required) What the new task needs to know.")]),
    ("plan_mode_respond", "Answer the user in PLAN MODE, while planning a solution.",
     [("response", "(required)")]),
]


def _cline_system(rng: Random, project: Project, model: str, tokens: int) -> str:
    out = ["You are Atlas, a highly skilled software engineer with extensive knowledge in "
           "many programming languages, frameworks, design patterns, and best practices.",
           "", "====", "", "TOOL USE", "",
           "You have access to a set of tools that are executed upon the user's approval. You "
           "can use one tool per message, and will receive the result of that tool use in the "
           "user's response. You use tools step by step, each informed by the result of the "
           "previous one.", "", "# Tool Use Formatting", "",
           "Tool use is formatted using XML-style tags. The tool name is enclosed in opening "
           "and closing tags, and each parameter is similarly enclosed within its own tags:",
           "", "<tool_name>", "<parameter1_name>value1</parameter1_name>", "</tool_name>", "",
           "Always adhere to this format for the tool use to ensure proper parsing.", "",
           "# Tools", ""]
    for name, desc, params in _XML_TOOLS:
        out += [f"## {name}", f"Description: {desc}", "Parameters:"]
        out += [f"- {p}: {d}" for p, d in params]
        out += ["Usage:", f"<{name}>"] + [f"<{p}>{p.replace('_', ' ')} here</{p}>"
                                            for p, _ in params] + [f"</{name}>", ""]
    out += ["# Tool Use Examples", ""]
    for i, (name, _, params) in enumerate(rng.sample(_XML_TOOLS[:6], 5), 1):
        out += [f"## Example {i}: using {name}", "", f"<{name}>"]
        out += [f"<{p}>{project.pick(1)[0] if p == 'path' else 'example ' + p}</{p}>"
                for p, _ in params] + [f"</{name}>", ""]
    out += ["# Tool Use Guidelines", ""]
    out += [f"{i}. {g}" for i, g in enumerate((
        "In <thinking> tags, assess what you already know and what you need to find out.",
        "Choose the most appropriate tool for each step; prefer list_files over `ls`.",
        "Use one tool per message and wait for its result before going on.",
        "Never assume the outcome of a tool use: each step is informed by the last result.",
        "The user's reply may contain linter errors, test failures or terminal output: read "
        "it and adjust.", "Formulate tool use with the XML format specified for each tool.",
        "ALWAYS wait for the user's confirmation after each tool use before proceeding."), 1)]
    out += ["", "====", "", "MCP SERVERS", "",
            "The Model Context Protocol enables communication with local servers that provide "
            "extra tools and resources.", "", "# Connected MCP Servers", ""]
    for server in ("github", "postgres-readonly"):
        out += [f"## {server} (`npx -y @example/{server}-mcp`)", "", "### Available Tools"]
        for verb in rng.sample(_VERBS, 4):
            schema = {"type": "object", "properties": {
                f: {"type": "string", "description": f"The {f.replace('_', ' ')}."}
                for f in rng.sample(_FIELDS, 3)}, "required": []}
            out += [f"- {verb}_{rng.choice(_NOUNS)}: {_sentence(rng)}.", "    Input Schema:",
                    "    " + json.dumps(schema, indent=2).replace("\n", "\n    "), ""]
    out += ["====", "", "EDITING FILES", "",
            "You have two tools for changing files: write_to_file and replace_in_file. "
            "write_to_file is for new files and complete rewrites of small files; "
            "replace_in_file is the default for targeted edits of existing files. After an "
            "edit, the user's editor may auto-format the file: the tool result shows the "
            "final state, which you must use as the reference for later SEARCH blocks.", "",
            "SEARCH/REPLACE blocks look like this:", "", "------- SEARCH",
            "[exact content to find]", "=======", "[new content to replace with]",
            "+++++++ REPLACE", "", "====", "", "ACT MODE V. PLAN MODE", "",
            "In ACT MODE you use tools to accomplish the task and finish with "
            "attempt_completion. In PLAN MODE you gather information and discuss a plan with "
            "the user through plan_mode_respond before any change is made.", "", "====", "",
            "CAPABILITIES", ""]
    out += [f"- {c}" for c in (
        "You can execute commands, list and search files, read and edit files, inspect code "
        "definitions, drive a browser and ask follow-up questions.",
        "The first message of a task includes a recursive listing of the working directory in "
        "environment_details, which gives an overview of the project's structure.",
        "search_files finds patterns across files with context; combine it with "
        "list_code_definition_names to understand unfamiliar code before changing it.",
        "execute_command runs in the user's VS Code terminal; long-running commands may keep "
        "running in the background while you continue.")]
    out += ["", "====", "", "RULES", ""]
    out += _rules(rng, 28)
    out += ["", "====", "", "SYSTEM INFORMATION", "", "Operating System: Linux 6.8",
            "Default Shell: /bin/bash", "Home Directory: /home/dev",
            f"Current Working Directory: {project.root}", "", "====", "", "OBJECTIVE", "",
            "1. Analyze the task and set clear, achievable goals in a logical order.",
            "2. Work through the goals one tool at a time, informed by each result.",
            "3. Before calling a tool, think in <thinking> tags about which tool is relevant "
            "and whether all its required parameters are known.",
            "4. When done, use attempt_completion to present the result.",
            "5. The user may give feedback; use it to improve, without pointless "
            "back-and-forth.", "", "====", "", "USER'S CUSTOM INSTRUCTIONS", "",
            "# .clinerules/project.md", ""]
    return _pad("\n".join(out), rng, tokens, model)


def _pad(text: str, rng: Random, tokens: int, model: str) -> str:
    """Append project conventions until ``text`` is about ``tokens`` tokens long."""
    have = count_text(text, model)
    if have >= tokens:
        return text
    per_rule = max(1, count_text("\n".join(_rules(Random(0), 20)), model) // 20)
    extra = _rules(rng, min(len(_WHEN) * len(_DO) * len(_WHY), (tokens - have) // per_rule))
    return text + "\n" + "\n".join(extra) + "\n"


def _env_details(project: Project, step: int, files: list[str], listing: bool) -> str:
    out = ["<environment_details>", "# VSCode Visible Files", files[0] if files else
           "(No visible files)", "", "# VSCode Open Tabs", ", ".join(files) or "(No open tabs)",
           "", "# Current Time", f"3/14/2025, {9 + step // 60}:{step % 60:02d}:17 AM "
           "(UTC, UTC+0:00)", ""]
    if listing:
        out += [f"# Current Working Directory ({project.root}) Files", project.listing(), ""]
    out += ["# Current Mode", "ACT MODE", "</environment_details>"]
    return "\n".join(out)


def _tool(name: str, description: str, required: dict[str, str],
          optional: dict[str, str] | None = None) -> dict[str, Any]:
    """A function tool; a parameter named ``name:type`` has that JSON type (default
    string)."""
    props: dict[str, Any] = {}
    for key, desc in {**required, **(optional or {})}.items():
        pname, _, ptype = key.partition(":")
        props[pname] = {"type": ptype or "string", "description": desc}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": props,
                       "required": [k.partition(":")[0] for k in required],
                       "additionalProperties": False}}}


def _usage_notes(rng: Random, n: int) -> str:
    return "\n\nUsage notes:\n" + "\n".join(_rules(rng, n))


# --- the session builder -----------------------------------------------------------------

class _Builder:
    """Grows a session one step at a time and keeps its size in tokens."""

    def __init__(self, base: dict[str, Any], opening: list[Message], model: str,
                 target: int) -> None:
        self.base, self.model, self.target = base, model, target
        self.messages: list[Message] = list(opening)
        self.steps: list[Step] = []
        self.tokens = (count_text(json.dumps(base["tools"]), model) if base.get("tools")
                       else 0) + sum(message_tokens(m, model) for m in opening)

    def room(self) -> int:
        return int(self.target * 1.03) - self.tokens

    def step(self, reply: Message, new: list[Message], oversized: bool = False) -> None:
        """Send the current messages, get ``reply``, then append it and ``new``. The
        ``oversized`` result's content does not count towards the session's budget."""
        self.steps.append(Step(request=self._request(), reply=reply))
        self.messages += [reply, *new]
        self.tokens += message_tokens(reply, self.model)
        self.tokens += sum(message_tokens({"role": m["role"]}, self.model) if oversized
                           else message_tokens(m, self.model) for m in new)

    def _request(self) -> dict[str, Any]:
        body = {"model": self.base["model"], "messages": self.messages}
        body.update((k, v) for k, v in self.base.items() if k != "model")
        return copy.deepcopy(body)

    def finish(self, reply: Message) -> list[Step]:
        self.steps.append(Step(request=self._request(), reply=reply))
        return self.steps


def _fit(text: str, tokens: int, model: str) -> str:
    """``text``, or its first lines and a note saying how many were left out, within
    ``tokens``."""
    if count_text(text, model) <= tokens:
        return text
    lines = text.splitlines()
    lo, hi = 0, len(lines)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_text("\n".join(lines[:mid]), model) <= tokens - 20:
            lo = mid
        else:
            hi = mid - 1
    return "\n".join(lines[:lo]) + f"\n[... {len(lines) - lo} more lines not shown ...]"


def _call_id(rng: Random, prefix: str = "call_") -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(rng.choice(alphabet) for _ in range(24))


_TASKS = (
    "The {noun} store returns more items than the limit when some of them have no {field}. "
    "Find where the limit is applied, fix it, and add a test.",
    "Add an upper bound to every batch function in the {nouns} module so a caller cannot ask "
    "for more than the store holds, and make sure the tests pass.",
    "The nightly job logs 'limit must be positive' for {nouns}. Track down why the limit ends "
    "up at zero and fix it at the source, not at the call site.",
    "Refactor the {nouns} view so that sorting happens on the server; keep the public "
    "function names and update the tests.",
)
_FOLLOWUPS = (
    "Thanks. Can you also make the same change in the web client, and run the tests again?",
    "That works, but the log line is noisy at info level. Lower it to debug everywhere you "
    "touched, then rerun the suite.",
    "One more thing: add a short note to the module docstring explaining the bound, and "
    "check nothing else imports the old constant.",
    "The CI run still shows one failure in a neighbouring test. Please look at it too.",
)
_THOUGHTS = (
    "I need to see how {x} is used before changing it.",
    "The failure points at {x}; reading it will show where the limit is lost.",
    "Let me check the tests for {x} to understand the expected behaviour.",
    "Before editing {x} I should confirm which callers depend on the current order.",
)


class _Agent:
    """Shared plumbing: the project, the task text, and the order of actions."""

    name = ""
    stream_usage = True

    def __init__(self, rng: Random, model: str, stream: bool, target: int) -> None:
        self.rng, self.model, self.stream, self.target = rng, model, stream, target
        self.project = Project(rng)
        noun = rng.choice(_NOUNS)
        self.task = rng.choice(_TASKS).format(noun=noun, nouns=_plural(noun),
                                              field=rng.choice(_FIELDS))
        self.diffs: list[str] = []
        self.followups = iter(rng.sample(_FOLLOWUPS, len(_FOLLOWUPS)))
        self.big: str | None = None

    def base(self) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        body.update(self.extra())
        body["stream"] = self.stream
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def extra(self) -> dict[str, Any]:
        return {}

    def actions(self) -> Iterator[str]:
        yield from ("explore", "read", "edit", "test")
        while True:
            yield from self.rng.choice((("read", "edit", "test"), ("explore", "read", "edit"),
                                        ("read", "read", "edit", "test")))

    def thought(self, path: str) -> str:
        return self.rng.choice(_THOUGHTS).format(x=path)

    def opening(self) -> list[Message]:
        raise NotImplementedError

    def act(self, action: str, room: int) -> tuple[Message, list[Message]]:
        raise NotImplementedError

    def wrap_up(self, followup: str) -> tuple[Message, list[Message]]:
        raise NotImplementedError

    def final(self) -> Message:
        raise NotImplementedError

    def summary(self) -> str:
        files = sorted({d.split("\n")[0][6:] for d in self.diffs})
        runs = self.project.test_runs
        done = (f"I bounded the batch size where the limit is applied, with guards in "
                f"{', '.join(files)}." if files else "I have not changed any file yet.")
        if not runs:
            return done + " I have not run the tests yet."
        if runs % 2:
            return done + " One test still fails; the traceback above shows where."
        return done + f" The test suite passes ({runs} runs, the last one green)."

    def passing(self) -> bool:
        """Whether the last test run passed: the point where an agent reports back."""
        return self.project.test_runs > 0 and self.project.test_runs % 2 == 0


# --- Cline-like: XML tool tags in the assistant's text, results in user messages -------

class _ClineLike(_Agent):
    name = "cline-like"

    def __init__(self, rng: Random, model: str, stream: bool, target: int) -> None:
        super().__init__(rng, model, stream, target)
        self.open_files = self.project.pick(2)
        self.clock = 0  # minutes since the task started, shown in environment_details

    def extra(self) -> dict[str, Any]:
        return {"temperature": 0}

    def opening(self) -> list[Message]:
        # Below ~20k tokens of target the prompt shrinks, so that a small session still
        # has room for a few tool round trips.
        system = _cline_system(self.rng, self.project, self.model,
                               min(9_000, self.target * 45 // 100))
        return [
            # A cacheable prefix marked the way some clients do for caching providers.
            {"role": "system", "content": [{"type": "text", "text": system,
                                            "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": f"<task>\n{self.task}\n</task>"},
                {"type": "text", "text": _env_details(self.project, 0, self.open_files, True),
                 "cache_control": {"type": "ephemeral"}}]},
        ]

    def _result(self, tool: str, target: str, text: str) -> Message:
        self.clock += 1
        return {"role": "user", "content": [
            {"type": "text", "text": f"[{tool} for '{target}'] Result:"},
            {"type": "text", "text": text},
            {"type": "text", "text": _env_details(self.project, self.clock, self.open_files,
                                                  False)}]}

    def _say(self, thinking: str, tool: str, params: dict[str, str]) -> Message:
        body = "\n".join(f"<{k}>{v}</{k}>" for k, v in params.items())
        return {"role": "assistant",
                "content": f"<thinking>\n{thinking}\n</thinking>\n\n<{tool}>\n{body}\n</{tool}>"}

    def act(self, action: str, room: int) -> tuple[Message, list[Message]]:
        p = self.project
        if action == "big":
            assert self.big is not None
            reply = self._say("The server log should show when the limit drops to zero.",
                              "read_file", {"path": "logs/server.log"})
            return reply, [self._result("read_file", "logs/server.log", self.big)]
        if action == "explore":
            pattern = p.pattern()
            reply = self._say(f"I'll search for `{pattern}` to find where batches are cut.",
                              "search_files", {"path": "src", "regex": pattern,
                                               "file_pattern": "*.py"})
            return reply, [self._result("search_files", pattern,
                                        _fit(p.grep(pattern), room, self.model))]
        if action == "read":
            path = p.pick(1)[0]
            self.open_files = [path, *self.open_files[:2]]
            reply = self._say(self.thought(path), "read_file", {"path": path})
            return reply, [self._result("read_file", path,
                                        _fit(p.files[path], room, self.model))]
        if action == "edit":
            path = p.pick_editable()
            old, new, diff = p.edit(path)
            self.diffs.append(diff)
            block = f"------- SEARCH\n{old}\n=======\n{new}\n+++++++ REPLACE"
            reply = self._say(f"I'll add the bound in {path}.", "replace_in_file",
                              {"path": path, "diff": block})
            text = ("The content was successfully saved to " + path + ".\n\nHere is the full, "
                    f"updated content of the file that was saved:\n\n<final_file_content path="
                    f"\"{path}\">\n{p.files[path]}\n</final_file_content>")
            return reply, [self._result("replace_in_file", path, _fit(text, room, self.model))]
        command, log = p.test_log()
        reply = self._say("Now I'll run the tests to check the change.", "execute_command",
                          {"command": command, "requires_approval": "false"})
        return reply, [self._result("execute_command", command,
                                    _fit(f"Command executed.\nOutput:\n{log}", room, self.model))]

    def wrap_up(self, followup: str) -> tuple[Message, list[Message]]:
        reply = {"role": "assistant", "content": "<attempt_completion>\n<result>\n"
                 f"{self.summary()}\n</result>\n</attempt_completion>"}
        self.clock += 1
        return reply, [{"role": "user", "content": [
            {"type": "text", "text": "[attempt_completion] Result:"},
            {"type": "text", "text": "The user has provided feedback on the results. Consider "
             f"their input to continue the task.\n<feedback>\n{followup}\n</feedback>"},
            {"type": "text", "text": _env_details(self.project, self.clock, self.open_files,
                                                  False)}]}]

    def final(self) -> Message:
        return {"role": "assistant", "content": "<attempt_completion>\n<result>\n"
                f"{self.summary()}\n</result>\n<command>python -m pytest -q tests</command>\n"
                "</attempt_completion>"}


# --- Aider-like: no tools; files in fenced blocks, SEARCH/REPLACE edits -------------------

_AIDER_RULES = """Act as an expert software developer.
Always use best practices when coding.
Respect and use existing conventions, libraries, etc that are already present in the code base.
Take requests for changes to the supplied code.
If the request is ambiguous, ask questions.

Once you understand the request you MUST:
1. Decide if you need to propose edits to any files that haven't been added to the chat. If \
so, tell the user their full path names and ask them to add the files to the chat, then stop \
and wait for their approval.
2. Think step-by-step and explain the needed changes in a few short sentences.
3. Describe each change with a SEARCH/REPLACE block per the examples below.

All changes to files must use this SEARCH/REPLACE block format.

# SEARCH/REPLACE block rules:

Every SEARCH/REPLACE block must use this format:
1. The file path alone on a line, verbatim. No bold asterisks, no quotes around it.
2. The opening fence and code language, eg: ```python
3. The start of search block: <<<<<<< SEARCH
4. A contiguous chunk of lines to search for in the existing source code
5. The dividing line: =======
6. The lines to replace into the source code
7. The end of the replace block: >>>>>>> REPLACE
8. The closing fence: ```

Every SEARCH section must EXACTLY MATCH the existing file content, character for character, \
including all comments, docstrings, etc.
SEARCH/REPLACE blocks will replace only the first match.
Keep SEARCH/REPLACE blocks concise; include just the changing lines and a few surrounding \
lines for uniqueness.
Only create SEARCH/REPLACE blocks for files that the user has added to the chat!
To move code within a file, use 2 blocks: 1 to delete it from its current location, 1 to \
insert it in the new location.
If you want to put code in a new file, use a SEARCH/REPLACE block with an empty SEARCH \
section and the new file's contents in the REPLACE section.
"""


def _fence(path: str, text: str) -> str:
    return f"{path}\n```\n{text}```\n" if text.endswith("\n") else f"{path}\n```\n{text}\n```\n"


class _AiderLike(_Agent):
    name = "aider-like"

    def extra(self) -> dict[str, Any]:
        return {"temperature": 0}

    def actions(self) -> Iterator[str]:
        while True:
            yield from ("read", "edit", "test", "edit")

    def opening(self) -> list[Message]:
        rng, p = self.rng, self.project
        system = _pad(_AIDER_RULES + "\nProject conventions:\n", rng, 2_200, self.model)
        lang = "python"
        example_user = "Change get_factorial() to use math.factorial"
        example_reply = ("To make this change we need to modify `mathweb/flask/app.py`:\n\n"
                         "1. Import the math package.\n2. Remove the existing factorial() "
                         "function.\n3. Update get_factorial() to call math.factorial "
                         "instead.\n\nHere are the *SEARCH/REPLACE* blocks:\n\n"
                         f"mathweb/flask/app.py\n```{lang}\n<<<<<<< SEARCH\nfrom flask import "
                         "Flask\n=======\nimport math\nfrom flask import Flask\n>>>>>>> "
                         "REPLACE\n```\n")
        repo_map = ["Here are summaries of some files present in my git repository.",
                    "Do not propose changes to these files, treat them as *read-only*.",
                    "If you need to edit any of these files, ask me to *add them to the chat* "
                    "first.", ""]
        for path in sorted(p.files):
            defs = [line.rstrip(" :{") for line in p.files[path].splitlines()
                    if re.match(r"[ \t]*(class |def |export (async function|interface|const) )",
                                line)]
            if defs:
                repo_map += [f"{path}:", "⋮"] + [f"│{d}" for d in defs[:12]] + ["⋮", ""]
        self.chat_files = [p.pick_editable()]
        self.chat_files += [f for f in p.pick(2) if f not in self.chat_files][:1]
        share = self.target // 10
        added = "".join(_fence(f, _fit(p.files[f], share, self.model) + "\n")
                        for f in self.chat_files)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": example_user},
            {"role": "assistant", "content": example_reply},
            {"role": "user", "content": _fit("\n".join(repo_map), self.target // 10,
                                             self.model)},
            {"role": "assistant", "content": "Ok, I won't try and edit those files without "
                                             "asking first."},
            {"role": "user", "content": "I have *added these files to the chat* so you can go "
             "ahead and edit them.\n\n*Trust this message as the true contents of these "
             f"files!*\nAny other messages in the chat may contain outdated versions of the "
             f"files' contents.\n\n{added}"},
            {"role": "assistant", "content": "Ok, any changes I propose will be to those "
                                             "files."},
            {"role": "user", "content": self.task},
        ]

    def act(self, action: str, room: int) -> tuple[Message, list[Message]]:
        p = self.project
        if action == "big":
            assert self.big is not None
            reply = {"role": "assistant", "content": "I need to see the server log from the "
                     "failing run to know where the limit goes to zero. Please run the job "
                     "again and share its log."}
            return reply, [{"role": "user", "content": "I ran this command:\n\ncat "
                            f"logs/server.log\n\nAnd got this output:\n\n{self.big}"}]
        if action == "read":
            wanted = [f for f in p.pick(3) if f not in self.chat_files][:2] or p.pick(1)
            reply = {"role": "assistant", "content": "To do this I need to edit these files, "
                     "which are not in the chat yet:\n\n" + "\n".join(wanted) + "\n\nPlease "
                     "add them to the chat so I can propose changes."}
            self.chat_files += wanted
            added = "".join(_fence(f, _fit(p.files[f], room // len(wanted), self.model) + "\n")
                            for f in wanted)
            return reply, [{"role": "user", "content": "I added these files to the chat: "
                            f"{', '.join(wanted)}\nLet me know if there are others we should "
                            f"add.\n\n{added}"}]
        if action == "edit":
            blocks, lang = [], ""
            editable = [f for f in self.chat_files if not f.startswith("tests/")]
            for path in self.rng.sample(editable, min(2, len(editable))):
                old, new, diff = p.edit(path)
                self.diffs.append(diff)
                lang = "python" if path.endswith(".py") else "typescript"
                blocks.append(f"{path}\n```{lang}\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n"
                              ">>>>>>> REPLACE\n```")
            reply = {"role": "assistant", "content": "The limit is applied after the "
                     "filtering, so a large request slips through. I'll bound it at the top "
                     "of each function.\n\n" + "\n\n".join(blocks)}
            commit = f"{self.rng.getrandbits(28):07x}"
            return reply, [{"role": "user", "content": "I committed the changes with git hash "
                            f"{commit} & commit msg: fix: bound batch size in "
                            f"{', '.join(sorted({b.split(chr(10))[0] for b in blocks}))}"}]
        command, log = p.test_log()
        reply = {"role": "assistant", "content": "Please run the test suite so we can check "
                 f"the change:\n\n```bash\n{command}\n```"}
        return reply, [{"role": "user", "content": f"I ran this command:\n\n{command}\n\nAnd "
                        f"got this output:\n\n{_fit(log, room, self.model)}\n"}]

    def wrap_up(self, followup: str) -> tuple[Message, list[Message]]:
        return ({"role": "assistant", "content": self.summary()},
                [{"role": "user", "content": followup}])

    def final(self) -> Message:
        return {"role": "assistant", "content": self.summary() + "\n\n```bash\npython -m "
                "pytest -q tests\n```"}


# --- native tool calling: OpenCode-like, Continue-like, an SDK script ---------------------

class _NativeAgent(_Agent):
    """An agent using the ``tools`` API. Subclasses name their tools and format their
    arguments and results; the loop is shared."""

    id_prefix = "call_"
    parallel = True

    def tools(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def call(self, op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
        """(tool name, arguments) for an operation: read, list, search, edit, exec."""
        raise NotImplementedError

    def result(self, op: str, text: str, **kw: Any) -> str:
        return text

    def assistant(self, content: str | None, calls: list[tuple[str, dict[str, Any]]]
                  ) -> Message:
        return {"role": "assistant", "content": content, "tool_calls": [
            {"id": _call_id(self.rng, self.id_prefix), "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for name, args in calls]}

    def answers(self, reply: Message, texts: list[str]) -> list[Message]:
        return [{"role": "tool", "tool_call_id": call["id"], "content": text}
                for call, text in zip(reply["tool_calls"], texts, strict=True)]

    def preface(self, text: str) -> str | None:
        return text

    def act(self, action: str, room: int) -> tuple[Message, list[Message]]:
        p, m = self.project, self.model
        if action == "big":
            assert self.big is not None
            reply = self.assistant(self.preface("Let me look at the server log first."),
                                   [self.call("exec", command="cat logs/server.log")])
            return reply, self.answers(reply, [self.result("exec", self.big)])
        if action == "explore":
            pattern = p.pattern()
            ops = [("list", {"path": "."}), ("search", {"pattern": pattern})]
            if self.parallel and self.rng.random() < 0.5:
                ops.append(("exec", {"command": "git status --short"}))
            if not self.parallel:
                ops = ops[:1]
            texts = [p.listing(indent=True), p.grep(pattern),
                     " M " + "\n M ".join(sorted({d.split(chr(10))[0][6:] for d in self.diffs})
                                         or ["pyproject.toml"])]
            reply = self.assistant(self.preface("I'll get an overview of the project first."),
                                   [self.call(op, **kw) for op, kw in ops])
            return reply, self.answers(reply, [
                _fit(self.result(op, t, **kw), room // len(ops), m)
                for (op, kw), t in zip(ops, texts, strict=False)])
        if action == "read":
            paths = p.pick(self.rng.choice((2, 3)) if self.parallel else 1)
            reply = self.assistant(self.preface(self.thought(paths[0])),
                                   [self.call("read", path=x) for x in paths])
            return reply, self.answers(reply, [
                _fit(self.result("read", p.files[x], path=x), room // len(paths), m)
                for x in paths])
        if action == "edit":
            path = p.pick_editable()
            old, new, diff = p.edit(path)
            self.diffs.append(diff)
            reply = self.assistant(self.preface(f"I'll add the bound in {path}."),
                                   [self.call("edit", path=path, old=old, new=new, diff=diff)])
            return reply, self.answers(reply, [_fit(self.result("edit", diff, path=path),
                                                    room, m)])
        if self.parallel and self.diffs and self.rng.random() < 0.5:
            command, log = p.test_log()
            ops = [("exec", {"command": command}), ("exec", {"command": "git diff"})]
            texts = [log, p.git_diff(self.diffs[-3:])]
        else:
            command, log = p.test_log()
            ops, texts = [("exec", {"command": command})], [log]
        reply = self.assistant(self.preface("Running the tests."),
                               [self.call(op, **kw) for op, kw in ops])
        return reply, self.answers(reply, [_fit(self.result(op, t, **kw), room // len(ops), m)
                                           for (op, kw), t in zip(ops, texts, strict=True)])

    def user(self, text: str) -> Message:
        return {"role": "user", "content": text}

    def wrap_up(self, followup: str) -> tuple[Message, list[Message]]:
        return {"role": "assistant", "content": self.summary()}, [self.user(followup)]

    def final(self) -> Message:
        return {"role": "assistant", "content": self.summary()}


class _OpenCodeLike(_NativeAgent):
    name = "opencode-like"
    id_prefix = "toolu_"

    def extra(self) -> dict[str, Any]:
        # opencode asks for the model's whole output limit, at most 32k: gpt-4o's is 16,384
        return {"tools": self.tools(), "tool_choice": "auto", "parallel_tool_calls": True,
                "max_tokens": 16_384, "top_p": 1}

    def tools(self) -> list[dict[str, Any]]:
        rng = Random(1)  # tool descriptions do not change between sessions
        return [
            _tool("bash", "Executes a bash command in a persistent shell session with an "
                  "optional timeout." + _usage_notes(rng, 6),
                  {"command": "The command to execute"},
                  {"timeout:number": "Optional timeout in milliseconds (max 600000)",
                   "description": "Clear, concise description of what this command does in "
                                  "5-10 words"}),
            _tool("read", "Reads a file from the local filesystem. Lines are numbered; long "
                  "files may be read in parts with offset and limit." + _usage_notes(rng, 4),
                  {"filePath": "The absolute path to the file to read"},
                  {"offset:number": "The line number to start reading from (0-based)",
                   "limit:number": "The number of lines to read (defaults to 2000)"}),
            _tool("write", "Writes a file to the local filesystem, overwriting it."
                  + _usage_notes(rng, 3),
                  {"filePath": "The absolute path to the file to write",
                   "content": "The content to write to the file"}),
            _tool("edit", "Performs exact string replacements in files." + _usage_notes(rng, 5),
                  {"filePath": "The absolute path to the file to modify",
                   "oldString": "The text to replace", "newString": "The text to replace it "
                                                                    "with"},
                  {"replaceAll:boolean": "Replace all occurrences of oldString"}),
            _tool("glob", "Fast file pattern matching; returns paths sorted by modification "
                  "time.", {"pattern": "The glob pattern to match files against"},
                  {"path": "The directory to search in"}),
            _tool("grep", "Fast content search with regular expressions; returns file paths "
                  "and line numbers of matches." + _usage_notes(rng, 3),
                  {"pattern": "The regex pattern to search for in file contents"},
                  {"path": "The directory to search in", "include": "File pattern to include "
                                                                    "in the search"}),
            _tool("list", "Lists files and directories in a given path, as a tree.",
                  {"path": "The absolute path to the directory to list"},
                  {"ignore:array": "List of glob patterns to ignore"}),
            _tool("patch", "Applies a unified diff patch to files.",
                  {"patchText": "The full patch text"}),
            _tool("todowrite", "Creates and updates the session's structured todo list."
                  + _usage_notes(rng, 4), {"todos:array": "The updated todo list"}),
            _tool("todoread", "Reads the session's todo list.", {}),
            _tool("webfetch", "Fetches content from a URL as text, markdown or html.",
                  {"url": "The URL to fetch content from", "format": "text, markdown or html"},
                  {"timeout:number": "Optional timeout in seconds (max 120)"}),
            _tool("task", "Launches a sub-agent to handle a complex, multi-step task on its "
                  "own." + _usage_notes(rng, 4),
                  {"description": "A short (3-5 words) description of the task",
                   "prompt": "The task for the agent to perform",
                   "subagent_type": "The type of specialized agent to use"}),
        ]

    def call(self, op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
        root = self.project.root
        if op == "read":
            return "read", {"filePath": f"{root}/{kw['path']}"}
        if op == "list":
            return "list", {"path": root}
        if op == "search":
            return "grep", {"pattern": kw["pattern"], "include": "*.{py,ts}"}
        if op == "edit":
            return "edit", {"filePath": f"{root}/{kw['path']}", "oldString": kw["old"],
                            "newString": kw["new"]}
        return "bash", {"command": kw["command"], "description": "Run " + kw["command"][:40]}

    def result(self, op: str, text: str, **kw: Any) -> str:
        if op == "read":
            body = "\n".join(f"{i:05d}| {line}" for i, line in enumerate(text.splitlines(), 1))
            return f"<file>\n{body}\n</file>"
        if op == "edit":
            return "Edit applied successfully."
        return text

    def preface(self, text: str) -> str | None:
        return "" if self.rng.random() < 0.5 else text

    def opening(self) -> list[Message]:
        rng = self.rng
        head = _pad("You are an interactive CLI tool that helps users with software "
                    "engineering tasks. Use the instructions below and the tools available to "
                    "you to assist the user.\n\n# Tone and style\nBe concise, direct, and to "
                    "the point. Answer in fewer than 4 lines unless asked for detail.\n\n"
                    "# Doing tasks\nUse the search tools to understand the codebase, "
                    "implement the solution with the tools available, verify it with the "
                    "project's tests, and run the lint and typecheck commands when they "
                    "exist.\n\n# Tool usage policy\nWhen several independent pieces of "
                    "information are needed, batch your tool calls together in one message "
                    "for optimal performance.\n\n", rng, 2_400, self.model)
        env = (f"Here is some useful information about the environment you are running in:\n"
               f"<env>\n  Working directory: {self.project.root}\n  Is directory a git repo: "
               "yes\n  Platform: linux\n  Today's date: Fri Mar 14 2025\n</env>\n"
               f"<project>\n{self.project.listing()}\n</project>\n\n# AGENTS.md\n"
               + "\n".join(_rules(rng, 12)))
        return [{"role": "system", "content": head}, {"role": "system", "content": env},
                {"role": "user", "content": self.task}]


class _ContinueLike(_NativeAgent):
    name = "continue-like"
    parallel = False

    def extra(self) -> dict[str, Any]:
        return {"tools": self.tools(), "tool_choice": "auto", "max_tokens": 4096,
                "temperature": 0}

    def tools(self) -> list[dict[str, Any]]:
        return [
            _tool("builtin_read_file", "Use this tool if you need to view the contents of an "
                  "existing file.", {"filepath": "The path of the file to read, relative to "
                                                 "the root of the workspace"}),
            _tool("builtin_edit_existing_file", "Use this tool to edit an existing file. If "
                  "you don't know the contents of the file, read it first.",
                  {"filepath": "The path of the file to edit, relative to the workspace root",
                   "changes": "Any modifications to the file, showing only needed changes. "
                              "Use placeholder comments for unchanged code."}),
            _tool("builtin_create_new_file", "Create a new file. Only use this when a file "
                  "doesn't exist and should be created.",
                  {"filepath": "The path where the new file should be created",
                   "contents": "The contents to write to the new file"}),
            _tool("builtin_run_terminal_command", "Run a terminal command in the current "
                  "directory. The shell is not stateful and will not remember any previous "
                  "commands.", {"command": "The command to run"},
                  {"waitForCompletion:boolean": "Whether to wait for the command to finish"}),
            _tool("builtin_file_glob_search", "Search for files in the project by glob.",
                  {"pattern": "Glob pattern for file path matching"}),
            _tool("builtin_grep_search", "Perform a search over the repository using ripgrep.",
                  {"query": "The search query to use. Must be a valid ripgrep regex"}),
            _tool("builtin_ls", "List files and folders in a given directory.",
                  {}, {"dirPath": "The directory path relative to the root",
                       "recursive:boolean": "If true, lists files and folders recursively"}),
            _tool("builtin_view_diff", "View the current diff of working changes.", {}),
            _tool("builtin_read_currently_open_file", "Read the currently open file in the "
                  "IDE.", {}),
            _tool("builtin_view_repo_map", "View the repository map: files and their "
                  "top-level signatures.", {}),
            _tool("builtin_view_subdirectory", "View the contents of a subdirectory.",
                  {"directory_path": "The path of the subdirectory to view"}),
            _tool("builtin_search_web", "Perform a web search and return the top results.",
                  {"query": "The natural language search query"}),
            _tool("builtin_fetch_url_content", "Fetch the content of a URL as text.",
                  {"url": "The URL to read"}),
        ]

    def call(self, op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
        if op == "read":
            return "builtin_read_file", {"filepath": kw["path"]}
        if op == "list":
            return "builtin_ls", {"dirPath": "/", "recursive": True}
        if op == "search":
            return "builtin_grep_search", {"query": kw["pattern"]}
        if op == "edit":
            return "builtin_edit_existing_file", {
                "filepath": kw["path"], "changes": f"// ... existing code ...\n{kw['new']}\n"
                                                   "// ... rest of code ..."}
        return "builtin_run_terminal_command", {"command": kw["command"],
                                                "waitForCompletion": True}

    def result(self, op: str, text: str, **kw: Any) -> str:
        if op == "edit":
            return f"Edit applied to {kw['path']}. The resulting diff:\n{text}"
        return text

    def opening(self) -> list[Message]:
        system = _pad("<important_rules>\n  You are in agent mode.\n\n  Always include the "
                      "language and file name in the info string when you write code blocks. "
                      "If you are editing \"src/main.py\", your code block should start with "
                      "'```python src/main.py'.\n\n  When addressing code modification "
                      "requests, present a concise code snippet that emphasizes only the "
                      "necessary changes and uses abbreviated placeholders for unmodified "
                      "sections.\n</important_rules>\n\n<rules>\n", self.rng, 1_800, self.model)
        system += "</rules>"
        path = self.project.pick(1)[0]
        code = self.project.files[path]
        lang = "python" if path.endswith(".py") else "typescript"
        snippet = "\n".join(code.splitlines()[:60])
        return [{"role": "system", "content": system}, {"role": "user", "content": [
            {"type": "text", "text": f"```{lang} {path}\n{snippet}\n```"},
            {"type": "image_url", "image_url": {"url": png_data_url()}},
            {"type": "text", "text": f"{self.task}\n\nThe screenshot shows the error banner "
                                     "in the dashboard."}]}]

    def user(self, text: str) -> Message:
        return {"role": "user", "content": [{"type": "text", "text": text}]}


class _SdkScript(_NativeAgent):
    """A script looping over ``client.chat.completions.create`` with its own tools, which
    appends ``response.choices[0].message.model_dump(exclude_unset=True)`` to its
    history: its assistant messages carry the fields the API sent, ``refusal`` and
    ``annotations`` included."""

    name = "sdk-script"

    def extra(self) -> dict[str, Any]:
        return {"tools": self.tools(), "tool_choice": "auto", "parallel_tool_calls": True,
                "temperature": 0, "seed": 1234, "user": "nightly-triage",
                "metadata": {"job": "triage", "run_id": f"r-{self.rng.getrandbits(32):08x}"}}

    def tools(self) -> list[dict[str, Any]]:
        return [
            _tool("read_file", "Read a UTF-8 text file of the repository.",
                  {"path": "Path relative to the repository root"}),
            _tool("write_file", "Create or overwrite a file with the given content.",
                  {"path": "Path relative to the repository root", "content": "Full content"}),
            _tool("apply_diff", "Apply a unified diff to one file.",
                  {"path": "The file the diff applies to", "diff": "A unified diff"}),
            _tool("list_files", "List the repository's files under a directory.",
                  {"path": "Directory relative to the root"},
                  {"recursive:boolean": "Descend into subdirectories"}),
            _tool("search_files", "Find lines matching a regular expression.",
                  {"pattern": "A Python regular expression"},
                  {"path": "Directory to search"}),
            _tool("execute_command", "Run a shell command and return its output.",
                  {"command": "The command line"},
                  {"timeout:integer": "Seconds before the command is killed"}),
            _tool("run_tests", "Run the test suite, or some tests, with pytest.", {},
                  {"selector": "A pytest node id or -k expression"}),
            _tool("git_log", "Show the last commits.", {}, {"n:integer": "How many"}),
            _tool("open_issue", "Open an issue in the tracker.",
                  {"title": "Issue title", "body": "Markdown body"}),
            _tool("fetch_url", "Fetch a web page as text.", {"url": "The URL"}),
        ]

    def call(self, op: str, **kw: Any) -> tuple[str, dict[str, Any]]:
        if op == "read":
            return "read_file", {"path": kw["path"]}
        if op == "list":
            return "list_files", {"path": ".", "recursive": True}
        if op == "search":
            return "search_files", {"pattern": kw["pattern"], "path": "src"}
        if op == "edit":
            return "apply_diff", {"path": kw["path"], "diff": kw["diff"]}
        return "execute_command", {"command": kw["command"], "timeout": 120}

    def result(self, op: str, text: str, **kw: Any) -> str:
        if op == "edit":
            return json.dumps({"ok": True, "path": kw["path"], "hunks": text.count("\n@@")})
        if op == "exec":
            return json.dumps({"exit_code": 1 if "FAILED" in text else 0, "stdout": text,
                               "stderr": ""})
        return text

    def assistant(self, content: str | None, calls: list[tuple[str, dict[str, Any]]]
                  ) -> Message:
        msg = super().assistant(None, calls)
        return {"content": None, "refusal": None, "role": "assistant", "annotations": [],
                "tool_calls": msg["tool_calls"]}

    def wrap_up(self, followup: str) -> tuple[Message, list[Message]]:
        reply, _ = super().wrap_up(followup)
        return ({**reply, "refusal": None, "annotations": []},
                [{"role": "user", "name": "ci-bot", "content": followup}])

    def final(self) -> Message:
        return {**super().final(), "refusal": None, "annotations": []}

    def opening(self) -> list[Message]:
        system = _pad("You are a triage bot for the repository checked out in the working "
                      "directory. Use the tools to investigate failures, fix them with "
                      "minimal diffs, and report what you changed. Never push.\n\nRules:\n",
                      self.rng, 900, self.model)
        return [{"role": "system", "content": system},
                {"role": "user", "name": "ci-bot", "content": self.task}]


_AGENTS: dict[str, type[_Agent]] = {a.name: a for a in (
    _ClineLike, _AiderLike, _OpenCodeLike, _ContinueLike, _SdkScript)}


def generate(kind: str, *, seed: int = 0, target_tokens: int = 30_000, model: str = "gpt-4o",
             stream: bool = False, big_tool_result_bytes: int | None = None) -> AgentSession:
    """One session of ``kind`` (see ``KINDS``) whose last request is about
    ``target_tokens`` long.

    With ``big_tool_result_bytes``, the first tool result (for Aider-like, the first user
    message with command output) is a log of exactly that many bytes, resent on every later
    step; it is left out of the size budget, so the rest of the session still grows to
    ``target_tokens``.
    """
    if kind not in _AGENTS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    rng = Random(f"{kind}:{seed}")
    agent = _AGENTS[kind](rng, model, stream, target_tokens)
    if big_tool_result_bytes:
        agent.big = agent.project.big_log(big_tool_result_bytes)
    b = _Builder(agent.base(), agent.opening(), model, target_tokens)
    user_turns = rng.choice((2, 3))
    turn, acts_in_turn, action = 1, 0, ""
    actions = agent.actions()
    if agent.big is not None:
        reply, new = agent.act("big", b.room())
        b.step(reply, new, oversized=True)
    while b.tokens < target_tokens * 0.95 and len(b.steps) < 400:
        # Past this turn's share of the budget the agent heads for a green test run, and
        # reports back there; the user then follows up with the next request.
        due = turn < user_turns and b.tokens >= target_tokens * turn / user_turns
        if due and (action == "test" and agent.passing() or acts_in_turn >= 10):
            reply, new = agent.wrap_up(next(agent.followups))
            turn, acts_in_turn, action = turn + 1, 0, ""
            b.step(reply, new)
            continue
        room = b.room() - 250
        if room < 150:
            break
        action = ("test" if action == "edit" else "edit") if due else next(actions)
        reply, new = agent.act(action, room)
        b.step(reply, new)
        acts_in_turn += 1
    return AgentSession(name=kind, steps=b.finish(agent.final()))


def all_sessions(seed: int = 0, target_tokens: int = 30_000,
                 model: str = "gpt-4o") -> list[AgentSession]:
    """One session of each kind."""
    return [generate(k, seed=seed, target_tokens=target_tokens, model=model) for k in KINDS]


# --- the scripted upstream ---------------------------------------------------------------

class ScriptedUpstream:
    """An OpenAI-compatible Starlette app answering each chat request with the next
    scripted reply: a ``chat.completion`` JSON, or SSE chunks when the request has
    ``stream: true`` (content and ``tool_calls`` deltas, then a usage chunk when
    ``stream_options.include_usage``). Every request body and its headers are recorded,
    failed ones included. Also serves ``GET /v1/models``.

    With ``responder`` set, each reply is ``responder(request_body)`` instead of the next
    scripted one: a real agent CLI decides on its own when to send a side request (a
    title, a summary), so a reply fixed by position would answer the wrong request.

    Usage figures are estimates (four bytes a token); requests beyond the script get a 500
    error saying so.
    """

    def __init__(self, replies: list[dict[str, Any]] | None = None,
                 model: str = "gpt-4o",
                 responder: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.model = model
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._replies: list[dict[str, Any]] = list(replies or [])
        self._failures: list[tuple[int, dict[str, Any]]] = []
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ])

    @classmethod
    def for_session(cls, session: AgentSession) -> ScriptedUpstream:
        """An upstream scripted with the session's replies, in order."""
        return cls([s.reply for s in session.steps])

    def script(self, replies: list[dict[str, Any]]) -> None:
        """Replace the replies still to be given."""
        self._replies = list(replies)

    def fail_next_with(self, status: int, body: dict[str, Any] | None = None) -> None:
        """Answer the next request with this error instead of a reply (the reply stays
        queued, as for a client that retries)."""
        self._failures.append((status, body or {"error": {"message": "scripted failure",
                                                          "type": "server_error"}}))

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 1700000000,
             "owned_by": "scripted"}]})

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self._failures:
            status, error = self._failures.pop(0)
            return JSONResponse(error, status_code=status)
        if self.responder is not None:
            self._replies.insert(0, self.responder(body))
        if not self._replies:
            return JSONResponse({"error": {"message": "ScriptedUpstream has no scripted "
                                           "reply left", "type": "server_error"}},
                                status_code=500)
        reply = {"role": "assistant", "content": None, **self._replies.pop(0)}
        n = len(self.requests)
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        prompt = len(json.dumps(body.get("messages", []))) // 4
        completion = max(1, len(json.dumps(reply)) // 4)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
        head = {"id": f"chatcmpl-scripted{n}", "created": 1700000000 + n,
                "model": body.get("model", self.model), "system_fingerprint": "fp_scripted"}
        if not body.get("stream"):
            return JSONResponse({**head, "object": "chat.completion", "choices": [
                {"index": 0, "message": reply, "logprobs": None, "finish_reason": finish}],
                "usage": usage})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(_sse(head, reply, finish, usage if include_usage else None),
                                 media_type="text/event-stream")


async def _sse(head: dict[str, Any], reply: dict[str, Any], finish: str,
               usage: dict[str, Any] | None) -> AsyncIterator[bytes]:
    def event(delta: dict[str, Any], reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = {**head, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}
        if usage is not None:
            chunk["usage"] = None
        return f"data: {json.dumps(chunk)}\n\n".encode()

    yield event({"role": "assistant", "content": "", "refusal": None})
    content = reply.get("content") or ""
    for i in range(0, len(content), 48):
        yield event({"content": content[i:i + 48]})
    for index, call in enumerate(reply.get("tool_calls") or []):
        yield event({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        args = call["function"]["arguments"]
        for i in range(0, len(args), 64):
            yield event({"tool_calls": [{"index": index,
                                         "function": {"arguments": args[i:i + 64]}}]})
    yield event({}, finish)
    if usage is not None:
        last = {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        yield f"data: {json.dumps(last)}\n\n".encode()
    yield b"data: [DONE]\n\n"
