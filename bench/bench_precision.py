"""Memory precision: what the memory block holds, for the user's own question and for
questions that have nothing to do with the user's history.

    .venv/bin/python -m bench.bench_precision --out bench/figures/precision.json  # 40 users
    .venv/bin/python -m bench.bench_precision --quick    # 2 users, fake embedder (CI)
    .venv/bin/python -m bench.bench_precision --sweep    # the figures at other floors
    .venv/bin/python -m bench.bench_precision --offset 5 # another 40 questions

On LongMemEval_S (``--data`` or ``$MEMD_BENCH_LONGMEMEVAL``), ``--users`` questions spread
over the file are ``--users`` users: each one's haystack is ingested through the engine,
one memd session per haystack session, as longmemeval.py does (the same vectors: its
persistent embedding cache). Then the memory block the proxy adds to a new chat
(``Memd.memory_candidates`` with recall, ``memd.engine.block.inject.build``, engine defaults)
is built within ``--budget`` tokens (2,000) for the user's own question and for
``--unrelated`` other users' questions (the next ones in the list, round the end).

- **false injection**: the share of unrelated questions whose block holds anything but
  notes and style rules (a recalled message, a memory, a fact, a topic-bound
  instruction); and the same over the unrelated questions that are off topic for the
  user (``false_injection_off_topic``: the user's history holds no statement close to
  what answers the question, :func:`near_evidence`);
- **line precision**: of the items injected for the users' own questions, the share that
  comes from an answering session (the sessions holding an evidence turn): a recalled
  message of one, or a memory or fact extracted from one;
- **injected recall**: the share of own questions whose block holds an evidence turn (a
  recalled message, its reply, or the source of a memory or fact), as bench_recall.py
  counts it;
- **junk rate**: the share of the users' stored memories not grounded in user-typed
  text: the message they were drawn from is not a user message, or a content word of
  the memory is found in none of that message's user words (:func:`grounded`).

``--sweep`` rebuilds every block at other floors (memd.engine.retrieval.relevance: the cosine
floor with shared words, and the cosine enough alone) from candidates gathered with
none, and gives the figures for each pair: how the defaults were chosen
(bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import memd
import memd.config
from bench.longmemeval import (
    DEFAULT_CACHE,
    Ingested,
    Question,
    RecordingEmbedder,
    SimClock,
    VectorCache,
    data_path,
    ingest,
    load_questions,
    make_embedder,
)
from bench.output import emit
from memd.engine.block.compile import NOTE_KIND, RECALL_KIND, STYLE_RULE, Candidate
from memd.engine.block.inject import build
from memd.engine.learning.templates import user_words
from memd.engine.retrieval.answers import likelihood
from memd.engine.retrieval.passages import passages
from memd.engine.retrieval.recall import neighbour
from memd.engine.retrieval.relevance import content_words, related
from memd.types import MemoryFilter

BUDGET = 2000
#: The number of users (questions) of a run: 12 questions make 0.083 of injected recall
#: each, and their false injection moved from 0.10 to 0.21 with the next 12 of the file.
USERS = 40
#: The cosine of two statements that say nearly the same thing (:func:`near_evidence`).
TOPICAL = 0.7
FLOORS = (0.2, 0.25, 0.3, 0.35, 0.4)  # --sweep's grid: the floor, with shared words
SURE = (0.4, 0.45, 0.5, 0.55, 0.6, 1.0)  # and the cosine that is enough alone
ANSWERS = (0.0, 0.03, 0.05, 0.07, 0.1, 0.12, 0.15)  # recall_answer_floor, at the defaults
QUESTIONS = (0.0, 0.07, 0.1, 0.12, 0.15, 0.17, 0.18, 0.2, 0.25)  # recall_question_floor
_USER_PART = re.compile(r"User: (.*?)(?:\nAssistant \(earlier reply\): |$)", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+")
#: Words a memory adds to frame what the user said ("User prefers ...", "User's name is"
#: for "I'm Sam", "themselves" for "myself"), and function words: not content the user
#: must have typed.
_FRAME = frozenset("""user users user's name themselves itself the a an and or of to in on
at for with from as is are was were be been has have had do does did not no that this
these those it its their they them he she his her i me my mine you your we our us who
what which when where how
prefers prefer preferred likes like liked wants want wanted asked asks said says
mentioned told plans planned planning decided thinks believes uses using used would should could
will can may might also about there here than then so very just really assistant
doesn don didn isn aren wasn won t s ve ll re d m""".split())
_WE = frozenset({"we", "our", "ours", "us"})


@dataclass
class Item:
    """One block item, judged: its kind, score, cosine, and the haystack sessions and
    turns it comes from."""

    text: str
    kind: str
    score: float
    similarity: float
    rule: str
    sessions: frozenset[str]
    turns: frozenset[tuple[str, int]]

    @property
    def counted(self) -> bool:
        """Whether it counts as an injection: notes and style rules apply to any question."""
        return self.kind != NOTE_KIND and self.rule != STYLE_RULE


@dataclass
class Pool:
    """What the block of one question could hold: the candidates, judged."""

    question: str
    own: bool
    facts: list[Candidate]
    memories: list[Candidate]
    judged: dict[tuple[str, str], Item] = field(default_factory=dict)


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _forms(word: str) -> set[str]:
    """``word`` and what it is without a third-person or plural ending: a memory words
    "I love X" as "User loves X", "I go" as "User goes", "I carry" as "User carries"."""
    forms = {word}
    if word.endswith("ies") and len(word) > 4:
        forms.add(word[:-3] + "y")
    if word.endswith("es") and len(word) > 3:
        forms.add(word[:-2])
    if word.endswith("s") and len(word) > 2:
        forms.add(word[:-1])
    return forms


def grounded(memory_text: str, source_words: str) -> bool:
    """Whether each content word of a memory is found among ``source_words`` (the user
    words of the message it came from), a word counting as found when one of them
    starts with its first five letters (light stemming: "prefers" / "preferred"), or
    with the word without its third-person ending ("loves" / "love"); "team" is found
    where the user said "we" ("we use Go" is "User's team uses Go")."""
    have = words(source_words)
    if have & _WE:
        have.add("team")  # how the extractor words "we" in the third person
    stems = {w[:5] for w in have}
    return all(any(f in have or f[:5] in stems for f in _forms(w))
               for w in words(memory_text) - _FRAME)


def judge(engine: memd.Memd, ing: Ingested, c: Candidate, is_fact: bool,
          facts_by_id: Mapping[str, Any]) -> Item:
    """Where a candidate comes from, in haystack turns."""
    store, uid = engine.store, ing.user_id
    ids: list[str | None] = []
    if is_fact:
        ids.append(facts_by_id[c.id].source_message_id if c.id in facts_by_id else None)
    elif c.kind == RECALL_KIND:
        msg = store.get_message(uid, c.id)
        ids.append(c.id)
        other = neighbour(store, uid, msg) if msg else None
        ids.append(other.id if other else None)
    elif c.kind != NOTE_KIND:
        mem = engine.get(c.id, uid)
        ids.append(mem.provenance_message_id)
        if mem.provenance_message_id is None and mem.session_id:  # a session's summary
            session = store.get_session(uid, mem.session_id)
            hid = session.metadata.get("haystack_session_id") if session else None
            return Item(c.text, c.kind, c.score, c.similarity, c.rule,
                        frozenset([hid] if hid else []), frozenset())
    turns = frozenset(ing.by_message[i] for i in ids if i in ing.by_message)
    return Item(c.text, "fact" if is_fact else c.kind, c.score, c.similarity, c.rule,
                frozenset(s for s, _ in turns), turns)


def pool(engine: memd.Memd, ing: Ingested, text: str, own: bool,
         facts_by_id: Mapping[str, Any]) -> Pool:
    facts, mems = engine.memory_candidates(ing.user_id, text, sent_chains=())
    p = Pool(text, own, facts, mems)
    for c in facts:
        p.judged[("fact", c.id)] = judge(engine, ing, c, True, facts_by_id)
    for c in mems:
        p.judged[(c.kind, c.id)] = judge(engine, ing, c, False, facts_by_id)
    return p


def block_items(engine: memd.Memd, p: Pool, budget: int, floor: float | None = None,
                sure: float | None = None, answer: float = 0.0, question: float = 0.0
                ) -> list[Item]:
    """The items of the block built from ``p`` (at other floors when given: the
    candidates were gathered with none; ``answer``: the recall_answer_floor,
    ``question``: the recall_question_floor)."""
    words = content_words(p.question)
    best = 0.0  # the likeliest answer among the recalled lines about the question

    def about(c: Candidate) -> bool:
        nonlocal best
        if floor is None or sure is None or c.rule == STYLE_RULE or c.kind == NOTE_KIND:
            return True
        said = _USER_PART.search(c.text) if c.kind == RECALL_KIND else None
        text = said.group(1) if said else c.text
        if not related(c.similarity, words, text, floor, sure):
            return False
        if said and (answer > 0 or question > 0):
            score = likelihood(c.similarity, p.question, text)
            best = max(best, score)
            return score >= answer
        return True

    facts = [c for c in p.facts if about(c)]
    mems = [c for c in p.memories if about(c)]
    if floor is not None and best < question:
        mems = [c for c in mems if c.kind != RECALL_KIND]
    block = build(facts, mems, budget, "user", None, share=engine.settings.instruction_share)
    if block is None:
        return []
    return [p.judged[("fact", c.id)] for c in block.facts] + \
        [p.judged[(c.kind, c.id)] for c in block.memories]


@dataclass
class User:
    question: Question
    ingested: Ingested
    own: Pool
    unrelated: list[Pool]
    memories: int
    junk: list[str]
    #: per unrelated question: whether this user's history says nearly what answers it
    topical: list[bool] = field(default_factory=list)


def statements(texts: Iterable[str]) -> list[str]:
    """What ``texts`` state, as memd embeds it: each text's passages, or the text itself
    when it is one passage."""
    return [p for t in texts for p in (passages(t) or [t])]


def near_evidence(emb: RecordingEmbedder, own: Question, others: Sequence[Question]
                  ) -> list[bool]:
    """For each of ``others``, whether ``own``'s history holds a statement within
    ``TOPICAL`` cosine of what answers it: of each of its evidence turns, the statement
    closest to the question. LongMemEval's filler sessions come from one pool of
    personas, so "How many times have I worn my Converse?" can be answered by another
    user's history too. Judged on the other question's evidence, which no retrieval rule
    sees."""
    mine = emb.embed(statements(t for _, t in own.user_turns()))
    out = []
    for q in others:
        [qvec] = emb.embed([q.text])
        answers = []
        for s in q.sessions:
            for i, t in enumerate(s.turns):
                if (s.id, i) in q.evidence_turns:
                    vecs = emb.embed(statements([t.content]))
                    answers.append(vecs[int(np.argmax(vecs @ qvec))])
        out.append(bool(answers) and len(mine) > 0
                   and float((np.array(answers) @ mine.T).max()) >= TOPICAL)
    return out


def figures(engine: memd.Memd, users: Sequence[User], budget: int,
            floor: float | None = None, sure: float | None = None, answer: float = 0.0,
            question: float = 0.0) -> dict[str, Any]:
    """The four figures over ``users`` (at other floors when given)."""
    false_hits = unrelated = off_topic = off_topic_hits = 0
    injected = from_answer = found = 0
    unrelated_tokens: list[int] = []
    by_kind: dict[str, list[int]] = {}
    for u in users:
        q = u.question
        items = [i for i in block_items(engine, u.own, budget, floor, sure, answer, question)
                 if i.counted]
        injected += len(items)
        good = [i for i in items if i.sessions & q.evidence_sessions]
        from_answer += len(good)
        found += any(i.turns & q.evidence_turns for i in items)
        for i in items:
            tally = by_kind.setdefault(i.kind, [0, 0])
            tally[0] += 1
            tally[1] += i in good
        for n, p in enumerate(u.unrelated):
            unrelated += 1
            counted = [i for i in block_items(engine, p, budget, floor, sure, answer,
                                                 question)
                       if i.counted]
            false_hits += bool(counted)
            unrelated_tokens.append(len(counted))
            if not (u.topical and u.topical[n]):
                off_topic += 1
                off_topic_hits += bool(counted)
    memories = sum(u.memories for u in users)
    junk = sum(len(u.junk) for u in users)
    return {
        "false_injection": round(false_hits / max(unrelated, 1), 4),
        "unrelated_questions": unrelated,
        "unrelated_items_mean": round(sum(unrelated_tokens) / max(unrelated, 1), 2),
        "false_injection_off_topic": round(off_topic_hits / max(off_topic, 1), 4),
        "off_topic_questions": off_topic,
        "line_precision": round(from_answer / max(injected, 1), 4),
        "injected_items": injected,
        "injected_recall": round(found / max(len(users), 1), 4),
        "junk_rate": round(junk / max(memories, 1), 4),
        "memories": memories,
        "by_kind": {k: {"injected": n, "from_answer": g} for k, (n, g) in sorted(by_kind.items())},
    }


def junk_of(engine: memd.Memd, user_id: str) -> tuple[int, list[str]]:
    """(memories, the texts of those not grounded in user-typed text) of a user."""
    mems = engine.store.list_memories(user_id, MemoryFilter(), limit=100_000)
    junk = []
    for m in mems:
        if m.provenance_message_id is None:
            continue  # a summary of compacted turns, not an extracted memory
        msg = engine.store.get_message(user_id, m.provenance_message_id)
        if msg is None or msg.role != "user" or not grounded(
                m.text, user_words(msg.safe_text or "")):
            junk.append(m.text)
    return sum(1 for m in mems if m.provenance_message_id is not None), junk


def similarities(users: Iterable[User]) -> dict[str, Any]:
    """Median cosine of the candidates, evidence against the rest, per kind: what the
    floors are chosen on."""
    def median(xs: list[float]) -> float | None:
        xs = sorted(xs)
        return round(xs[len(xs) // 2], 3) if xs else None

    out: dict[str, Any] = {}
    for kind in ("recall", "memory", "fact"):
        evidence, other, unrelated = [], [], []
        for u in users:
            for i in u.own.judged.values():
                if i.kind == kind and i.counted:
                    (evidence if i.sessions & u.question.evidence_sessions
                     else other).append(i.similarity)
            for p in u.unrelated:
                unrelated += [i.similarity for i in p.judged.values()
                              if i.kind == kind and i.counted]
        out[kind] = {"answering": median(evidence), "other_own": median(other),
                     "unrelated": median(unrelated), "n": [len(evidence), len(other),
                                                           len(unrelated)]}
    return out


def dump(users: Sequence[User], path: Path) -> None:
    """Every candidate, one JSON line each: the question, whether it is the user's own,
    the item's kind, cosine, score, whether it comes from an answering session and holds
    evidence, and its text (for choosing floors and rules by hand)."""
    with path.open("w", encoding="utf-8") as f:
        for n, u in enumerate(users):
            q = u.question
            for p in (u.own, *u.unrelated):
                for i in p.judged.values():
                    f.write(json.dumps({
                        "user": n, "own": p.own, "query": p.question, "kind": i.kind,
                        "rule": i.rule, "similarity": round(i.similarity, 4),
                        "score": round(i.score, 4),
                        "answering": bool(p.own and i.sessions & q.evidence_sessions),
                        "evidence": bool(p.own and i.turns & q.evidence_turns),
                        "text": i.text}) + "\n")


def _setting(value: str) -> Any:
    """A ``--set`` value: a number or a JSON literal as such, else the string."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="LongMemEval_S .json(.gz)")
    ap.add_argument("--users", type=int, default=USERS, help="questions (users), spread")
    ap.add_argument("--offset", type=int, default=0,
                    help="take each question this many further in the file (another set "
                         "of questions, of the same types, for checking what was tuned)")
    ap.add_argument("--unrelated", type=int, default=10,
                    help="other users' questions asked of each user")
    ap.add_argument("--budget", type=int, default=BUDGET, help="the block's tokens")
    ap.add_argument("--embedder", default="minilm-onnx", choices=["minilm-onnx", "fake"])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="persistent embedding cache, shared with longmemeval.py")
    ap.add_argument("--sweep", action="store_true",
                    help="also the figures at other similarity floors")
    ap.add_argument("--quick", action="store_true",
                    help="= --users 2 --unrelated 1 --embedder fake (CI)")
    ap.add_argument("--dump", type=Path, help="write every candidate to this JSON-lines file")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="an engine setting for this run (e.g. recall_keyword=true)")
    args = ap.parse_args(argv)
    if args.quick:
        args.users, args.unrelated, args.embedder = 2, 1, "fake"
    questions = load_questions(data_path(args.data), args.users)
    if args.offset:  # the same spread, each question ``--offset`` further in the file
        every = load_questions(data_path(args.data))
        at = {q.id: i for i, q in enumerate(every)}
        questions = [every[(at[q.id] + args.offset) % len(every)] for q in questions]
    inner = make_embedder(args.embedder)
    cache = VectorCache(args.cache, inner.name, inner.dim) if args.embedder != "fake" else None
    emb = RecordingEmbedder(inner, cache)
    clock = SimClock()
    started = time.perf_counter()
    users: list[User] = []
    floors: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="memd-precision-") as tmp:
        longest = max(len(t.content) for q in questions for s in q.sessions for t in s.turns)
        opened: dict[str, Any] = {k: _setting(v) for k, v in
                                  (kv.split("=", 1) for kv in args.set)}
        opened_answer = opened.get("recall_answer_floor")
        opened_question = opened.get("recall_question_floor")
        if args.sweep:  # gather with no floor; each grid point filters again
            opened |= {"min_similarity": -1.0, "recall_min_similarity": -1.0,
                      "sure_similarity": -1.0, "recall_answer_floor": 0.0,
                      "recall_question_floor": 0.0}
        engine = memd.open(Path(tmp), embedder=emb, clock=clock,
                           max_text_chars=max(32_000, longest), **opened)
        defaults = memd.config.Settings()
        try:
            for n, q in enumerate(questions):
                emb.forget()
                emb.prefetch([t.content for s in q.sessions for t in s.turns if t.content])
                clock.at = None
                ing = ingest(engine, q, clock, sim_time=True)
                facts_by_id = {f.id: f for f in engine.store.get_facts(ing.user_id)}
                other_qs = [questions[(n + k) % len(questions)]
                            for k in range(1, min(args.unrelated, len(questions) - 1) + 1)]
                others = [o.text for o in other_qs]
                count, junk = junk_of(engine, ing.user_id)
                users.append(User(
                    q, ing, pool(engine, ing, q.text, True, facts_by_id),
                    [pool(engine, ing, t, False, facts_by_id) for t in others], count, junk,
                    near_evidence(emb, q, other_qs)))
                print(f"{n + 1}/{len(questions)} {q.type}: {count} memories, "
                      f"{len(junk)} not grounded", file=sys.stderr, flush=True)
            if args.dump:
                dump(users, args.dump)
            if args.sweep:
                answer = float(opened_answer if opened_answer is not None
                               else defaults.recall_answer_floor)
                question = float(opened_question if opened_question is not None
                                 else defaults.recall_question_floor)
                at = (defaults.min_similarity, defaults.sure_similarity)
                floors = {f"{f:g}/{s:g}": figures(engine, users, args.budget, f, s, answer,
                                                  question)
                          for f in FLOORS for s in SURE}
                answers = {f"{a:g}/{b:g}": figures(engine, users, args.budget, *at, a, b)
                           for a in ANSWERS for b in QUESTIONS}
                result = figures(engine, users, args.budget, *at, answer, question)
            else:
                result = figures(engine, users, args.budget)
        finally:
            engine.close()
    out: dict[str, Any] = {
        "users": len(users), "unrelated_per_user": args.unrelated, "budget": args.budget,
        "embedder": args.embedder, **result,
        "floors": {"min_similarity": defaults.min_similarity,
                   "recall_min_similarity": defaults.recall_min_similarity,
                   "sure_similarity": defaults.sure_similarity,
                   "recall_answer_floor": defaults.recall_answer_floor,
                   "recall_question_floor": defaults.recall_question_floor},
        "similarity_medians": similarities(users),
        "junk_examples": [t for u in users for t in u.junk][:20],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if floors:
        out["sweep"] = floors
        out["sweep_answer_floor"] = answers
    emit(out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
