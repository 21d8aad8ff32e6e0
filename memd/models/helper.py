"""The helper model: a small LLM memd asks for summaries, fact extraction and session
titles, and that can answer chat itself when no model server is configured
(``memd.server.local_upstream``).

Backends implement :class:`HelperModel` and register under the ``memd.helpers`` entry
point group, as an external backend would: ``llama`` runs a GGUF model in process with
llama.cpp (``memd.models.llama_helper``), ``openai`` asks any OpenAI-compatible server
(``memd.models.openai_helper``). Both are blocking: async callers run them in a thread.

Every failure at a backend's edge (a missing package or file, a model that does not load,
an HTTP error, a timeout, output that is not what was asked for) is a
:class:`memd.errors.ModelError` whose message says what to do about it; a prompt longer
than the model's context is the subclass :class:`PromptTooLong`, so that a caller can
retry with less.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memd import registry
from memd.errors import ModelError

if TYPE_CHECKING:
    from memd.config import Settings

#: The longest ``maxLength`` of a string that a JSON schema asked of a helper should hold:
#: llama.cpp's grammar compiler nests one rule per character and rejects longer ones.
MAX_SCHEMA_STRING = 1000
GROUP = "memd.helpers"
INSTALL_HINT = ("install the helper extra: ./install.sh --helper, or pip install "
                "'memd[helper]'")

ChatMessage = Mapping[str, str]
"""One chat message as helpers take it: ``role`` (system, user or assistant) and
``content``, plain text."""


class PromptTooLong(ModelError):
    """The prompt and the room asked for the answer do not fit the model's context."""

    type = "context_length_exceeded"


class HelperModel(Protocol):
    """A chat model memd can ask for short, possibly JSON-constrained, answers."""

    name: str
    """The backend, as registered in ``memd.helpers`` ("llama", "openai")."""
    model: str
    """The model the backend runs, as ``/v1/models`` lists it."""

    @property
    def context_length(self) -> int | None:
        """The most tokens a prompt and its answer may hold together; None if unknown."""
        ...

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int,
                 temperature: float = 0.0,
                 json_schema: Mapping[str, Any] | None = None) -> str:
        """The model's answer to ``messages``, at most ``max_tokens`` tokens. With
        ``json_schema``, the answer is a JSON document of that schema (raises ModelError
        when the model produced anything else, such as JSON cut at ``max_tokens``)."""
        ...

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int,
               temperature: float = 0.0) -> Generator[str, None, None]:
        """The answer as pieces of text, each yielded as soon as the model produced it.
        Closing the generator early stops the model and frees it for the next caller."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` costs this model: exact where the backend has the model's
        tokenizer, memd's estimate otherwise."""
        ...


def load_helper(name: str, **options: Any) -> HelperModel:
    """The helper backend registered as ``name`` in ``memd.helpers``, constructed with
    ``options`` (nothing is loaded until the first call)."""
    helper: HelperModel = registry.load(GROUP, name)(**options)
    return helper


def llama_helper(settings: Settings) -> HelperModel:
    """The llama.cpp helper on the configured GGUF file (``helper_model_path``; the
    bundled SmolLM2 when unset), constructed: nothing is loaded until its first call."""
    if settings.helper_model_path is None:
        return load_helper("llama")
    return load_helper("llama", model_path=settings.helper_model_path)


def parse_json_answer(text: str, who: str) -> Any:
    """``text`` parsed as the JSON a schema-constrained call asked ``who`` for."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ModelError(
            f"{who} answered something that is not JSON ({exc}): {text[:200]!r}; "
            "a JSON answer cut short needs a larger max_tokens") from exc
