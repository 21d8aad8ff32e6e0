"""Record multi-turn Claude Code and Codex sessions through memd, for the replays of the
prompt-cache tests and the door benchmark.

    PYTHONPATH=.:tests .venv/bin/python -m agents.record_doors tests/fixtures/doors

Each client (from ``~/.cache/memd/agents``) runs headless three times in one project
directory, the later runs continuing the conversation (``claude -p --continue``, ``codex
exec resume --last``) so each resends it: three user turns, each with a tool step reading
``notes.txt``, the model's signed thinking (Claude) or encrypted reasoning (Codex) sent
back every time. The clients talk to a recording proxy in front of memd (fake embedder,
in-process), which forwards to the scripted models :class:`agents.doors.ClaudeSession`
and :class:`agents.doors.CodexSession`. Every request a client sent is written, as sent,
to ``claude-code.jsonl`` or ``codex.jsonl`` in the given folder
(:func:`agents.traffic.corpus_line`: no credentials, the project directory as
``/home/dev/project``, the client's home as ``/home/dev/home``).
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from servers import serve
from starlette.applications import Starlette
from starlette.routing import Route

import memd
from agents.clients import Client, run
from agents.doors import CLAUDE, CODEX, ClaudeSession, CodexSession
from agents.install import ensure_installed
from agents.traffic import RecordingProxy, corpus_line
from memd.config import load_settings
from memd.server.app import create_app

TURNS = (
    "Remember: the staging host is staging.rocket.internal. Read notes.txt and tell me "
    "what it says.",
    "Read notes.txt again and tell me whether it mentions pytest.",
    "What is the staging host again? Check notes.txt too.",
)
FILES = {"claude": "claude-code.jsonl", "codex": "codex.jsonl"}


def continuing(client: Client) -> Client:
    """``client`` continuing the project's newest conversation instead of starting one."""
    def command(bin: Path, home: Path, base: str, prompt: str
                ) -> tuple[list[str], dict[str, str]]:
        argv, env = client.command(bin, home, base, prompt)
        if client is CODEX:  # codex exec [options] resume --last PROMPT
            return [*argv[:-1], "resume", "--last", argv[-1]], env
        return [*argv, "--continue"], env

    return replace(client, command=command)


def main(folder: Path) -> int:
    bin = ensure_installed()
    claude, codex = ClaudeSession(), CodexSession()
    models = Starlette(routes=[Route("/v1/messages", claude.messages, methods=["POST"]),
                               Route("/v1/responses", codex.handle, methods=["POST"])])
    with tempfile.TemporaryDirectory(prefix="memd-record-") as tmp, serve(models) as up:
        root = Path(tmp)
        settings = replace(load_settings(data_dir=root / "memd"), embedder="fake",
                           upstream_url=f"{up}/v1", upstream_anthropic_url=up)
        with memd.open(settings=settings) as engine, \
                serve(create_app(engine, settings)) as base:
            proxy = RecordingProxy(base)
            with serve(proxy.app) as front:
                for client in (CLAUDE, CODEX):
                    work = root / client.name / "project"
                    work.mkdir(parents=True)
                    notes = work / "notes.txt"
                    notes.write_text("The build uses make; tests run with pytest.\n")
                    claude.workfile = codex.workfile = str(notes)
                    for n, prompt in enumerate(TURNS, 1):
                        proxy.client, proxy.run = client.name, n
                        done = run(client if n == 1 else continuing(client), bin,
                                   root / client.name / "home", work, front, prompt)
                        print(f"{client.name} turn {n}: exit {done.returncode}: "
                              f"{done.stdout.strip()[-200:]}", file=sys.stderr)
                        if done.returncode != 0:
                            print(done.stderr[-2000:], file=sys.stderr)
                            return 1
                        engine.run_jobs()
        folder.mkdir(parents=True, exist_ok=True)
        for name, file in FILES.items():
            lines = [corpus_line(x, root / name, "/home/dev") for x in proxy.exchanges
                     if x.method == "POST" and x.client == name
                     and x.path.endswith(("/v1/messages", "/v1/responses"))]
            (folder / file).write_text("\n".join(lines) + "\n", "utf-8")
            print(f"{len(lines)} requests -> {folder / file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
