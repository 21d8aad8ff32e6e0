"""The team's-weeks evaluation (``bench.generalize``, ``bench.bench_generalize``): the
generator is deterministic, its evidence points at user turns that hold what the question
asks, the dev, aside and fresh parts never share a user, questions do not quote their evidence,
and a tiny end-to-end run with the fake embedder gives figures of the right shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import bench_generalize
from bench.generalize import FRESH, KINDS, POPULATION, histories, history, users
from bench.planted import Haystack

SMALL = 14


@pytest.fixture(scope="module")
def dev() -> list[Haystack]:
    return histories("dev", 3, sessions=SMALL)


def test_same_index_same_history() -> None:
    assert history(5, sessions=SMALL) == history(5, sessions=SMALL)
    assert history(5, sessions=SMALL) != history(6, sessions=SMALL)


def test_parts_are_fixed_apart_and_cover_every_user() -> None:
    dev, aside = users("dev"), users("aside")
    assert not set(dev) & set(aside)
    assert sorted(dev + aside) == list(range(POPULATION))
    assert len(aside) == POPULATION * 3 // 10
    assert all(h.split == "aside" for h in histories("aside", 2, sessions=SMALL))
    with pytest.raises(ValueError):
        users("heldout")


def test_the_fresh_part_is_new_users_made_the_same_way_each_time() -> None:
    """Compared, never shown: nothing of the fresh part is printed."""
    fresh = users("fresh")
    assert fresh == list(range(POPULATION, POPULATION + FRESH))
    assert not set(fresh) & (set(users("dev")) | set(users("aside")))
    first, again = (histories("fresh", 2, sessions=SMALL) for _ in range(2))
    assert first == again and [h.split for h in first] == ["fresh", "fresh"]
    assert first[0] != history(users("dev")[0], sessions=SMALL)


def test_evidence_points_at_user_turns_holding_the_remark(dev: list[Haystack]) -> None:
    for hay in dev:
        assert {q.kind for q in hay.questions} == set(KINDS)
        for q in hay.questions:
            assert q.evidence and len(q.evidence) == len(q.planted)
            for key, planted in zip(q.evidence, q.planted, strict=True):
                turn = hay.turn(key)
                assert turn.role == "user" and planted in turn.content


def test_chains_and_inferences_span_sessions_in_order(dev: list[Haystack]) -> None:
    for hay in dev:
        dates = {s.id: s.date for s in hay.sessions}
        for q in hay.questions:
            sessions = [sid for sid, _ in q.evidence]
            if q.kind in ("multi-hop", "open-domain"):
                assert len(set(sessions)) == len(sessions) >= 2
            if q.text.startswith("What did we settle on"):  # outage, then the decision
                assert dates[sessions[0]] < dates[sessions[1]]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3}


def test_questions_share_few_content_words_with_their_evidence(dev: list[Haystack]) -> None:
    """Names repeat (a user would say them); the rest of a question is a paraphrase."""
    names = {w.lower() for h in dev for s in h.sessions for t in s.turns
             for w in re.findall(r"\b[A-Z][a-z]+\b", t.content)}
    for hay in dev:
        for q in hay.questions:
            shared = _words(q.text) & set().union(*map(_words, q.planted)) - names
            assert len(shared) <= 2, (q.text, q.planted, shared)


def test_quick_run_gives_every_kind_and_method(tmp_path: Path) -> None:
    out = tmp_path / "gen.json"
    assert bench_generalize.main(["--quick", "--embedder", "fake", "--out", str(out)]) == 0
    result = json.loads(out.read_text("utf-8"))
    assert result["split"] == "dev" and result["questions"] == 40
    for kind in (*KINDS, "overall"):
        for method in ("memd", "bm25", "dense"):
            got = result["figures"][kind][method]
            assert 0.0 <= got["recall@1"] <= got["recall@5"] <= got["recall@10"] <= 1.0
    assert result["search_p50_ms"] > 0
    fams = result["families"]
    for kind in ("multi-hop", "open-domain"):  # four or more templates each, told apart
        assert len([f for f in fams if f.startswith(kind + "/")]) >= 4


def test_against_ranks_the_same_questions_with_other_settings(tmp_path: Path) -> None:
    """``before`` is memd's search with the given settings on the same stores: with the
    defaults it ranks exactly as ``memd``; with the keyword weight at zero it does not."""
    same, other = tmp_path / "same.json", tmp_path / "other.json"
    base = ["--quick", "--embedder", "fake", "--no-cache"]
    assert bench_generalize.main([*base, "--against", "search_passages=true",
                                  "--out", str(same)]) == 0
    assert bench_generalize.main([*base, "--against", "preset=semantic",
                                  "--out", str(other)]) == 0
    same_fig = json.loads(same.read_text("utf-8"))["figures"]
    other_fig = json.loads(other.read_text("utf-8"))["figures"]
    assert all(same_fig[k]["before"] == same_fig[k]["memd"] for k in same_fig)
    assert any(other_fig[k]["before"] != other_fig[k]["memd"] for k in other_fig)
    assert json.loads(other.read_text("utf-8"))["against"] == {"preset": "semantic"}


def test_against_refuses_settings_read_only_at_open(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_generalize.main(["--quick", "--embedder", "fake", "--against", "db=x"])
    assert "--against takes live settings" in capsys.readouterr().err


def test_aside_prints_its_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Checked with no user at all, so that the test reads nothing of the aside part."""
    out = tmp_path / "a.json"
    args = ["--aside", "--users", "0", "--embedder", "fake", "--out", str(out)]
    assert bench_generalize.main(args) == 0
    assert "run ONCE, at the end" in capsys.readouterr().err
    assert json.loads(out.read_text("utf-8"))["split"] == "aside"


def test_fresh_prints_the_same_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       ) -> None:
    out = tmp_path / "f.json"
    args = ["--fresh", "--users", "0", "--embedder", "fake", "--out", str(out)]
    assert bench_generalize.main(args) == 0
    assert "the fresh part is to be run ONCE" in capsys.readouterr().err
    assert json.loads(out.read_text("utf-8"))["split"] == "fresh"
    with pytest.raises(SystemExit):
        bench_generalize.main(["--fresh", "--aside", "--users", "0", "--embedder", "fake"])
