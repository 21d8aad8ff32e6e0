"""Stored texts on an int8 copy of MiniLM (``document_precision = "int8"``, every MatMul
int8, or ``"int8-mixed"``, layer 0 left in float) while queries keep their own model:
the store holds the copy's vectors, the search query is embedded on the query model, a
store whose older vectors came from the float model keeps finding them, and the setting
is validated. Real MiniLM on onnxruntime, both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pg import database

import memd
from memd.config import load_settings
from memd.engine.memory import Memd
from memd.errors import InvalidInput
from memd.models.onnx_embedder import OnnxMiniLMEmbedder

pytestmark = pytest.mark.real_model

USER = "alice"
TABS = "I prefer tabs over spaces and black for formatting."
HOST = "The staging host for the billing service is staging.rocket.internal."
OTHER = ["We adopted a rescue greyhound called Miso last spring.",
         "My sister lives in Lisbon and teaches piano."]


@pytest.fixture(scope="module")
def exact() -> OnnxMiniLMEmbedder:
    """The float model for stored texts and for queries: the reference vectors."""
    return OnnxMiniLMEmbedder(query_precision="float32")


@pytest.fixture(scope="module")
def int8() -> OnnxMiniLMEmbedder:
    """The int8 copy (what ``query_precision="int8"`` runs queries on)."""
    return OnnxMiniLMEmbedder(query_precision="int8")


def open_real(backend: str, data_dir: Path, **settings: Any) -> Memd:
    if backend == "postgres":
        settings = {"db": database(), "pg_partitions": (4, 4, 4), **settings}
    return memd.open(data_dir, embedder="minilm-onnx", query_precision="float32", **settings)


def test_stored_texts_run_on_the_int8_copy_and_queries_on_the_float_model(
    exact: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder,
) -> None:
    docs = OnnxMiniLMEmbedder(document_precision="int8", query_precision="float32")
    texts = [TABS, HOST, *OTHER]
    stored = docs.embed(texts)
    assert np.allclose(stored, int8.embed_queries(texts), atol=1e-5)
    assert np.abs(stored - exact.embed(texts)).max() > 1e-4  # really the other model
    assert docs.query_path is not None and docs.query_path.name.endswith(".q8.onnx")
    assert np.allclose(docs.embed_queries(texts), exact.embed(texts), atol=1e-6)
    assert np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="document_precision must be one of int8-mixed"):
        OnnxMiniLMEmbedder(document_precision="bf16")


def test_the_mixed_copy_keeps_layer_0_in_float_and_embeds_stored_texts(
    exact: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder,
) -> None:
    import onnx

    docs = OnnxMiniLMEmbedder(document_precision="int8-mixed")
    texts = [TABS, HOST, *OTHER]
    stored = docs.embed(texts)
    path = docs.copy_paths["int8-mixed"]
    assert path.name.endswith(".q8-l0.onnx") and docs.query_path is None
    graph = onnx.load(str(path)).graph
    weights = {i.name: i for i in graph.initializer}
    projections = {n.input[1]: n.op_type for n in graph.node if n.op_type == "MatMul"
                   and n.input[1].startswith("encoder.layer.")}
    assert sorted(projections) == sorted(
        f"encoder.layer.0.{part}.weight" for part in (
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense", "intermediate.dense", "output.dense"))
    assert all(weights[name].data_type == onnx.TensorProto.FLOAT for name in projections)
    quantized = [n for n in graph.node if n.op_type == "MatMulInteger"]
    assert len(quantized) == 5 * 6 and not any("layer.0." in i for n in quantized
                                               for i in n.input)
    # Stored texts on the mixed copy: closer to the float model than the all-int8 copy,
    # yet not the float model; queries stay on the int8 copy.
    floats, all_int8 = exact.embed(texts), int8.embed_queries(texts)
    assert np.abs(stored - floats).max() > 1e-4 and np.abs(stored - all_int8).max() > 1e-4
    assert np.sum(stored * floats, axis=1).min() >= 0.98
    assert np.allclose(np.linalg.norm(stored, axis=1), 1.0, atol=1e-5)
    assert np.allclose(docs.embed_queries(texts), all_int8, atol=1e-5)
    assert docs.query_path is not None and docs.query_path.name.endswith(".q8.onnx")


def test_the_float_model_is_dropped_once_both_roles_run_on_checked_copies(
    exact: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder,
) -> None:
    both = OnnxMiniLMEmbedder(document_precision="int8-mixed")
    stored = both.embed([TABS, HOST])
    assert both._session is not None  # the query copy is not checked yet
    query = both.embed_queries([TABS])
    assert both._session is None
    assert np.allclose(both.embed([TABS, HOST]), stored, atol=1e-6)
    assert np.allclose(both.embed_queries([TABS]), query, atol=1e-6)
    assert np.allclose(query, int8.embed_queries([TABS]), atol=1e-5)
    floats = OnnxMiniLMEmbedder(document_precision="float32")
    floats.embed_queries([TABS])
    assert np.allclose(floats.embed([TABS]), exact.embed([TABS]), atol=1e-6)
    assert floats._session is not None


def test_the_store_holds_int8_vectors_and_finds_them_with_float_queries(
    backend: str, tmp_path: Path, exact: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder,
) -> None:
    with open_real(backend, tmp_path / "d", document_precision="int8") as engine:
        assert engine.embedder.inner.document_precision == "int8"
        tabs = engine.add(TABS, USER).memory
        for text in [HOST, *OTHER]:
            engine.add(text, USER)
        vector = engine.store.get_memory_vectors(USER, [tabs.id])[tabs.id]
        want = int8.embed_queries([TABS])[0]
        assert np.allclose(np.asarray(vector, dtype=np.float32), want, atol=1e-5)
        query = "which indentation does the user like"
        assert np.allclose(engine.embedder.embed_query(query), exact.embed([query])[0],
                           atol=1e-6)
        hits = engine.search(query, USER, k=2, kinds=["memory"])
        assert hits and hits[0].text == TABS


@pytest.mark.parametrize("precision", ["int8", "int8-mixed"])
def test_a_store_of_float_vectors_keeps_working_after_the_switch(
    backend: str, tmp_path: Path, precision: str,
) -> None:
    settings: dict[str, Any] = {}
    if backend == "postgres":
        settings = {"db": database(), "pg_partitions": (4, 4, 4)}
    with memd.open(tmp_path / "d", embedder="minilm-onnx", query_precision="float32",
                   document_precision="float32", **settings) as before:
        before.add(TABS, USER)
        before.add(OTHER[0], USER)
    with memd.open(tmp_path / "d", embedder="minilm-onnx", query_precision="float32",
                   document_precision=precision, **settings) as after:
        assert after.embedder.inner.document_precision == precision
        after.add(HOST, USER)
        after.add(OTHER[1], USER)
        old = after.search("tabs or spaces for indentation", USER, k=1, kinds=["memory"])
        new = after.search("what is the billing staging host", USER, k=1, kinds=["memory"])
        assert [h.text for h in old] == [TABS] and [h.text for h in new] == [HOST]


def test_document_precision_is_a_validated_setting(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(data_dir=tmp_path / "s").document_precision == "int8-mixed"
    monkeypatch.setenv("MEMD_DOCUMENT_PRECISION", "float32")
    assert load_settings(data_dir=tmp_path / "s").document_precision == "float32"
    monkeypatch.setenv("MEMD_DOCUMENT_PRECISION", "int8")
    assert load_settings(data_dir=tmp_path / "s").document_precision == "int8"
    monkeypatch.setenv("MEMD_DOCUMENT_PRECISION", "int8-mixed")
    assert load_settings(data_dir=tmp_path / "s").document_precision == "int8-mixed"
    with pytest.raises(InvalidInput, match="document_precision must be one of"):
        load_settings(data_dir=tmp_path / "s", document_precision="bf16")
    with pytest.raises(InvalidInput, match="int8-mixed, int8, float32, not 'int8_mixed'"):
        load_settings(data_dir=tmp_path / "s", document_precision="int8_mixed")


def test_imported_and_live_turns_are_embedded_on_the_int8_copy(
    backend: str, tmp_path: Path, exact: OnnxMiniLMEmbedder, int8: OnnxMiniLMEmbedder,
) -> None:
    """int8 activations are quantized per call, so a text's int8 vector moves a little
    with the texts batched beside it: close to the text's own int8 vector, and apart
    from the float one (which batching moves by 1e-6 at most)."""
    from memd.imports import Conversation, Turn, import_conversations

    t0 = 1_750_000_000.0
    imported = "I keep the billing service's runbooks in the ops-notes repository."
    live = "Our on-call rotation switches every Tuesday at noon."
    with open_real(backend, tmp_path / "d", document_precision="int8") as engine:
        history = [Conversation("fixture", "c1", (Turn("user", imported, t0),
                                                  Turn("assistant", "Noted.", t0 + 5)),
                                client="fixture")]
        import_conversations(engine, USER, history, run_jobs=True)
        session = engine.create_session(USER)
        engine.append(session.id, USER, [{"role": "user", "content": live}])
        while engine.jobs.run_due():
            pass
        got = engine.embedder.cached([imported, live])
        alone = [int8.embed_queries([text])[0] for text in (imported, live)]
        floats = exact.embed([imported, live])
        for vector, own, float_vector in zip(got, alone, floats, strict=True):
            assert vector is not None and float(vector @ own) >= 0.99
            assert np.abs(vector - float_vector).max() > 1e-4
        hits = engine.search("where are the runbooks kept", USER, k=1, kinds=["message"])
        assert hits and hits[0].text == imported
