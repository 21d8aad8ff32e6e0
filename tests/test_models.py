"""Embedder caches and offline token counting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memd.backends.sqlite import SQLiteStore
from memd.models.embedder import CachedEmbedder, FakeEmbedder
from memd.models.tokens import (
    MESSAGE_OVERHEAD,
    SAFETY_MARGIN,
    ByteEstimateCounter,
    count_lines,
    count_text,
    counter_for,
    message_tokens,
)


def test_fake_embedder_is_deterministic_and_normalized() -> None:
    e = FakeEmbedder()
    a, b, c = e.embed(["deploy with kubernetes", "deploy with kubernetes", "bake bread"])
    assert np.array_equal(a, b) and abs(float(np.linalg.norm(a)) - 1) < 1e-6
    assert float(a @ c) < float(a @ b)


def test_a_text_is_never_embedded_twice(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    first = CachedEmbedder(FakeEmbedder(), store)
    v1 = first.embed(["alpha", "beta", "alpha"])
    assert first.calls == 2  # the duplicate in the batch is embedded once
    first.embed(["beta", "gamma"])
    assert first.calls == 3
    store.close()
    again = CachedEmbedder(FakeEmbedder(), SQLiteStore(tmp_path / "e.db"))
    v2 = again.embed(["alpha", "beta"])  # persisted across a restart
    assert again.calls == 0 and np.allclose(v1[:2], v2)


def test_query_lru() -> None:
    e = CachedEmbedder(FakeEmbedder(), None, query_cache_size=2)
    e.embed_query("q1")
    e.embed_query("q1")
    assert e.calls == 1
    e.embed_query("q2")
    e.embed_query("q3")  # evicts q1
    e.embed_query("q1")
    assert e.calls == 4


def test_exact_count_for_cl100k_models() -> None:
    assert counter_for("gpt-4").name == "cl100k"
    assert count_text("hello world", "gpt-4") == 2
    assert count_text("", "gpt-4") == 0
    # a special token's text in a message is counted as the text it is, not as one token
    assert count_text("<|endoftext|>", "gpt-4") == 7


def test_estimate_for_other_models_is_larger() -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 20
    exact = count_text(text, "gpt-4")
    estimate = count_text(text, "llama-3.1-8b-instruct")
    assert estimate == pytest.approx(exact * SAFETY_MARGIN, abs=1)
    assert ByteEstimateCounter().count(text) >= exact


def test_message_tokens_include_overhead_and_tool_calls() -> None:
    plain = message_tokens({"role": "user", "content": "hello world"}, "gpt-4")
    assert plain == MESSAGE_OVERHEAD + 2
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    assert message_tokens(call, "gpt-4") > MESSAGE_OVERHEAD + 5


def test_counting_by_lines_equals_counting_the_joined_text() -> None:
    """count_lines adds per-line counts (kept between calls); on random blocks of the
    memory block's shape (a header, bullets with punctuation, digits, accents, CJK,
    emoji, code, multi-line items indented) its count equals the joined text's, exactly
    for a cl100k model and with the margin for others, and again from the kept counts."""
    import random

    rng = random.Random(5)
    vocab = ["deploy", "the", "Kubernetes", "cluster", "42", "3.14", "café", "naïve",
             "東京", "🙂", "x=1;", "foo()", "--flag", "'s", "don't", "U.S.", "e-mail",
             "tabs\tinside", "...", "!!", "$HOME", "#tag", "v2.0.1", "ÅNGSTRÖM"]
    for _ in range(300):
        lines = ["## Memory\nWhat you know about the user."]
        for _ in range(rng.randint(0, 12)):
            words = [rng.choice(vocab) for _ in range(rng.randint(1, 12))]
            if rng.random() < 0.2:
                words.insert(rng.randint(0, len(words)), "\n  ")
            text = " ".join(words) + rng.choice(["", ".", "!", ":", ")", " 7"])
            lines.append(rng.choice(["- ", "### ", "-"]) + text)
        for model in (None, "gpt-4"):
            whole = count_text("\n".join(lines), model)
            assert count_lines(lines, model) == whole
            assert count_lines(lines, model) == whole  # from the kept counts
    # Empty and blank lines are counted joined: "\n\n" is one token, "\n" + "\n" two.
    for lines in (["a", "", "b"], ["a", " ", "b"], ["x.", "", "", "y"], ["a", " indented"]):
        assert count_lines(lines, "gpt-4") == count_text("\n".join(lines), "gpt-4")
