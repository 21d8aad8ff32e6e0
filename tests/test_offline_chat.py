"""`memd serve --upstream-url local`: chat with no model server at all, the bundled
llama.cpp model answering through the proxy, driven by the openai SDK as a client would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from servers import free_port, wait_healthy

import memd

pytestmark = [pytest.mark.slow, pytest.mark.real_model]


def test_offline_chat_streams_an_answer_and_remembers_the_turn(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "MEMD_DATA_DIR": str(data), "MEMD_EMBEDDER": "fake"}
    env.pop("MEMD_UPSTREAM_URL", None)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "memd.cli", "serve", "--port", str(port),
                             "--upstream-url", "local"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_healthy(port, proc)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        models = [m.id for m in client.models.list()]
        assert models, "the local model is listed"
        stream = client.chat.completions.create(
            model=models[0], stream=True, max_tokens=16,
            messages=[{"role": "user", "content": "Say hello to the lighthouse keeper."}])
        pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
        answer = "".join(pieces)
        assert answer.strip(), pieces
        assert len([p for p in pieces if p]) > 1  # streamed, not one block
        plain = client.chat.completions.create(
            model=models[0], max_tokens=8,
            messages=[{"role": "user", "content": "Name one colour."}])
        assert (plain.choices[0].message.content or "").strip()
        assert plain.usage is not None and plain.usage.completion_tokens > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with memd.open(data, embedder="fake") as engine:
        sessions = engine.store.list_sessions("local")
        stored = [m for s in sessions for m in engine.messages(s.id, "local")]
    texts = [(m.role, m.content) for m in stored]
    assert ("user", "Say hello to the lighthouse keeper.") in texts
    assert ("assistant", answer) in texts  # the streamed answer, as the client got it
