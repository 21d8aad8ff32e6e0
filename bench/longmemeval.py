"""LongMemEval_S retrieval quality: memd's message search against BM25 and dense baselines.

    nice -n 19 .venv/bin/python -m bench.longmemeval --limit 40       # subset, real MiniLM
    nice -n 19 .venv/bin/python -m bench.longmemeval --interleave \
        --dump lme.jsonl --out lme.json                                # all 418 questions
    .venv/bin/python -m bench.longmemeval --dump lme.jsonl --report \
        --out lme.json --plot lme.png                                  # figures of a dump
    .venv/bin/python -m bench.longmemeval --quick                     # 5 questions, fake model

MiniLM runs on onnxruntime (``--embedder minilm`` for torch); vectors are cached by text
hash in ``--cache`` (``~/.cache/memd-bench/embeddings.sqlite``) for memd and the
baselines alike, so a re-run does not touch the model.

Data: LongMemEval_S (Wu et al., ICLR 2025; MIT licence), the ``longmemeval_s_cleaned``
file, as .json or .json.gz, given with ``--data FILE`` or ``MEMD_BENCH_LONGMEMEVAL``
(bench/README.md says where to get it).

Protocol (the paper's ``src/retrieval``): skip the
``_abs`` questions and those with no user-side ``has_answer`` turn; retrieve USER turns
only; report recall_any@k, recall_all@k and ndcg_any@k for k in 1, 3, 5, 10 at turn level
and at session level (a turn hit counts for its session; sessions deduplicated in rank
order, so "@5" means the first five distinct sessions).

memd gets each question's haystack the way a user's sessions arrive: a fresh user id, one
memd session per haystack session, its user AND assistant turns appended in order (one
``append`` call per session), then ``run_jobs()`` (message embeddings, extraction) and
``search(question, k=--k, kinds=["message"])``; assistant hits are dropped afterwards (the
over-fetch keeps enough user hits). With ``--clock haystack`` (the default) the engine's
clock reads each session's date while it is appended and the question's date while it is
searched, so freshness sees the real gaps between sessions; ``--clock wall`` uses the wall
clock (every message is seconds old, freshness is a constant).

Baselines on the same questions, in the same run: ``bm25`` (rank_bm25 BM25Okapi, ported
from ``inspect_longmemeval.py``, whitespace tokens) and ``dense`` (the embedder's
normalized vectors, brute-force cosine), both over user turns; plus ``bm25-sessdoc`` and
``dense-sessdoc``, which index each session's user turns joined as one document, the
granularity of the README's published baseline figures (session level only).

``--variant`` adds further memd scorings of the same ingested data (a preset name, or
``key=value,...`` weight overrides on ``--preset``), e.g. ``--variant semantic
--variant keyword=0``. Prints a table and throughput/latency on stdout, progress on
stderr; ``--out`` writes figures plus per-question diagnostics of memd's misses as JSON.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np

import memd
from memd.config import PRESETS, Weights, load_settings
from memd.engine.memory import Memd
from memd.models.embedder import Embedder, FakeEmbedder, MiniLMEmbedder

REPO = Path(__file__).resolve().parent.parent
DATA_ENV = "MEMD_BENCH_LONGMEMEVAL"  # the LongMemEval_S file, when --data is not given
DEFAULT_CACHE = Path.home() / ".cache" / "memd-bench" / "embeddings.sqlite"
KS: tuple[int, ...] = (1, 3, 5, 10)
METRICS: tuple[str, ...] = ("recall_any", "recall_all", "ndcg_any")
LEVELS: tuple[str, ...] = ("session", "strict", "turn")
T = TypeVar("T", bound=Hashable)
TurnKey = tuple[str, int]  # (haystack session id, index of the turn in its session)


# ------------------------------------------------------------------------------ data
def data_path(given: Path | None) -> Path:
    """The LongMemEval_S file: ``given`` (``--data``), else ``$MEMD_BENCH_LONGMEMEVAL``;
    exits with a message saying how to get it when neither names an existing file."""
    raw = str(given) if given is not None else os.environ.get(DATA_ENV, "")
    if not raw:
        raise SystemExit(
            f"LongMemEval_S data not given: pass --data FILE or set {DATA_ENV} to the "
            "longmemeval_s_cleaned .json(.gz) file (bench/README.md says where to get it)"
        )
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        source = "--data" if given is not None else DATA_ENV
        raise SystemExit(f"LongMemEval_S data not found: {source} names {path}, "
                         "which is not a file (bench/README.md says where to get it)")
    return path


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    has_answer: bool = False


@dataclass(frozen=True)
class HaystackSession:
    id: str
    date: float  # epoch seconds (UTC) of the session's haystack date
    turns: tuple[Turn, ...]

    def user_turns(self) -> list[tuple[TurnKey, str]]:
        return [((self.id, i), t.content) for i, t in enumerate(self.turns) if t.role == "user"]


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    text: str
    date: float
    sessions: tuple[HaystackSession, ...]

    @property
    def evidence_turns(self) -> frozenset[TurnKey]:
        """User turns marked ``has_answer`` (the protocol's turn-level targets)."""
        return frozenset(
            (s.id, i) for s in self.sessions for i, t in enumerate(s.turns)
            if t.role == "user" and t.has_answer
        )

    @property
    def evidence_sessions(self) -> frozenset[str]:
        """Sessions holding an evidence user turn (the session-level targets)."""
        return frozenset(sid for sid, _ in self.evidence_turns)

    def user_turns(self) -> list[tuple[TurnKey, str]]:
        return [ut for s in self.sessions for ut in s.user_turns()]


_DATE = re.compile(r"(\d{4})/(\d{2})/(\d{2})\D+?(\d{1,2}):(\d{2})")


def parse_date(text: str) -> float:
    """A LongMemEval date such as ``2023/04/10 (Mon) 10:15`` as epoch seconds, UTC."""
    m = _DATE.search(text)
    if m is None:
        raise ValueError(f"unparseable date {text!r}")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp()


def load_instances(path: Path) -> list[dict[str, Any]]:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data: list[dict[str, Any]] = json.load(f)
    return data


def evaluable(inst: Mapping[str, Any]) -> bool:
    """The official retrieval eval skips abstention and no-user-target questions."""
    if "_abs" in inst["question_id"]:
        return False
    return any(t.get("has_answer") for s in inst["haystack_sessions"] for t in s
               if t["role"] == "user")


def to_question(inst: Mapping[str, Any]) -> Question:
    sessions = tuple(
        HaystackSession(
            sid, parse_date(date),
            tuple(Turn(t["role"], t["content"], bool(t.get("has_answer"))) for t in turns),
        )
        for sid, date, turns in zip(inst["haystack_session_ids"], inst["haystack_dates"],
                                    inst["haystack_sessions"], strict=True)
    )
    return Question(inst["question_id"], inst["question_type"], inst["question"],
                    parse_date(inst["question_date"]), sessions)


def spread(n: int, limit: int | None) -> list[int]:
    """``limit`` indices spread evenly over ``range(n)`` (all of them without a limit).
    The file is grouped by question type, so a prefix would be one or two types."""
    if limit is None or limit >= n:
        return list(range(n))
    return [i * n // limit for i in range(max(limit, 0))]


def interleaved(n: int) -> list[int]:
    """``range(n)`` in golden-ratio order: every prefix is spread over the whole range
    (the file is grouped by question type, so a cut-short run still covers every type)."""
    golden = (math.sqrt(5) - 1) / 2
    return sorted(range(n), key=lambda i: ((i * golden) % 1.0, i))


def load_questions(path: Path, limit: int | None = None, first: bool = False) -> list[Question]:
    """The evaluable questions of a LongMemEval file, in file order: all, or ``limit`` of
    them spread over the file (or the first ``limit`` with ``first``)."""
    insts = [i for i in load_instances(path) if evaluable(i)]
    picked = range(min(limit, len(insts))) if first and limit is not None else spread(
        len(insts), limit)
    return [to_question(insts[i]) for i in picked]


# --------------------------------------------------------------------------- metrics
def dcg(rels: Sequence[float]) -> float:
    """Discounted cumulative gain: sum of rel_i / log2(i + 2), i from 0."""
    return sum(r / math.log2(i + 2) for i, r in enumerate(rels) if r)


def recall_any(ranked: Sequence[T], relevant: Collection[T], k: int) -> float:
    """1.0 if any relevant item is in the top ``k``."""
    top = set(ranked[:k])
    return float(any(r in top for r in relevant))


def recall_all(ranked: Sequence[T], relevant: Collection[T], k: int) -> float:
    """1.0 if every relevant item is in the top ``k`` (and there is at least one)."""
    top = set(ranked[:k])
    return float(bool(relevant) and all(r in top for r in relevant))


def ndcg_any(ranked: Sequence[T], relevant: Collection[T], k: int) -> float:
    """Binary-relevance nDCG@k; the ideal ranks every relevant item first."""
    ideal = dcg([1.0] * min(len(relevant), k))
    if not ideal:
        return 0.0
    return dcg([1.0 if d in relevant else 0.0 for d in ranked[:k]]) / ideal


def dedupe(items: Iterable[T]) -> list[T]:
    """Items in first-seen order without repeats."""
    return list(dict.fromkeys(items))


def metrics_at(
    ranked: Sequence[T], relevant: Collection[T], ks: Sequence[int] = KS
) -> dict[str, float]:
    """``{"recall_any@1": ..., "ndcg_any@10": ...}`` for one ranking."""
    out: dict[str, float] = {}
    for name, fn in (("recall_any", recall_any), ("recall_all", recall_all),
                     ("ndcg_any", ndcg_any)):
        for k in ks:
            out[f"{name}@{k}"] = fn(ranked, relevant, k)
    return out


def evaluate_turns(
    ranked: Sequence[TurnKey], evidence: Collection[TurnKey], ks: Sequence[int] = KS
) -> dict[str, dict[str, float]]:
    """Turn- and session-level metrics of a ranking of user turns.

    ``session``: a turn hit counts for its session (the protocol as the README states
    it). ``strict``: the paper code's turn-to-session mapping, where a non-evidence turn
    of an evidence session is relabelled (``noans_...``) and so stands for a different,
    irrelevant session; only evidence turns find their session. Both deduplicate in rank
    order; nDCG is computed on the deduplicated list."""
    targets = {sid for sid, _ in evidence}
    strict = (sid if sid not in targets or (sid, i) in evidence else f"noans:{sid}"
              for sid, i in ranked)
    return {
        "session": metrics_at(dedupe(sid for sid, _ in ranked), targets, ks),
        "strict": metrics_at(dedupe(strict), targets, ks),
        "turn": metrics_at(ranked, evidence, ks),
    }


def mean_metrics(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-key means over questions."""
    return {key: statistics.fmean(r[key] for r in rows) for key in rows[0]} if rows else {}


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


# ------------------------------------------------------------------------- baselines
class BM25Okapi:
    """rank_bm25.BM25Okapi's scoring (k1=1.5, b=0.75, epsilon=0.25), stdlib only;
    ported from ``inspect_longmemeval.py``."""

    def __init__(self, corpus: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75,
                 epsilon: float = 0.25) -> None:
        self.k1, self.b = k1, b
        self.tf = [collections.Counter(d) for d in corpus]
        self.dl = [len(d) for d in corpus]
        self.avgdl = sum(self.dl) / len(corpus)
        df = collections.Counter(w for d in self.tf for w in d)
        n = len(corpus)
        self.idf = {w: math.log(n - f + 0.5) - math.log(f + 0.5) for w, f in df.items()}
        eps = epsilon * sum(self.idf.values()) / len(self.idf)
        for w, v in self.idf.items():
            if v < 0:
                self.idf[w] = eps

    def get_scores(self, query: Sequence[str]) -> list[float]:
        k1, b, avg = self.k1, self.b, self.avgdl
        return [
            sum(self.idf.get(w, 0.0) * tf.get(w, 0) * (k1 + 1)
                / (tf.get(w, 0) + k1 * (1 - b + b * dl / avg)) for w in query)
            for tf, dl in zip(self.tf, self.dl, strict=True)
        ]


def rank_desc(scores: Sequence[float]) -> list[int]:
    """Indices by descending score, ties towards the later index (``argsort()[::-1]``)."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], -i))


def bm25_rank(docs: Sequence[str], query: str) -> list[int]:
    """BM25 ranking of ``docs`` for ``query``, whitespace tokens as in the paper's code."""
    return rank_desc(BM25Okapi([d.split(" ") for d in docs]).get_scores(query.split(" ")))


def dense_rank(doc_vecs: np.ndarray, query_vec: np.ndarray) -> list[int]:
    """Cosine ranking (rows are unit length, so a dot product), best first."""
    return rank_desc((doc_vecs @ query_vec).tolist())


def session_docs(q: Question) -> list[tuple[str, str]]:
    """Each session's user turns joined with spaces (the paper's session granularity)."""
    return [(s.id, " ".join(t for _, t in s.user_turns())) for s in q.sessions]


class VectorCache:
    """A persistent ``text -> vector`` store for the benchmark (one SQLite file, keyed by
    model name and the text's BLAKE2b hash), shared by memd's ingestion and the
    baselines and across runs: the vectors are the model's own, so a cached run scores
    exactly like an uncached one, and re-runs (tuning, variants) skip the model."""

    def __init__(self, path: Path, model: str, dim: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.model, self.dim = path, f"{model}/{dim}", dim
        self._db = sqlite3.connect(path, timeout=60.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, "
                         "key BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model, key))")
        self._db.commit()

    def get(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            chunk = unique[start:start + 500]
            rows = self._db.execute(
                f"SELECT key, vector FROM vectors WHERE model = ? AND key IN "
                f"({', '.join('?' * len(chunk))})", (self.model, *chunk))
            for key, blob in rows:
                out[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO vectors (model, key, vector) VALUES (?, ?, ?)",
            [(self.model, k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items])
        self._db.commit()

    def close(self) -> None:
        self._db.close()


class RecordingEmbedder:
    """Wraps an embedder; remembers the vectors of texts registered with :meth:`want`
    (or :meth:`prefetch`), so the dense baseline reuses the vectors memd computed for the
    same user turns. With a :class:`VectorCache`, vectors also come from and go to disk.

    :meth:`prefetch` embeds a question's texts before memd ingests them: one model call
    over every text not cached yet, which the embedder sorts by length and batches (memd's
    jobs embed one session at a time); memd then gets the very same vectors through its
    public API, from the memo."""

    def __init__(self, inner: Embedder, cache: VectorCache | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.cache = cache
        self._wanted: set[bytes] = set()
        self._memo: dict[bytes, np.ndarray] = {}
        self.texts_embedded = 0  # texts sent to the model
        self.cache_hits = 0  # texts read from the disk cache
        self.model_s = 0.0  # time spent in the model

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def want(self, texts: Iterable[str]) -> None:
        self._wanted.update(self._key(t) for t in texts)

    def forget(self) -> None:
        self._wanted.clear()
        self._memo.clear()

    def _model(self, texts: Sequence[str]) -> np.ndarray:
        t0 = time.perf_counter()
        vecs = self.inner.embed(texts)
        self.model_s += time.perf_counter() - t0
        self.texts_embedded += len(texts)
        return vecs

    def prefetch(self, texts: Iterable[str], chunk: int = 1024) -> None:
        """Want ``texts`` and have all their vectors at hand (memo, disk cache, model)."""
        by_key = {self._key(t): t for t in texts}
        self._wanted.update(by_key)
        todo = [k for k in by_key if k not in self._memo]
        if self.cache is not None and todo:
            found = self.cache.get(todo)
            self.cache_hits += len(found)
            self._memo.update(found)
            todo = [k for k in todo if k not in found]
        todo.sort(key=lambda k: len(by_key[k]))
        for start in range(0, len(todo), chunk):
            keys = todo[start:start + chunk]
            vecs = self._model([by_key[k] for k in keys])
            self._memo.update(zip(keys, vecs, strict=True))
            if self.cache is not None:
                self.cache.put(zip(keys, vecs, strict=True))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries on the inner embedder's query model (as the daemon embeds them), not
        remembered: they are not what a baseline compares."""
        query_model = getattr(self.inner, "embed_queries", None)
        return query_model(texts) if query_model is not None else self.embed(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._memo]
        if self.cache is not None and todo:  # e.g. memories memd extracted from the turns
            found = self.cache.get([keys[i] for i in todo])
            self.cache_hits += len(found)
            self._wanted.update(found)
            self._memo.update(found)
            todo = [i for i in todo if keys[i] not in found]
        fresh = self._model([texts[i] for i in todo]) if todo else None
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for j, i in enumerate(todo):
            assert fresh is not None
            out[i] = fresh[j]
            if keys[i] in self._wanted:
                self._memo[keys[i]] = fresh[j]
        if self.cache is not None and fresh is not None:
            self.cache.put((keys[i], fresh[j]) for j, i in enumerate(todo))
        for i, k in enumerate(keys):
            if k in self._memo:
                out[i] = self._memo[k]
        return out


def make_embedder(name: str) -> Embedder:
    """The benchmark's model: MiniLM on onnxruntime (default; the torch model's vectors
    within 1e-6), on torch, or the fake hash embedder."""
    if name == "minilm-onnx":
        from memd.models.onnx_embedder import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(document_precision=document_precision())
    return MiniLMEmbedder() if name == "minilm" else FakeEmbedder()


def document_precision() -> str:
    """The stored texts' model for the benchmarks (``MEMD_DOCUMENT_PRECISION``, as the
    daemon's setting), the exact one unless it is set (the daemon's default is
    ``int8-mixed``): the shared ``--cache`` holds the exact model's vectors, so a run on
    a quantized copy needs a cache of its own."""
    return os.environ.get("MEMD_DOCUMENT_PRECISION", "float32")


# ------------------------------------------------------------------------------ memd
class SimClock:
    """A settable clock for ``memd.open(clock=...)``: ``None`` means the wall clock."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self) -> float:
        return time.time() if self.at is None else self.at


@dataclass
class Ingested:
    """What ingesting one question's haystack produced."""

    user_id: str
    turns: int
    append_s: float
    jobs_s: float
    by_message: dict[str, TurnKey] = field(default_factory=dict)


def ingest(engine: Memd, q: Question, clock: SimClock, sim_time: bool) -> Ingested:
    """One fresh user; one memd session per haystack session (in date order when the
    clock is simulated), its turns appended in one call; then the background jobs."""
    user = f"q-{q.id}"
    res = Ingested(user, 0, 0.0, 0.0)
    order = sorted(q.sessions, key=lambda s: s.date) if sim_time else list(q.sessions)
    t0 = time.perf_counter()
    for hs in order:
        if sim_time:
            clock.at = hs.date
        session = engine.create_session(user, metadata={"haystack_session_id": hs.id})
        msgs = [
            {"role": t.role, "content": t.content,
             "metadata": {"haystack_session_id": hs.id, "turn": i}}
            for i, t in enumerate(hs.turns)
        ]
        for i, msg in enumerate(engine.append(session.id, user, msgs)):
            res.by_message[msg.id] = (hs.id, i)
        res.turns += len(msgs)
    t1 = time.perf_counter()
    if sim_time:  # now = the question's date (a few sessions are dated after it)
        clock.at = max([q.date, *(s.date for s in q.sessions)])
    while engine.run_jobs():
        pass
    res.append_s, res.jobs_s = t1 - t0, time.perf_counter() - t1
    return res


@dataclass
class MemdResult:
    ranked: list[TurnKey]
    hits: list[dict[str, Any]]  # user-role hits: turn, score, breakdown
    user_hits: int
    total_hits: int
    latency_ms: float
    metadata_mismatches: int


def memd_search(engine: Memd, q: Question, ing: Ingested, k: int) -> MemdResult:
    """Search the question; keep user-role message hits, mapped to haystack turns."""
    t0 = time.perf_counter()
    hits = engine.search(q.text, ing.user_id, k=k, kinds=["message"])
    latency = (time.perf_counter() - t0) * 1000
    ranked: list[TurnKey] = []
    rows: list[dict[str, Any]] = []
    mismatches = 0
    for h in hits:
        if h.kind != "message" or h.metadata.get("role") != "user":
            continue
        key = ing.by_message[h.id]
        tagged = (h.metadata.get("haystack_session_id"), h.metadata.get("turn"))
        mismatches += tagged != key
        ranked.append(key)
        rows.append({"turn": list(key), "score": round(h.score, 4),
                     "breakdown": {n: round(v, 4) for n, v in h.breakdown.items()}})
    return MemdResult(ranked, rows, len(ranked), len(hits), latency, mismatches)


@dataclass(frozen=True)
class Variant:
    """Another memd scoring of the same ingested data.

    ``engine`` variants call ``Memd.search`` with other weights (and search ``k``);
    ``fix`` variants re-rank the engine's own channel outputs in the harness (only user
    turns compete, every candidate with its true cosine), see :func:`fixed_rank`."""

    label: str
    weights: Weights
    k: int
    fix: bool = False


def parse_variant(spec: str, base: str, k: int) -> Variant:
    """``semantic`` (a preset), ``keyword=0,freshness=0`` (overrides on ``base``; ``k=N``
    sets the search k / channel size), either prefixed with ``fix:`` for a harness-side
    fixed scoring."""
    fix = spec.startswith("fix:")
    body = spec.removeprefix("fix:")
    weights = PRESETS[base]
    known = {f.name for f in fields(Weights)}
    changes: dict[str, float] = {}
    for part in filter(None, body.split(",")):
        name, eq, value = (x.strip() for x in part.partition("="))
        if not eq:
            if name not in PRESETS:
                raise SystemExit(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})")
            weights = PRESETS[name]
        elif name == "k":
            k = int(value)
        elif name in known:
            changes[name] = float(value)
        else:
            raise SystemExit(f"unknown weight {name!r} (known: k, {', '.join(sorted(known))})")
    return Variant(f"{'fix' if fix else 'memd'}[{body or base}]", replace(weights, **changes),
                   k, fix)


@dataclass(frozen=True)
class Candidate:
    """One user turn as memd's message channels see it for a query."""

    key: TurnKey
    cosine: float  # true cosine with the query
    knn_rank: int  # rank in the vector channel over ALL the user's messages (0 = best)
    keyword: float  # FTS5 BM25 / best BM25 of the query, 0.0 if no term matches
    keyword_rank: int | None  # rank in the keyword channel over all messages
    hours: float  # age at search time


def candidates(engine: Memd, q: Question, ing: Ingested, role: str = "user") -> list[Candidate]:
    """Every user turn (or assistant turn) with its vector and keyword channel standing,
    from the store (the channels memd's ``score_messages`` draws from, asked for all the
    user's messages instead of the top ``k``)."""
    qvec = engine.embedder.embed_query(q.text)
    n = len(ing.by_message)
    now = engine.now()
    knn = engine.store.nearest_messages(ing.user_id, qvec, n)
    kw = {m.id: (i, rel) for i, (m, rel) in
          enumerate(engine.store.keyword_messages(ing.user_id, q.text, n))}
    out = []
    for rank, (msg, cos) in enumerate(knn):
        if msg.role != role:
            continue
        kw_rank, rel = kw.get(msg.id, (None, 0.0))
        out.append(Candidate(ing.by_message[msg.id], cos, rank, rel, kw_rank,
                             max(0.0, (now - msg.created_at) / 3600)))
    return out


def fixed_scores(cands: Sequence[Candidate], w: Weights, k: int,
                 true_cosine: bool = True) -> list[tuple[TurnKey, float]]:
    """User turns with memd's message score, best first (ties by turn key).

    The pool is the engine's: the top ``k`` of the vector channel and of the keyword
    channel (both over all messages). Each candidate scores ``w.similarity * max(cos, 0)
    + w.keyword * keyword + w.freshness * exp(-lambda * hours)``; authority, importance,
    access and entity are the same constant for every message, so they are left out.
    With ``true_cosine`` a keyword-only candidate gets its real cosine, as in the engine
    (which reads its vector from the embedding cache), and this reproduces ``Memd.search``
    over messages (up to the order of exact ties, which the engine breaks by random
    message id, and its top-k cut); ``true_cosine=False`` scores it 0, as the engine did
    before."""
    scored = []
    for c in cands:
        in_knn = c.knn_rank < k
        in_kw = c.keyword_rank is not None and c.keyword_rank < k
        if not (in_knn or in_kw):
            continue
        sim = c.cosine if (in_knn or true_cosine) else 0.0
        total = (w.similarity * max(sim, 0.0) + w.keyword * (c.keyword if in_kw else 0.0)
                 + w.freshness * math.exp(-w.freshness_lambda * c.hours))
        scored.append((c.key, total))
    return sorted(scored, key=lambda t: (-t[1], t[0]))


def fixed_rank(cands: Sequence[Candidate], w: Weights, k: int,
               true_cosine: bool = True) -> list[TurnKey]:
    """The turn keys of :func:`fixed_scores`, best first."""
    return [key for key, _ in fixed_scores(cands, w, k, true_cosine)]


def same_up_to_ties(ranked: Sequence[TurnKey], scored: Sequence[tuple[TurnKey, float]]) -> bool:
    """Whether ``ranked`` is ``scored``'s order, except among items of equal score."""
    score = dict(scored)
    return all(key in score for key in ranked) and [
        round(score[key], 9) for key in ranked] == [round(s, 9) for _, s in scored[:len(ranked)]]


# --------------------------------------------------------------------------- running
@dataclass
class Run:
    """Per-method per-question metrics and memd's timing, filled question by question."""

    per_question: dict[str, list[dict[str, dict[str, float]]]] = field(
        default_factory=lambda: collections.defaultdict(list))
    types: list[str] = field(default_factory=list)
    ingest_turns: int = 0
    append_s: float = 0.0
    jobs_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    user_hits: list[int] = field(default_factory=list)
    mismatches: int = 0
    replica_agree: int = 0  # questions where fixed_scores ~ Memd.search (passages off, age always)
    misses: list[dict[str, Any]] = field(default_factory=list)
    prefetch_s: float = 0.0  # embedding every question's texts before memd ingests them
    embedder: RecordingEmbedder | None = None

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = {}
        for method, rows in self.per_question.items():
            out[method] = {lvl: mean_metrics([r[lvl] for r in rows])
                           for lvl in LEVELS if lvl in rows[0]}
        return out

    def by_type(self, metric: str) -> dict[str, dict[str, float]]:
        """``{method: {question_type: mean session-level metric}}``."""
        out: dict[str, dict[str, float]] = {}
        for method, rows in self.per_question.items():
            groups: dict[str, list[float]] = collections.defaultdict(list)
            for qt, r in zip(self.types, rows, strict=True):
                groups[qt].append(r["session"][metric])
            out[method] = {qt: round(statistics.fmean(v), 3) for qt, v in sorted(groups.items())}
        return out


def diagnose(q: Question, res: MemdResult, dense: Sequence[TurnKey],
             scores: Mapping[str, dict[str, float]]) -> dict[str, Any] | None:
    """Why memd missed (session recall_all@5 or turn recall_any@5 failed): where the
    evidence turns landed in memd's and the dense ranking, and the top-5 breakdowns."""
    if scores["session"]["recall_all@5"] and scores["turn"]["recall_any@5"]:
        return None
    evidence = q.evidence_turns
    pos = {key: i for i, key in enumerate(res.ranked)}
    dense_pos = {key: i for i, key in enumerate(dense)}
    return {
        "question_id": q.id, "type": q.type, "question": q.text,
        "evidence": [
            {"turn": list(e), "memd_rank": pos.get(e), "dense_rank": dense_pos.get(e),
             "breakdown": res.hits[pos[e]]["breakdown"] if e in pos else None}
            for e in sorted(evidence)
        ],
        "top5": [{**h, "evidence": tuple(h["turn"]) in evidence} for h in res.hits[:5]],
    }


def run(
    questions: Sequence[Question], embedder_name: str, preset: str, variants: Sequence[str],
    k: int, sim_time: bool, with_sessdoc: bool, log: Callable[[str], None],
    dump: TextIO | None = None, cache_path: Path | None = None,
    resumed: Sequence[Mapping[str, Any]] = (),
) -> Run:
    """Ingest and evaluate every question with memd and the baselines; ``resumed`` are
    the dump rows of questions an earlier run finished (their metrics count, they are
    not run again)."""
    inner = make_embedder(embedder_name)
    cache = VectorCache(cache_path, inner.name, inner.dim) if cache_path else None
    emb = RecordingEmbedder(inner, cache)
    clock = SimClock()
    parsed = [parse_variant(v, preset, k) for v in variants]
    out = Run(embedder=emb)
    for row in resumed:
        out.types.append(row["type"])
        for method, scores in row["metrics"].items():
            out.per_question[method].append(scores)
    finished = {row["id"] for row in resumed}
    questions = [q for q in questions if q.id not in finished]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memd-longmemeval-") as tmp:
        # A few haystack turns are longer than memd's default message limit (32,000
        # characters; the longest user turn in LongMemEval_S has 76,560): raise the limit
        # (a setting) rather than drop or cut evidence.
        longest = max((len(t.content) for q in questions for s in q.sessions for t in s.turns),
                      default=0)
        limit = max(load_settings().max_text_chars, longest)
        if limit > load_settings().max_text_chars:
            log(f"max_text_chars raised to {limit} (the longest haystack turn)")
        engine = memd.open(Path(tmp), embedder=emb, clock=clock, preset=preset,
                           max_text_chars=limit)
        others = [(v, Memd(engine.store, engine.embedder,
                           replace(engine.settings, weights=v.weights), clock))
                  for v in parsed]
        # fixed_scores models one vector per message, age counted for every question and
        # the keyword part whole: its agreement is checked against memd searching that way
        replicated = Memd(engine.store, engine.embedder,
                          replace(engine.settings, search_passages=False,
                                  search_message_freshness="always",
                                  search_keyword_agreement=False), clock)
        try:
            for n, q in enumerate(questions, 1):
                emb.forget()
                user_turns = q.user_turns()
                docs = session_docs(q)
                t_pre = time.perf_counter()
                emb.prefetch([t.content for s in q.sessions for t in s.turns if t.content]
                             + [q.text] + ([d for _, d in docs] if with_sessdoc else []))
                out.prefetch_s += time.perf_counter() - t_pre
                clock.at = None
                ing = ingest(engine, q, clock, sim_time)
                res = memd_search(engine, q, ing, k)
                ev = q.evidence_turns
                out.types.append(q.type)
                scores = evaluate_turns(res.ranked, ev)
                out.per_question["memd"].append(scores)
                cands = candidates(engine, q, ing)
                out.replica_agree += same_up_to_ties(
                    memd_search(replicated, q, ing, k).ranked,
                    fixed_scores(cands, engine.settings.weights, k))
                for v, other in others:
                    ranked = (fixed_rank(cands, v.weights, v.k) if v.fix
                              else memd_search(other, q, ing, v.k).ranked)
                    out.per_question[v.label].append(evaluate_turns(ranked, ev))
                clock.at = None
                keys = [key for key, _ in user_turns]
                texts = [t for _, t in user_turns]
                bm25 = [keys[i] for i in bm25_rank(texts, q.text)]
                out.per_question["bm25"].append(evaluate_turns(bm25, ev))
                qvec = emb.embed([q.text])[0]
                dense = [keys[i] for i in dense_rank(emb.embed(texts), qvec)]
                out.per_question["dense"].append(evaluate_turns(dense, ev))
                sids = [sid for sid, _ in docs]
                bodies = [d for _, d in docs]
                out.per_question["bm25-sessdoc"].append({"session": metrics_at(
                    [sids[i] for i in bm25_rank(bodies, q.text)], q.evidence_sessions)})
                if with_sessdoc:
                    out.per_question["dense-sessdoc"].append({"session": metrics_at(
                        [sids[i] for i in dense_rank(emb.embed(bodies), qvec)],
                        q.evidence_sessions)})
                out.ingest_turns += ing.turns
                out.append_s += ing.append_s
                out.jobs_s += ing.jobs_s
                out.latencies_ms.append(res.latency_ms)
                out.user_hits.append(res.user_hits)
                out.mismatches += res.metadata_mismatches
                if dump is not None:  # one line per question: a cut-short run still counts
                    dump.write(json.dumps({
                        "id": q.id, "type": q.type, "evidence": sorted(ev),
                        "turns": ing.turns, "ingest_s": round(ing.append_s + ing.jobs_s, 2),
                        "search_ms": round(res.latency_ms, 2), "memd": res.ranked,
                        "metrics": {m: rows[-1] for m, rows in out.per_question.items()},
                        "candidates": [[*c.key, round(c.cosine, 5), c.knn_rank,
                                        round(c.keyword, 5), c.keyword_rank, round(c.hours, 3)]
                                       for c in cands],
                        "assistant": [[*c.key, round(c.cosine, 5), c.knn_rank,
                                       round(c.keyword, 5), c.keyword_rank, round(c.hours, 3)]
                                      for c in candidates(engine, q, ing, "assistant")],
                    }) + "\n")
                    dump.flush()
                miss = diagnose(q, res, dense, scores)
                if miss is not None:
                    out.misses.append(miss)
                elapsed = time.perf_counter() - started
                log(f"[{n}/{len(questions)}] {q.id} {q.type}: {ing.turns} turns, "
                    f"ingest {ing.append_s + ing.jobs_s:.1f}s, search {res.latency_ms:.0f}ms, "
                    f"{res.user_hits} user hits; memd session all@5 "
                    f"{scores['session']['recall_all@5']:.0f} turn any@5 "
                    f"{scores['turn']['recall_any@5']:.0f}; "
                    f"elapsed {elapsed:.0f}s, eta {elapsed / n * (len(questions) - n):.0f}s")
        finally:
            engine.close()  # the variants share its store
            if cache is not None:
                cache.close()
    return out


# ---------------------------------------------------------------------------- output
def format_table(summary: Mapping[str, Mapping[str, Mapping[str, float]]],
                 ks: Sequence[int] = KS) -> str:
    """Method × level × metric rows, one column per k."""
    width = max([len("method"), *map(len, summary)])
    head = f"{'method':<{width}} {'level':<8} {'metric':<11}" + "".join(
        f"{'@' + str(k):>8}" for k in ks)
    lines = [head, "-" * len(head)]
    for method, levels in summary.items():
        for level in LEVELS:
            if level not in levels:
                continue
            for metric in METRICS:
                lines.append(f"{method:<{width}} {level:<8} {metric:<11}" + "".join(
                    f"{levels[level][f'{metric}@{k}']:>8.3f}" for k in ks))
    return "\n".join(lines)


def compare(summary: Mapping[str, Mapping[str, Mapping[str, float]]],
            method: str = "memd", baselines: Sequence[str] = ("bm25", "dense")) -> list[str]:
    """Cells where ``method`` is below the better turn-index baseline."""
    out = []
    for level in LEVELS:
        for key, value in summary[method][level].items():
            best_name = max(baselines, key=lambda b: summary[b][level][key])
            best = summary[best_name][level][key]
            if value + 1e-9 < best:
                out.append(f"{level} {key}: memd {value:.3f} < {best_name} {best:.3f}")
    return out


def plot(summary: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path,
         title: str, ks: Sequence[int] = KS) -> None:
    """recall_any@k and recall_all@k against k, session and turn level, one line per
    method (session-document baselines dashed, session level only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5), sharex=True)
    for row, level in enumerate(("session", "turn")):
        for col, metric in enumerate(("recall_any", "recall_all")):
            ax = axes[row][col]
            for method, levels in summary.items():
                if level not in levels:
                    continue
                ys = [levels[level][f"{metric}@{k}"] for k in ks]
                ax.plot(ks, ys, marker="o", label=method,
                        linestyle="--" if "sessdoc" in method else "-",
                        linewidth=2.5 if method == "memd" else 1.2)
            ax.set_title(f"{level} level, {metric}@k")
            ax.set_xticks(list(ks))
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("k")
    axes[0][0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TARGETS = (("session", "recall_any@5", 0.98), ("session", "recall_all@5", 0.90),
           ("turn", "recall_any@5", 0.88))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None,
                    help=f"LongMemEval_S .json(.gz) (default: ${DATA_ENV})")
    ap.add_argument("--limit", type=int,
                    help="evaluate N questions spread evenly over the file (all types)")
    ap.add_argument("--first", action="store_true", help="with --limit: the first N instead")
    ap.add_argument("--embedder", default="minilm-onnx",
                    choices=["minilm-onnx", "minilm", "fake"],
                    help="MiniLM on onnxruntime (default), on torch, or the fake hash model")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="persistent embedding cache shared by memd's ingestion and the "
                    "baselines (default %(default)s; not used with the fake embedder)")
    ap.add_argument("--no-cache", action="store_true", help="embed everything afresh")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS),
                    help="memd retrieval weights preset")
    ap.add_argument("--variant", action="append", default=[],
                    help="also score memd with a preset or 'weight=value,...' overrides")
    ap.add_argument("--k", type=int, default=50, help="memd search k (over-fetch; "
                    "assistant hits are dropped)")
    ap.add_argument("--clock", default="haystack", choices=["haystack", "wall"],
                    help="engine clock while ingesting and searching")
    ap.add_argument("--no-sessdoc", action="store_true",
                    help="skip the dense session-document baseline (saves embedding time)")
    ap.add_argument("--out", type=Path, help="write figures and memd's misses as JSON")
    ap.add_argument("--dump", type=Path, help="write every question's user-turn channel "
                    "data (cosine, ranks, keyword score, age) as JSON lines, for re-scoring")
    ap.add_argument("--plot", type=Path, help="write recall_any@k and recall_all@k vs k "
                    "(memd vs baselines) as a PNG (needs matplotlib)")
    ap.add_argument("--interleave", action="store_true", help="run the questions in an "
                    "order whose every prefix spreads over the file (for long runs)")
    ap.add_argument("--resume", action="store_true", help="with --dump: keep the questions "
                    "already in the dump (their metrics count) and append the others")
    ap.add_argument("--report", action="store_true", help="with --resume: only report the "
                    "dump's figures (--out, --plot), run no question")
    ap.add_argument("--quick", action="store_true", help="= --limit 5 --embedder fake (CI)")
    args = ap.parse_args(argv)
    if args.quick:
        args.limit, args.embedder = 5, "fake"
    args.data = data_path(args.data)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    questions = load_questions(args.data, args.limit, args.first)
    if args.interleave:
        questions = [questions[i] for i in interleaved(len(questions))]
    log(f"{len(questions)} evaluable questions from {args.data.name} "
        f"({time.perf_counter() - t0:.1f}s to load)")
    with contextlib.ExitStack() as stack:
        resumed: list[dict[str, Any]] = []
        if args.report:
            args.resume = True
        if args.resume and args.dump and args.dump.exists():
            wanted = {q.id for q in questions}
            resumed = [r for r in map(json.loads, args.dump.read_text().splitlines())
                       if r["id"] in wanted]
            log(f"resuming: {len(resumed)} questions already in {args.dump}")
        if args.report:  # figures of the dump's questions only; run nothing
            done = {r["id"] for r in resumed}
            questions = [q for q in questions if q.id in done]
        mode = "a" if args.resume else "w"
        dump = stack.enter_context(args.dump.open(mode)) if args.dump else None
        cache = None if args.no_cache or args.embedder == "fake" else args.cache
        result = run(questions, args.embedder, args.preset, args.variant, args.k,
                     args.clock == "haystack", not args.no_sessdoc, log, dump, cache,
                     resumed)
    wall = time.perf_counter() - t0
    summary = result.summary()
    ingest_s = result.append_s + result.jobs_s
    throughput = {
        "turns": result.ingest_turns,
        "turns_per_s": round(result.ingest_turns / ingest_s, 1) if ingest_s else None,
        "append_turns_per_s": round(result.ingest_turns / result.append_s, 1)
        if result.append_s else None,
        "append_s": round(result.append_s, 1), "jobs_s": round(result.jobs_s, 1),
    }
    emb = result.embedder
    model = {
        "cache": str(cache) if cache else None,
        "prefetch_s": round(result.prefetch_s, 1),
        "texts_embedded": emb.texts_embedded if emb else 0,
        "cache_hits": emb.cache_hits if emb else 0,
        "model_s": round(emb.model_s, 1) if emb else 0.0,
        "texts_per_s": round(emb.texts_embedded / emb.model_s, 1)
        if emb and emb.model_s else None,
    }
    ran = len(result.latencies_ms)  # questions run by this process (not resumed)
    latency = {"p50_ms": round(percentile(result.latencies_ms, 50), 1) if ran else None,
               "p95_ms": round(percentile(result.latencies_ms, 95), 1) if ran else None}
    print(f"LongMemEval_S, {len(result.types)} questions ({ran} run now), "
          f"embedder={args.embedder}, "
          f"preset={args.preset}, k={args.k}, clock={args.clock}")
    print(format_table(summary))
    print()
    if ran:
        print(f"embedding ({args.embedder}): {model['texts_embedded']} texts through the "
              f"model in {model['model_s']} s ({model['texts_per_s']} texts/s), "
              f"{model['cache_hits']} from the cache {model['cache']}; prefetch "
              f"{model['prefetch_s']} s")
        print(f"memd ingest (append + embedding/extraction jobs, vectors prefetched): "
              f"{throughput['turns']} turns, {throughput['turns_per_s']} turns/s (append "
              f"alone {throughput['append_turns_per_s']} turns/s)")
        print(f"memd search latency (query embedding included): p50 {latency['p50_ms']} ms, "
              f"p95 {latency['p95_ms']} ms; user hits per search: min {min(result.user_hits)}, "
              f"mean {statistics.fmean(result.user_hits):.1f} of k={args.k}")
        print(f"harness replica of memd's message scoring (passages off, age always) "
              f"agrees on {result.replica_agree}/"
              f"{ran} questions")
    if result.mismatches:
        print(f"WARNING: {result.mismatches} hits whose metadata disagreed with the id map")
    below = compare(summary)
    print("\nmemd below the better of bm25/dense (turn index): "
          + ("none" if not below else f"{len(below)} cells"))
    for line in below:
        print(f"  {line}")
    for level, key, target in TARGETS:
        got = summary["memd"][level][key]
        print(f"target {level} {key} >= {target}: {got:.3f} {'ok' if got >= target else 'MISS'}")
    print(f"total wall time {wall:.0f}s")
    earlier = None
    if resumed:  # what the dump says about the questions run before
        ms = [float(r["search_ms"]) for r in resumed]
        earlier = {"questions": len(resumed), "turns": sum(int(r["turns"]) for r in resumed),
                   "ingest_s": round(sum(float(r["ingest_s"]) for r in resumed), 1),
                   "search_p50_ms": round(percentile(ms, 50), 1),
                   "search_p95_ms": round(percentile(ms, 95), 1)}
        print(f"from the dump ({len(resumed)} questions): {earlier['turns']} turns ingested "
              f"in {earlier['ingest_s']} s (vectors prefetched); search p50 "
              f"{earlier['search_p50_ms']} ms, p95 {earlier['search_p95_ms']} ms")
    if args.out:
        args.out.write_text(json.dumps({
            "config": {"data": args.data.name, "questions": len(result.types),
                       "questions_run": ran,
                       "embedder": args.embedder, "preset": args.preset,
                       "weights": asdict(PRESETS[args.preset]), "variants": args.variant,
                       "k": args.k, "clock": args.clock, "first": args.first,
                       "date": datetime.now(UTC).isoformat()},
            "summary": summary,
            "session_recall_all@5_by_type": result.by_type("recall_all@5"),
            "memd_ingest": throughput if ran else None, "embedding": model if ran else None,
            "memd_search_latency": latency if ran else None,
            "wall_s": round(wall, 1), "resumed_from_dump": earlier, "below_baseline": below,
            "memd_misses": result.misses,
        }, indent=1))
        log(f"wrote {args.out}")
    if args.plot:
        plot(summary, args.plot, f"LongMemEval_S, {len(result.types)} questions")
        log(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
