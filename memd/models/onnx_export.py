"""Making the ONNX files: the export of the transformer with mean pooling (needs torch,
once) and the int8 copy the queries run on.

Build-time code, apart from the runtime embedder: nothing here runs once the files are
cached, and torch, transformers and onnx are imported only here.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from memd.errors import ModelError
from memd.models.onnx_model import _INPUTS, _OPSET, _ModelSpec, _ort_errors, _session, _unit


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
