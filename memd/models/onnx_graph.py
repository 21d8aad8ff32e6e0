"""The BERT encoder with mean pooling written as an ONNX graph from the weights alone.

Why: the daemon runs the model on onnxruntime, and the graph can be written straight from
``model.safetensors`` with NumPy and ``onnx.helper``, so neither the user's install nor
the daemon needs torch. The graph is what HF ``BertModel`` computes (eager attention,
absolute positions, GELU with erf) followed by sentence-transformers' mean pooling over
the attention mask, in plain ONNX ops; onnxruntime fuses its layer norms, GELUs and
attention into its own kernels when it loads the graph.

Two forms of the same graph: ``transposed=True`` holds the dense weights as MatMul wants
them, (in, out), all inside the file (what the int8 quantizer reads); ``transposed=False``
keeps every weight exactly as the safetensors file stores it (dense ones go through a
``Transpose`` that onnxruntime folds on load), so :func:`point_at_weights` can make the
file refer to the weights instead of copying them (a few KB instead of 90 MB).

Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x sequence);
output ``sentence_embedding`` (float, batch x hidden), not normalized.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from memd.errors import ModelError

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
           "I32": np.int32}


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of a ``.safetensors`` file and where its data starts.

    The format is an 8-byte little-endian header length, a JSON header mapping each name
    to its dtype, shape and byte range in the data, then the raw little-endian data.
    """
    try:
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read the weights {path} ({exc})") from exc
    if not isinstance(header, dict):
        raise ModelError(f"cannot read the weights {path} (not a safetensors header)")
    header.pop("__metadata__", None)
    return header, 8 + size


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as NumPy arrays (float ones as float32)."""
    header, start = _header(path)
    try:
        data = path.read_bytes()[start:]
    except OSError as exc:
        raise ModelError(f"cannot read the weights {path} ({exc})") from exc
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":  # the high half of a float32
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] in _DTYPES:
            array = np.frombuffer(raw, np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        else:
            raise ModelError(f"{path}: tensor {name} has dtype {info['dtype']}")
        array = array.reshape(info["shape"])
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        tensors[name] = array
    return tensors


def point_at_weights(model: Any, weights: Path, location: str) -> int:
    """Make every initializer of ``model`` that the safetensors file ``weights`` holds
    byte for byte refer to it as ONNX external data (``location``: the file's name
    relative to the model file, which onnxruntime requires to sit in the same
    directory). The number of initializers moved out."""
    from onnx import TensorProto

    header, start = _header(weights)
    data = weights.read_bytes()
    moved = 0
    for tensor in model.graph.initializer:
        info = header.get(tensor.name)
        if info is None or info["dtype"] != "F32" or list(tensor.dims) != info["shape"]:
            continue
        begin, end = (start + offset for offset in info["data_offsets"])
        if tensor.raw_data != data[begin:end]:
            continue
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(begin)),
                           ("length", str(end - begin))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        moved += 1
    return moved


class _Graph:
    """Nodes and initializers under construction, with unique names."""

    def __init__(self, weights: dict[str, np.ndarray], prefix: str) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.weights, self.prefix = weights, prefix
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray | np.generic | float | list[int]) -> str:
        array = np.asarray(value)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        self.inits.append(self.numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        """The model's tensor ``name`` as an initializer named as in the weights file."""
        full = self.prefix + name
        array = self.weights[full]
        return self.const(full, np.ascontiguousarray(array.T) if transpose else array)

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out],
                                                name=f"{op_type}_{self._count}", **attrs))
        return out


def build_bert_graph(weights: dict[str, np.ndarray], config: dict[str, Any], opset: int,
                     *, transposed: bool) -> Any:
    """The ``onnx.ModelProto`` of BERT + mean pooling for ``config`` (a HF
    ``config.json``) with ``weights`` (HF ``BertModel`` names, with or without the
    ``bert.`` prefix, which the initializers keep); ``transposed``: see the module
    docstring."""
    from onnx import TensorProto, helper

    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelError(f"activation {config.get('hidden_act')!r} is not supported (gelu)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError("only absolute position embeddings are supported")
    head = hidden // heads
    g = _Graph(weights, prefix)
    try:
        _encoder(g, hidden, heads, head, layers, eps, transposed)
    except KeyError as exc:
        raise ModelError(f"the weights have no tensor {exc}: not a BERT model?") from exc
    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
              for n in ("input_ids", "attention_mask", "token_type_ids")]
    output = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT,
                                           ["batch", hidden])
    graph = helper.make_graph(g.nodes, "bert_mean_pooling", inputs, [output], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _encoder(g: _Graph, hidden: int, heads: int, head: int, layers: int, eps: float,
             transposed: bool) -> None:
    def linear(x: str, prefix: str) -> str:
        # torch's Linear keeps weight as (out, in); MatMul wants (in, out).
        if transposed:
            weight = g.weight(f"{prefix}.weight", transpose=True)
        else:
            weight = g.op("Transpose", g.weight(f"{prefix}.weight"), perm=[1, 0])
        return g.op("Add", g.op("MatMul", x, weight), g.weight(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return g.op("LayerNormalization", x, g.weight(f"{prefix}.weight"),
                    g.weight(f"{prefix}.bias"), axis=-1, epsilon=eps)

    # Embeddings: word + token type + absolute position, then a layer norm.
    positions = g.weight("embeddings.position_embeddings.weight")
    words = g.op("Gather", g.weight("embeddings.word_embeddings.weight"), "input_ids")
    types = g.op("Gather", g.weight("embeddings.token_type_embeddings.weight"),
                 "token_type_ids")
    max_positions = len(g.weights[g.prefix + "embeddings.position_embeddings.weight"])
    seq_len = g.op("Unsqueeze", g.op("Gather", g.op("Shape", "input_ids"), g.const("one", 1)),
                   g.const("axis0", [0]))
    position_ids = g.op("Slice", g.const("position_ids",
                                         np.arange(max_positions, dtype=np.int64)[None]),
                        g.const("zero_1d", [0]), seq_len, g.const("axis1", [1]))
    pos = g.op("Gather", positions, position_ids)
    x = layer_norm(g.op("Add", g.op("Add", words, types), pos), "embeddings.LayerNorm")

    # The additive attention mask: 0 where attended, the float minimum where padded.
    # (Two Unsqueezes, as torch's exporter writes them, which onnxruntime's fusions know.)
    mask = g.op("Unsqueeze", g.op("Unsqueeze", "attention_mask", g.const("axis_1", [1])),
                g.const("axis_2", [2]))
    mask = g.op("Cast", mask, to=1)
    bias = g.op("Mul", g.op("Sub", g.const("one_f", np.float32(1.0)), mask),
                g.const("float_min", np.float32(np.finfo(np.float32).min)))
    split = g.const("split_heads", [0, 0, heads, head])
    merge = g.const("merge_heads", [0, 0, hidden])
    scale = g.const("sqrt_head", np.float32(math.sqrt(head)))
    for i in range(layers):
        p = f"encoder.layer.{i}"

        q, k, v = (g.op("Transpose", g.op("Reshape", linear(x, f"{p}.attention.self.{name}"),
                                          split), perm=perm)
                   for name, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]),
                                      ("value", [0, 2, 1, 3])))
        scores = g.op("Add", g.op("Div", g.op("MatMul", q, k), scale), bias)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge)
        attended = linear(context, f"{p}.attention.output.dense")
        x = layer_norm(g.op("Add", attended, x), f"{p}.attention.output.LayerNorm")
        inner = linear(x, f"{p}.intermediate.dense")
        # GELU(erf): x * 0.5 * (1 + erf(x / sqrt(2))).
        erf = g.op("Erf", g.op("Div", inner, g.const(f"sqrt2_{i}", np.float32(math.sqrt(2)))))
        gelu = g.op("Mul", g.op("Mul", inner, g.op("Add", erf, g.const(f"one_{i}",
                                                                      np.float32(1.0)))),
                    g.const(f"half_{i}", np.float32(0.5)))
        x = layer_norm(g.op("Add", linear(gelu, f"{p}.output.dense"), x),
                       f"{p}.output.LayerNorm")

    # Mean pooling over the attention mask.
    weights = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.const("axis_last", [-1])),
                   to=1)
    summed = g.op("ReduceSum", g.op("Mul", x, weights), g.const("axis_seq", [1]), keepdims=0)
    counts = g.op("Clip", g.op("ReduceSum", weights, g.const("axis_seq2", [1]), keepdims=0),
                  g.const("min_count", np.float32(1e-9)))
    g.nodes.append(g.helper.make_node("Div", [summed, counts], ["sentence_embedding"],
                                      name="mean_pooling"))
