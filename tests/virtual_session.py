"""A replayed agent session for context virtualization: a coding agent's long, read-heavy
conversation, generated deterministically.

``agent_session()`` returns the whole history a client would end with (system prompt,
user turns, the assistant's tool calls, the tools' results, its answers), and the
positions where the client asks the model: before each assistant message, the client
sends everything up to it. The tool results are files read (some read again later, after
an edit) and command outputs (test runs with tracebacks, searches, listings); the user
turns include corrections that name exact identifiers (ports, paths, keys) a later turn
relies on. Run as a script, it prints the session's size.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

SYSTEM = (
    "You are a coding agent working in the repository /srv/billing. You can read files, "
    "run shell commands and search the code. Think step by step, read before you edit, "
    "run the tests after each change, and keep answers short. Follow the user's "
    "instructions exactly; when the user corrects you, the correction wins over anything "
    "said before. Never invent file contents: read them.\n"
    + "\n".join(f"- Rule {k}: {rule}" for k, rule in enumerate((
        "prefer small, reviewable changes", "keep the public API stable",
        "write tests for every bug fixed", "do not touch generated files under gen/",
        "use the project's logging helpers, not print", "explain risky changes first",
    ), start=1))
)
TOOLS = [
    {"type": "function", "function": {
        "name": "read", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the repository.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "grep", "description": "Search the repository for a pattern.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"]}}},
]
TASKS = [
    "Find out why invoices for annual plans are billed twice and fix it.",
    "Add a retry with backoff to the payment gateway client.",
    "Correction: the gateway listens on port 8443, not 8080. Use GATEWAY_PORT=8443 "
    "everywhere and keep the config key `gateway.listen_port`.",
    "Now make the proration tests pass.",
    "Correction: do not rename `InvoiceLine.amount_cents`; other services read that "
    "field. Revert that part and keep the old name.",
    "Look at the webhook handler and make it idempotent.",
    "Correction: the error code for a duplicate webhook must be E4091, not E409. Tests "
    "expect E4091.",
    "Clean up the currency rounding in billing/money.py.",
    "Correction: round half to even (banker's rounding), not half up, in "
    "billing/money.py::round_cents.",
    "Run the whole test suite and summarize what still fails.",
]
MODULES = ["billing/invoice.py", "billing/plans.py", "billing/gateway.py",
           "billing/money.py", "billing/webhooks.py", "billing/proration.py",
           "billing/tax.py", "billing/customers.py", "billing/config.py",
           "billing/retry.py", "billing/events.py", "billing/reports.py",
           "tests/test_invoice.py", "tests/test_gateway.py", "tests/test_proration.py",
           "tests/test_webhooks.py", "tests/test_money.py", "tests/test_tax.py"]
WORDS = ("amount total invoice plan customer period cents currency tax line item "
         "discount credit refund webhook event gateway retry status due paid").split()


@dataclass
class AgentSession:
    """The whole history (``messages``, the system prompt first), the tool definitions,
    the positions of the assistant messages (the client calls the model with everything
    before each), and the user turns that correct an earlier instruction."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    calls: list[int] = field(default_factory=list)
    corrections: list[str] = field(default_factory=list)

    @property
    def tool_calls(self) -> int:
        return sum(len(m.get("tool_calls") or ()) for m in self.messages)

    def tool_tokens(self) -> int:
        from memd.models.tokens import count_text

        return sum(count_text(m["content"]) for m in self.messages if m["role"] == "tool")


def whole_or_admitted(got: str, mine: str) -> bool:
    """Whether a newest tool result arrived whole, or as the excerpt memd admits a big
    one at: its header naming the object, then lines of the original, verbatim."""
    if got == mine:
        return True
    header, *lines = got.splitlines()
    originals = set(mine.splitlines())
    return header.startswith("[memd: extractive excerpt of the output of") and all(
        line in originals or line.startswith("[... ") or line.endswith(" [...]")
        for line in lines)


def _source(rng: random.Random, path: str, version: int) -> str:
    """A Python module of 60 to 140 lines, with names and constants a reader may need."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    lines = [f'"""{stem}: part of the billing service (revision {version})."""', "",
             "from __future__ import annotations", "", "import logging",
             "from decimal import Decimal", "", "log = logging.getLogger(__name__)", ""]
    for k in range(rng.randint(6, 12)):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{k}"
        lines += [f"def {name}(record: dict, *, strict: bool = False) -> Decimal:",
                  f'    """Compute the {rng.choice(WORDS)} of a {rng.choice(WORDS)} record."""']
        for _ in range(rng.randint(5, 10)):
            a, b = rng.choice(WORDS), rng.choice(WORDS)
            lines.append(f"    {a}_{b} = Decimal(record.get('{a}', 0)) * {rng.randint(2, 99)}")
        lines += [f"    if strict and {a}_{b} < 0:",
                  f"        raise ValueError('E{rng.randint(4000, 4999)}: negative {a}')",
                  f"    log.debug('{name} done for %s', record.get('id'))",
                  f"    return {a}_{b}", ""]
    return "\n".join(lines)


def _test_run(rng: random.Random, target: str, failing: int) -> str:
    out = [f"$ python -m pytest {target} -q", "." * rng.randint(20, 60)]
    for k in range(failing):
        fn = f"test_{rng.choice(WORDS)}_{rng.choice(WORDS)}_{k}"
        out += [f"_____ {fn} _____", "Traceback (most recent call last):",
                f'  File "/srv/billing/{rng.choice(MODULES)}", line {rng.randint(10, 140)}, '
                f"in {fn}",
                f"    assert invoice.total_cents == {rng.randint(1000, 99999)}",
                f"AssertionError: expected {rng.randint(1000, 99999)}, got "
                f"{rng.randint(1000, 99999)}"]
        out += [f"    {rng.choice(WORDS)} = {rng.randint(0, 9999)}"
                for _ in range(rng.randint(8, 20))]
    out.append(f"FAILED {failing} tests, passed {rng.randint(40, 200)} in "
               f"{rng.randint(1, 9)}.{rng.randint(10, 99)}s")
    return "\n".join(out)


def _grep(rng: random.Random, pattern: str) -> str:
    return "\n".join(f"{rng.choice(MODULES)}:{rng.randint(1, 140)}:    {pattern}"
                     f"({rng.choice(WORDS)}_{rng.choice(WORDS)})"
                     for _ in range(rng.randint(30, 70)))


def agent_session(seed: int = 35, turns: int = len(TASKS), calls_per_turn: int = 16,
                  ) -> AgentSession:
    """The replayed session: ``turns`` user turns (corrections among them), each worked
    through with about ``calls_per_turn`` tool calls, one to three at a time."""
    rng = random.Random(seed)
    session = AgentSession([{"role": "system", "content": SYSTEM}], TOOLS)
    messages = session.messages
    versions: dict[str, int] = {}
    n = 0
    for turn in range(turns):
        task = TASKS[turn % len(TASKS)]
        messages.append({"role": "user", "content": task})
        if task.startswith("Correction:"):
            session.corrections.append(task)
        done = 0
        while done < calls_per_turn:
            batch = min(rng.choice((1, 1, 2, 3)), calls_per_turn - done)
            calls, results = [], []
            for _ in range(batch):
                n += 1
                call_id = f"call_{n:04d}"
                pick = rng.random()
                if pick < 0.55:
                    path = rng.choice(MODULES)
                    versions[path] = versions.get(path, 0) + (rng.random() < 0.3)
                    name, args = "read", {"path": path}
                    text = _source(random.Random(f"{path}-{versions[path]}"), path,
                                   versions[path])
                elif pick < 0.8:
                    target = rng.choice(MODULES[12:])
                    name, args = "bash", {"command": f"python -m pytest {target} -q"}
                    text = _test_run(rng, target, rng.randint(1, 4))
                else:
                    pattern = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}"
                    name, args = "grep", {"pattern": pattern}
                    text = _grep(rng, pattern)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args)}})
                results.append({"role": "tool", "tool_call_id": call_id, "content": text})
            session.calls.append(len(messages))
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages.extend(results)
            done += batch
        session.calls.append(len(messages))
        messages.append({"role": "assistant",
                         "content": f"Done with step {turn + 1}: {task[:60]}"})
    return session


if __name__ == "__main__":
    s = agent_session()
    print(f"{len(s.messages)} messages, {s.tool_calls} tool calls, {len(s.calls)} model "
          f"calls, {s.tool_tokens()} tokens of tool output, {len(s.corrections)} corrections")
