"""A helper model for tests: it answers each kind of ask (told apart by the property its
JSON schema asks for: "detailed", "title", "summary", "pattern", "facts") from a
script, and keeps the prompts of the asks it was scripted for. An ask of a context
object's summaries ("detailed") is answered with its scripted object whole."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from memd.models.helper import ChatMessage

# What an ask the script does not name is answered: nothing found, a title of nothing.
UNSCRIPTED: dict[str, Any] = {"detailed": "", "facts": [], "title": "?", "summary": "",
                              "pattern": ""}


class ScriptedHelper:
    """``script`` maps an ask's property to its answer's value (an exception is raised
    instead); ``asked[property]`` lists the prompts of the scripted asks, in order."""

    name = "scripted"
    model = "scripted"
    context_length = 2048

    def __init__(self, **script: Any) -> None:
        self.script = script
        self.asked: dict[str, list[str]] = {k: [] for k in script}

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        props = (json_schema or {}).get("properties", {})
        kind = next((k for k in UNSCRIPTED if k in props), "facts")
        if kind not in self.script:
            return json.dumps({kind: UNSCRIPTED[kind]})
        self.asked[kind].append("\n".join(m["content"] for m in messages))
        answer = self.script[kind]
        if isinstance(answer, Exception):
            raise answer
        if kind == "detailed" and isinstance(answer, dict):
            return json.dumps(answer)
        return json.dumps({kind: answer})

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        yield self.complete(messages, max_tokens=max_tokens, temperature=temperature)

    def count_tokens(self, text: str) -> int:
        return len(text.split())
