"""bench_precision's grounding test: a memory is junk unless the user typed its words."""

from __future__ import annotations

from bench.bench_precision import grounded


def test_a_memory_is_grounded_in_the_users_own_words() -> None:
    said = "I prefer pytest with -x, and my cat Miso sleeps all day."
    assert grounded("User prefers pytest", said)
    assert grounded("User's cat Miso sleeps all day", said)  # stems and framing words
    assert not grounded("User prefers unittest", said)  # a word the user never typed
    assert not grounded("User doesn't want the assistant to have better alternatives",
                        "Can you give me better options?")
