"""bench_precision's judges: a memory is junk unless the user typed its words; another
user's question is off topic unless this user's history says what answers it."""

from __future__ import annotations

from bench.bench_precision import grounded, near_evidence
from bench.longmemeval import HaystackSession, Question, RecordingEmbedder, Turn
from memd.models.embedder import FakeEmbedder


def _question(qid: str, text: str, said: list[str], answer: int | None = None) -> Question:
    turns = tuple(Turn(role, words, has_answer=role == "user" and n == answer)
                  for n, line in enumerate(said)
                  for role, words in (("user", line), ("assistant", "Noted.")))
    return Question(qid, "single-session-user", text, 0.0,
                    (HaystackSession(f"{qid}-s", 0.0, turns),))


def test_an_other_users_question_is_off_topic_unless_this_history_answers_it() -> None:
    converse = "By the way, I think I've worn my new Converse four times since I got them."
    own = _question("a", "Where did I buy my bike?", [
        "I bought my bike at the corner shop last spring, and it rides well.",
        f"I'm looking for some shoe cleaning tips for my white sneakers. {converse}"])
    asked_too = _question("b", "How many times have I worn my Converse?",
                          ["Can you suggest a playlist for running?", converse], answer=1)
    elsewhere = _question("c", "What breed is my dog?",
                          ["My dog Max is a Golden Retriever who loves the lake."], answer=0)
    emb = RecordingEmbedder(FakeEmbedder())
    # the statement that answers "b" is in "a"'s history (as one of its passages); what
    # answers "c" is not, and neither is "b"'s turn that is not evidence
    assert near_evidence(emb, own, [asked_too, elsewhere]) == [True, False]


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
    # a decision is worded by the extractor's frame, its object by the user
    assert grounded("User decided to go with The Avengers as the next movie",
                    "Let's go with The Avengers as the next movie")
    assert not grounded("User decided to go with Iron Man", "Let's go with The Avengers")
    assert grounded("User doesn't want to overwhelm themselves", "I don't want to overwhelm myself")
    assert grounded("User's name is Lirien", "I'm Lirien")
    assert not grounded("User's team uses Postgres", "I use Postgres")  # no "we" said
    assert not grounded("User's company is based in Canada", "We're based in Canada")
