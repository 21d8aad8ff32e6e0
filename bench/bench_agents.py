"""Memory precision on real agent traffic: the recorded corpus of tests/fixtures/agents
replayed through the engine as the proxy would, and what memd learnt from it.

    .venv/bin/python -m bench.bench_agents --out bench/figures/agents.json
    .venv/bin/python -m bench.bench_agents --quick      # the same: the corpus is small

The corpus (its README) holds every request four agent CLIs (opencode, qwen-code, cline,
continue) sent during two runs each: run 1 states a fact in the user's words and makes a
tool call, run 2 is a new conversation asking for the fact back. Each request, in the
order it was recorded, into one fresh store (one user, as the recording had):

- the proxy's side detection (:func:`memd.engine.conversation.side.side_reason`, with the
  record's User-Agent and the engine's recent turns) decides whether it is a side request; one is
  prepared as the proxy does (:func:`memd.engine.conversation.chat.prepare_side`), anything
  else as a turn (:func:`memd.engine.conversation.chat.prepare_chat`, the User-Agent as ``client``);
- the call is finished with the assistant message the client sent back in its next
  request of the same run, or a scripted reply where there is none;
- after each run the background jobs (embeddings, extraction) run to the end, as the
  daemon's worker would before the next conversation.

Figures:

- **junk rate**: memories (active or not) and facts whose words are not grounded in a
  prompt the user typed (:data:`TYPED`; :func:`bench.bench_precision.grounded`), over
  all of them;
- **sessions** against **conversations** (client and run): one session each, and a
  conversation whose turns went to more than one session;
- **side sessions**: sessions that appeared while a recorded side request was handled
  (0: a side request creates none), and recorded side requests the proxy would have
  taken for turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memd
from bench.bench_precision import grounded
from bench.output import emit
from memd.engine.conversation.chat import finish_chat, prepare_chat, prepare_side
from memd.engine.conversation.identity import client_family
from memd.engine.conversation.side import HEADER, side_reason
from memd.types import MemoryFilter

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "agents"
USER = "corpus-user"
#: What the user typed, run 1 then run 2 (the corpus README; tests/test_real_agents.py).
TYPED = ("Remember: the staging host is staging.rocket.internal. Read notes.txt and tell "
         "me what it says.", "What is the staging host again?")
SCRIPTED = {"role": "assistant", "content": "Done."}


@dataclass(frozen=True)
class Record:
    """One recorded request: which client and run sent it, its headers and body."""

    client: str
    run: int
    side: bool
    headers: Mapping[str, str]
    body: Mapping[str, Any]

    @property
    def messages(self) -> list[Any]:
        return list(self.body.get("messages") or [])


def load(folder: Path = CORPUS) -> list[Record]:
    """Every chat request of the corpus, one file after the other, each in recorded order."""
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            if r["path"].endswith("/chat/completions"):
                out.append(Record(r["client"], r["run"], r["side"],
                                  {k.lower(): v for k, v in r["headers"].items()}, r["body"]))
    return out


def reply_to(records: Sequence[Record], i: int) -> dict[str, Any]:
    """The assistant message that answered turn ``i``: the one its client's next turn of
    the same run sends back after the messages of turn ``i``; else :data:`SCRIPTED`."""
    this = records[i]
    sent = len(this.messages)
    for later in records[i + 1:]:
        if (later.client, later.run) != (this.client, this.run) or later.side:
            continue
        after = later.messages[sent:sent + 1]
        if after and after[0].get("role") == "assistant":
            return dict(after[0])
        break
    return dict(SCRIPTED)


@dataclass
class Replay:
    """What the replay saw: sessions per conversation, and what side requests did."""

    sessions: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    side_requests: int = 0
    side_sessions: int = 0  # sessions that appeared while a side request was handled
    side_as_turns: int = 0  # recorded side requests the proxy took for turns


def replay(engine: memd.Memd, records: Sequence[Record]) -> Replay:
    """Each record through the engine as the proxy handles it (module docstring)."""
    seen = Replay()
    for i, r in enumerate(records):
        agent = r.headers.get("user-agent")
        reason = side_reason(r.body, r.headers.get(HEADER), user_id=USER,
                             client=client_family(agent) or "", recent=engine.recent_turns,
                             now=engine.now())
        before = len(engine.store.list_sessions(USER, limit=10_000))
        if reason is not None:
            call = prepare_side(engine, USER, None, r.body.get("model"), r.messages, reason)
        else:
            call = prepare_chat(engine, USER, None, r.messages, model=r.body.get("model"),
                                tools=r.body.get("tools"), client=agent)
            seen.sessions.setdefault((r.client, r.run), set()).add(call.session.id
                                                                   if call.session else "")
        finish_chat(engine, call, status=200, reply=reply_to(records, i),
                    finish_reason="stop", usage=None, model=r.body.get("model"))
        if r.side:
            seen.side_requests += 1
            seen.side_as_turns += reason is None
            seen.side_sessions += len(engine.store.list_sessions(USER, limit=10_000)) - before
        last = i + 1 == len(records) or (records[i + 1].client, records[i + 1].run) != (
            r.client, r.run)
        if last:  # the conversation is over: the worker catches up before the next one
            while engine.run_jobs():
                pass
    return seen


def learnt(engine: memd.Memd) -> Iterator[str]:
    """Everything memd learnt: each memory's text, and each fact as "key value"."""
    for m in engine.store.list_memories(USER, MemoryFilter(include_inactive=True),
                                        limit=100_000):
        yield m.text
    for f in engine.store.get_facts(USER):
        yield f"{f.key.replace('_', ' ')} {f.value}"


def figures(engine: memd.Memd, seen: Replay) -> dict[str, Any]:
    """The figures of the module docstring, with every item not grounded listed."""
    items = list(learnt(engine))
    junk = [t for t in items if not any(grounded(t, typed) for typed in TYPED)]
    split = sorted(f"{c} run {n}: {len(s)}" for (c, n), s in seen.sessions.items()
                   if len(s) != 1)
    return {
        "junk_rate": round(len(junk) / max(len(items), 1), 4),
        "learnt": len(items),
        "junk": junk,
        "learnt_items": items,
        "conversations": len(seen.sessions),
        "sessions": len(engine.store.list_sessions(USER, limit=10_000)),
        "split_conversations": split,
        "side_requests": seen.side_requests,
        "side_sessions": seen.side_sessions,
        "side_as_turns": seen.side_as_turns,
    }


def run(folder: Path = CORPUS) -> dict[str, Any]:
    """Replay the corpus in ``folder`` into a fresh store with the fake embedder (the
    figures do not depend on the vectors); its figures."""
    records = load(folder)
    with tempfile.TemporaryDirectory(prefix="memd-agents-") as tmp:
        engine = memd.open(Path(tmp), embedder="fake")
        try:
            seen = replay(engine, records)
            return {"requests": len(records), **figures(engine, seen)}
        finally:
            engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="folder of .jsonl records")
    ap.add_argument("--quick", action="store_true",
                    help="accepted for bench.run_all: the corpus is replayed whole anyway")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    out = run(args.corpus)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
