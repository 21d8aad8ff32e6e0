"""The planted-facts evaluation (``bench.planted``, ``bench.bench_planted``): the
generator is deterministic and plants what its questions say, the two splits never meet,
and a tiny end-to-end run with the fake embedder gives figures of the right shape, with
the control kind found. No timing assertions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import bench_planted
from bench.planted import ALL_KINDS, CONTROL, KINDS, Haystack, haystack, haystacks

SMALL = 12  # sessions per haystack in these tests


@pytest.fixture(scope="module")
def dev() -> list[Haystack]:
    return haystacks("dev", 4)


def test_same_seed_same_haystack() -> None:
    assert haystack("dev", 3) == haystack("dev", 3)
    assert haystack("heldout", 0, sessions=SMALL) == haystack("heldout", 0, sessions=SMALL)
    assert haystack("dev", 3) != haystack("dev", 4)


def test_splits_differ_and_share_no_haystack(dev: list[Haystack]) -> None:
    held = haystacks("heldout", 4)
    assert not {h.id for h in dev} & {h.id for h in held}
    assert not {h.seed for h in dev} & {h.seed for h in held}

    def texts(hs: list[Haystack]) -> set[tuple[str, ...]]:
        return {tuple(t.content for s in h.sessions for t in s.turns) for h in hs}

    assert not texts(dev) & texts(held)
    assert {q.text for h in held for q in h.questions} != {
        q.text for h in dev for q in h.questions}
    with pytest.raises(ValueError, match="unknown split"):
        haystack("test", 0)


def test_evidence_turns_hold_the_planted_text(dev: list[Haystack]) -> None:
    for h in dev:
        for q in h.questions:
            assert q.evidence and len(q.evidence) == len(q.planted)
            for key, planted in zip(q.evidence, q.planted, strict=True):
                turn = h.turn(key)
                assert turn.role == "user"
                assert planted in turn.content
            assert len(set(q.evidence)) == len(q.evidence)


def test_answers_are_only_in_evidence_turns(dev: list[Haystack]) -> None:
    """No other user turn states a question's answer: distractors share the question's
    words, not its answer."""
    for h in dev:
        for q in h.questions:
            says = re.compile(rf"(?<!\w){re.escape(q.answer)}(?!\w)", re.IGNORECASE)
            where = {(s.id, i) for s in h.sessions for i, t in enumerate(s.turns)
                     if t.role == "user" and says.search(t.content)}
            assert where and where <= set(q.evidence), (q.text, q.answer)


def test_every_kind_in_every_haystack(dev: list[Haystack]) -> None:
    for h in dev:
        kinds = {q.kind for q in h.questions}
        assert kinds == set(ALL_KINDS)
        assert {q.sub for q in h.questions if q.kind == "temporal"} == {"now", "before"}
    assert CONTROL not in KINDS


def test_multi_hop_evidence_spans_two_sessions(dev: list[Haystack]) -> None:
    for h in dev:
        for q in h.questions:
            if q.kind == "multi-hop":
                assert len(q.evidence) == 2
                assert q.evidence[0][0] != q.evidence[1][0]


def test_temporal_questions_follow_the_dates(dev: list[Haystack]) -> None:
    for h in dev:
        dates = [s.date for s in h.sessions]
        assert dates == sorted(dates) and len(set(dates)) == len(dates)
        assert h.date > dates[-1]
        date_of = {s.id: s.date for s in h.sessions}
        now = [q for q in h.questions if q.sub == "now"]
        for before in (q for q in h.questions if q.sub == "before"):
            # "Where did I live before Oslo?" goes with "Where do I live now?" (Oslo)
            (later,) = [q for q in now if q.answer in before.text]
            assert date_of[later.evidence[0][0]] > date_of[before.evidence[0][0]]


def test_small_haystacks_still_plant_everything() -> None:
    h = haystack("dev", 0, sessions=SMALL)
    assert len(h.sessions) == SMALL
    assert {q.kind for q in h.questions} == set(ALL_KINDS)
    with pytest.raises(ValueError):
        haystack("dev", 0, sessions=5)


def test_end_to_end_with_the_fake_embedder(tmp_path: Path) -> None:
    out = tmp_path / "planted.json"
    assert bench_planted.main(["--users", "1", "--sessions", str(SMALL), "--embedder",
                               "fake", "--no-cache", "--out", str(out)]) == 0
    result = json.loads(out.read_text("utf-8"))
    assert result["split"] == "dev" and result["users"] == 1
    figures = result["figures"]
    names = {*ALL_KINDS, "temporal-now", "temporal-before", "overall"}
    assert set(figures) == names
    for name in names:
        assert figures[name]["questions"] > 0
        for metric in bench_planted.METRICS:
            assert 0.0 <= figures[name][metric] <= 1.0, (name, metric)
            if metric.endswith("_all@5") or metric.endswith("_all"):
                assert figures[name][metric] <= figures[name][metric.replace("all", "any")]
    assert figures["overall"]["questions"] == result["questions"] - figures[CONTROL][
        "questions"]
    # the control's question quotes its evidence: a harness that finds nothing fails here
    assert figures[CONTROL]["search_any@5"] == 1.0
    assert figures[CONTROL]["user_any@5"] == 1.0
    for miss in result["misses"]:
        assert miss["kind"] in ALL_KINDS and miss["planted"]
