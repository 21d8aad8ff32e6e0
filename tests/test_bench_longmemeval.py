"""The LongMemEval harness (``bench.longmemeval``): its metric functions, the official
protocol's question filter and a tiny end-to-end run on a synthetic dataset with the
fake embedder. No timing assertions."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import bench.longmemeval
from memd.config import PRESETS
from memd.models.embedder import FakeEmbedder


@pytest.fixture(scope="module")
def lme() -> ModuleType:
    return bench.longmemeval


# ------------------------------------------------------------------------ metrics
def test_recall_any_and_all(lme: ModuleType) -> None:
    ranked = ["a", "b", "c", "d"]
    assert lme.recall_any(ranked, {"c"}, 2) == 0.0
    assert lme.recall_any(ranked, {"c"}, 3) == 1.0
    assert lme.recall_any(ranked, {"c", "z"}, 3) == 1.0
    assert lme.recall_all(ranked, {"a", "c"}, 2) == 0.0
    assert lme.recall_all(ranked, {"a", "c"}, 3) == 1.0
    assert lme.recall_all(ranked, {"a", "z"}, 4) == 0.0
    assert lme.recall_all(ranked, set(), 4) == 0.0  # nothing to find is not a success
    assert lme.recall_any([], {"a"}, 5) == 0.0


def test_ndcg(lme: ModuleType) -> None:
    assert lme.ndcg_any(["a", "b"], {"a"}, 5) == 1.0
    assert lme.ndcg_any(["x", "a"], {"a"}, 5) == pytest.approx(1 / math.log2(3))
    assert lme.ndcg_any(["x", "a"], {"a"}, 1) == 0.0
    # two relevant, one found at rank 1: DCG 1, ideal 1 + 1/log2(3)
    assert lme.ndcg_any(["a", "x", "y"], {"a", "b"}, 3) == pytest.approx(
        1 / (1 + 1 / math.log2(3)))
    # the ideal is cut at k: one relevant slot at k=1
    assert lme.ndcg_any(["a"], {"a", "b", "c"}, 1) == 1.0
    assert lme.ndcg_any(["a"], set(), 3) == 0.0
    assert lme.dcg([1, 0, 1]) == pytest.approx(1 + 1 / math.log2(4))


def test_metrics_at_keys_and_session_dedupe(lme: ModuleType) -> None:
    got = lme.metrics_at(["a"], {"a"}, (1, 3))
    assert set(got) == {"recall_any@1", "recall_any@3", "recall_all@1", "recall_all@3",
                        "ndcg_any@1", "ndcg_any@3"}
    # turns of one session count once: "@2" is the first two distinct sessions
    ranked = [("s1", 0), ("s1", 2), ("s1", 4), ("s2", 0), ("s3", 0)]
    evidence = {("s2", 0), ("s3", 0)}
    out = lme.evaluate_turns(ranked, evidence, (1, 2, 3))
    assert out["session"]["recall_any@2"] == 1.0
    assert out["session"]["recall_all@2"] == 0.0
    assert out["session"]["recall_all@3"] == 1.0
    assert out["turn"]["recall_any@3"] == 0.0
    # strict (the paper code): a non-evidence turn of an evidence session does not count
    # for it, and stands for a distinct session when deduplicating
    ranked = [("s2", 1), ("s1", 0), ("s2", 0)]
    out = lme.evaluate_turns(ranked, {("s2", 0)}, (1, 2, 3))
    assert out["session"]["recall_any@1"] == 1.0
    assert out["strict"]["recall_any@1"] == 0.0
    assert out["strict"]["recall_any@2"] == 0.0
    assert out["strict"]["recall_any@3"] == 1.0
    assert lme.dedupe(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def test_mean_percentile_spread(lme: ModuleType) -> None:
    assert lme.mean_metrics([{"x": 1.0}, {"x": 0.0}]) == {"x": 0.5}
    assert lme.mean_metrics([]) == {}
    assert lme.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert lme.percentile([1.0, 2.0], 95) == 2.0
    assert lme.spread(10, 3) == [0, 3, 6]
    assert lme.spread(4, None) == [0, 1, 2, 3]
    assert lme.spread(2, 5) == [0, 1]


def test_bm25_ranks_the_matching_document_first(lme: ModuleType) -> None:
    docs = ["my dog is called rex", "i like pasta", "the weather is nice today"]
    assert lme.bm25_rank(docs, "what is my dog called")[0] == 0
    # ties go to the later index, like numpy's argsort()[::-1] in the paper's code
    assert lme.rank_desc([1.0, 1.0, 0.5]) == [1, 0, 2]


def test_parse_date_and_variants(lme: ModuleType) -> None:
    a = lme.parse_date("2023/04/10 (Mon) 10:15")
    b = lme.parse_date("2023/04/11 (Tue) 10:15")
    assert b - a == 86400
    v = lme.parse_variant("fix:keyword=0.2,k=80", "default", 50)
    assert v.fix and v.k == 80 and v.weights.keyword == 0.2
    assert v.weights.similarity == PRESETS["default"].similarity
    assert lme.parse_variant("semantic", "default", 50).weights == PRESETS["semantic"]
    with pytest.raises(SystemExit):
        lme.parse_variant("nonsense=1", "default", 50)


def test_fixed_scoring_pool_and_true_cosine(lme: ModuleType) -> None:
    cand = lme.Candidate
    cands = [
        cand(("a", 0), 0.50, 0, 0.0, None, 0.0),   # vector channel only
        cand(("b", 0), 0.40, 1, 1.0, 0, 0.0),      # both channels
        cand(("c", 0), 0.45, 5, 0.5, 1, 0.0),      # keyword channel only (k=2)
        cand(("d", 0), 0.90, 7, 0.0, None, 0.0),   # in no channel's top 2: never returned
    ]
    w = PRESETS["semantic"]  # 0.75 similarity, 0.25 keyword, no freshness
    engine_like = lme.fixed_scores(cands, w, 2, true_cosine=False)
    assert [key for key, _ in engine_like] == [("b", 0), ("a", 0), ("c", 0)]
    assert dict(engine_like)[("c", 0)] == pytest.approx(0.25 * 0.5)  # cosine counted as 0
    fixed = lme.fixed_rank(cands, w, 2)
    assert fixed == [("b", 0), ("c", 0), ("a", 0)]  # 0.75*0.45 + 0.125 > 0.75*0.5
    assert lme.same_up_to_ties([("b", 0), ("a", 0)], engine_like)
    assert not lme.same_up_to_ties([("a", 0), ("b", 0)], engine_like)
    tied = [(("x", 0), 1.0), (("y", 0), 1.0), (("z", 0), 0.5)]
    assert lme.same_up_to_ties([("y", 0), ("x", 0)], tied)


def test_recording_embedder_reuses_wanted_vectors(lme: ModuleType) -> None:
    from memd.models.embedder import FakeEmbedder

    emb = lme.RecordingEmbedder(FakeEmbedder())
    emb.want(["kept"])
    first = emb.embed(["kept", "other"])
    assert emb.texts_embedded == 2
    again = emb.embed(["kept"])
    assert emb.texts_embedded == 2  # served from the memo
    assert (again[0] == first[0]).all()
    emb.embed(["other"])
    assert emb.texts_embedded == 3  # not wanted, not kept
    emb.forget()
    emb.embed(["kept"])
    assert emb.texts_embedded == 4


# ------------------------------------------------------------------- end to end
def _session(topic: str, evidence: str | None = None) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = [
        {"role": "user", "content": f"Can you tell me about {topic}?"},
        {"role": "assistant", "content": f"Sure, {topic} is a broad subject with history."},
        {"role": "user", "content": f"What are good books on {topic}?"},
        {"role": "assistant", "content": f"Several classic books cover {topic} well."},
    ]
    if evidence is not None:
        for t in turns:
            t["has_answer"] = False
        turns.insert(2, {"role": "user", "content": evidence, "has_answer": True})
        turns.insert(3, {"role": "assistant", "content": "Noted, thanks for sharing."})
    return turns


def _instance(qid: str, question: str, evidence: str, topics: list[str]) -> dict[str, Any]:
    sessions = [_session(t) for t in topics]
    sessions.insert(1, _session("gardening", evidence))
    ids = [f"s{i}_{qid}" for i in range(len(sessions))]
    ids[1] = f"answer_{qid}"
    return {
        "question_id": qid, "question_type": "single-session-user", "question": question,
        "answer": "-", "question_date": "2023/05/30 (Tue) 12:00",
        "haystack_session_ids": ids,
        "haystack_dates": [f"2023/05/{10 + i:02d} (Wed) 09:00" for i in range(len(ids))],
        "haystack_sessions": sessions, "answer_session_ids": [ids[1]],
    }


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    topics = ["astronomy", "cooking", "jazz music", "chess openings", "marathon training"]
    data = [
        _instance("q1", "What is the name of my tortoise?",
                  "My tortoise is named Sheldon and he loves dandelions.", topics),
        _instance("q2", "Which city did my sister move to?",
                  "My sister just moved to Lisbon for a new job.", topics[::-1]),
        # skipped by the protocol: abstention, and no user-side evidence turn
        {**_instance("q3_abs", "Where do I work?", "I work at a bakery.", topics),
         "question_id": "q3_abs"},
        {**_instance("q4", "x?", "y.", topics),
         "haystack_sessions": [_session(t) for t in topics + ["z"]]},
    ]
    path = tmp_path / "tiny.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def test_protocol_filter_and_evidence(lme: ModuleType, dataset: Path) -> None:
    questions = lme.load_questions(dataset)
    assert [q.id for q in questions] == ["q1", "q2"]
    q = questions[0]
    assert q.evidence_sessions == {"answer_q1"}
    assert q.evidence_turns == {("answer_q1", 2)}
    assert all(key[0] != "answer_q1" or key[1] % 2 == 0 for key, _ in q.user_turns())


def test_end_to_end_tiny_run(lme: ModuleType, dataset: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    out, dump = tmp_path / "res.json", tmp_path / "dump.jsonl"
    rc = lme.main(["--data", str(dataset), "--embedder", "fake", "--out", str(out),
                   "--dump", str(dump), "--variant", "semantic", "--variant",
                   "fix:freshness=0", "--k", "20"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "memd" in printed and "bm25" in printed and "dense" in printed
    result = json.loads(out.read_text())
    assert result["config"]["questions"] == 2
    summary = result["summary"]
    assert set(summary) >= {"memd", "memd[semantic]", "fix[freshness=0]", "bm25", "dense",
                            "bm25-sessdoc", "dense-sessdoc"}
    assert set(summary["memd"]) == {"session", "strict", "turn"}
    assert set(summary["bm25-sessdoc"]) == {"session"}
    for levels in summary.values():
        for metrics in levels.values():
            assert len(metrics) == 12
            assert all(0.0 <= v <= 1.0 for v in metrics.values())
    # the evidence turn is the only one sharing rare words with its question: every
    # turn-index method ranks it first (fake embedder and BM25 are deterministic)
    for method in ("memd", "memd[semantic]", "fix[freshness=0]", "bm25", "dense"):
        assert summary[method]["turn"]["recall_any@1"] == 1.0, method
        assert summary[method]["session"]["recall_all@1"] == 1.0, method
    assert result["memd_ingest"]["turns"] == 2 * (6 * 4 + 2)
    rows = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"]
    assert all(len(r["candidates"]) == 6 * 2 + 1 for r in rows)  # user turns only
    assert "agrees on 2/2" in printed


def test_vector_cache_and_prefetch(lme: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite"
    cache = lme.VectorCache(path, "fake-hash", 384)
    emb = lme.RecordingEmbedder(FakeEmbedder(), cache)
    emb.prefetch(["a b", "c d", "a b"])
    assert emb.texts_embedded == 2 and emb.cache_hits == 0
    before = emb.embed(["a b", "c d"])
    assert emb.texts_embedded == 2  # served from the memo
    cache.close()
    again = lme.RecordingEmbedder(FakeEmbedder(), lme.VectorCache(path, "fake-hash", 384))
    again.prefetch(["a b", "c d", "e f"])
    assert again.texts_embedded == 1 and again.cache_hits == 2
    np.testing.assert_array_equal(again.embed(["a b", "c d"]), before)
    again.forget()
    again.embed(["e f"])  # not in the memo any more: from the disk cache, not the model
    assert again.texts_embedded == 1 and again.cache_hits == 3


def test_interleaved_prefixes_spread(lme: ModuleType) -> None:
    order = lme.interleaved(100)
    assert sorted(order) == list(range(100))
    first = sorted(order[:10])
    assert max(b - a for a, b in zip(first, first[1:], strict=False)) <= 20
