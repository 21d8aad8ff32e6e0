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


def test_a_third_person_restatement_is_grounded() -> None:
    assert grounded("User loves visiting historic landmarks", "I love visiting historic landmarks")
    assert grounded("User usually goes 50/50", "I usually go 50/50")
    assert grounded("User's team uses Postgres", "We use Postgres")
    assert grounded("User doesn't want to overwhelm themselves", "I don't want to overwhelm myself")
    assert grounded("User's name is Lirien", "I'm Lirien")
    assert not grounded("User's team uses Postgres", "I use Postgres")  # no "we" said
    assert not grounded("User's company is based in Canada", "We're based in Canada")
