"""The onnxruntime MiniLM (``minilm-onnx``) against the torch one it stands in for.

One graph serves the whole session (``onnx_cache``): the autouse fixture gives every
test its own dirs, and writing the graph costs seconds, so the session's embedder gets an
explicit ``cache_dir`` and the end-to-end test points ``XDG_CACHE_HOME`` at the same place.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memd
from memd.errors import ModelError
from memd.models.embedder import MiniLMEmbedder
from memd.models.onnx_embedder import OnnxMiniLMEmbedder
from memd.models.onnx_graph import read_safetensors
from memd.models.onnx_model import default_model_dir, installed_dir

pytestmark = pytest.mark.real_model

LONG_PROSE = " ".join(
    f"Sentence {i} of a long memory about the user's build system, editors and habits."
    for i in range(40)
)
TEXTS = [
    "", "   ", "hi", "ok", "I use vim as my editor", "I use vim as my main editor",
    "  leading and trailing spaces  ", "MIXED Case Text With CAPITALS",
    "I prefer tabs over spaces", "indentation preference", "My cat is called Miso",
    "Actually, call me Sam", "I had pasta for lunch on Tuesday",
    "The deploy pipeline runs on Kubernetes and takes about twelve minutes.",
    "Remember: the staging DB password rotates every 30 days (ask Bob, not Alice).",
    "café naïve résumé façade coöperate", "Größenordnung Straße Äpfel Öl Übermut",
    "日本語のテキストも埋め込めますか？", "中文文本测试：我喜欢喝茶。", "한국어 문장입니다",
    "Привет, как дела? Это тест.", "مرحبا بالعالم", "שלום עולם", "🚀🔥 emoji only 🎉🐍",
    "∑ᵢ xᵢ² ≤ ∞ — maths ≠ prose ± ε", "tab\tseparated\tvalues\nand\nnewlines",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "SELECT id, text FROM memories WHERE user_id = ? ORDER BY created_at DESC LIMIT 10;",
    "const x = await fetch(`/api/v1/search?q=${encodeURIComponent(q)}`);",
    "fn main() { println!(\"{}\", std::env::args().count()); }",
    "{\"user\": \"alice\", \"tags\": [\"editor\", \"vim\"], \"score\": 0.93}",
    "https://example.com/path/to/page?query=1&lang=en#section",
    "user@example.org, +1 (555) 010-2030, 221B Baker Street",
    "2024-05-17T13:45:00Z 3.14159 1e-9 0xDEADBEEF 42",
    "a", "the the the the the", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "What editor do I use?", "what did I eat for lunch", "who is Miso",
    "[CLS] [SEP] [PAD] [MASK] [UNK] special-looking tokens",
    LONG_PROSE, "word " * 400, "x" * 3000,
    "日本語 " * 300, "def f(x):\n    return x\n" * 60,
    "A medium length memory that mentions several things: the user likes dark roast "
    "coffee, runs on weekends, writes Rust at work and Python for fun, and is allergic to "
    "peanuts.",
]


@pytest.fixture(scope="session")
def xdg_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG_CACHE_HOME shared by the session: its memd/onnx holds the one export."""
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.fixture(scope="session")
def onnx_cache(xdg_cache: Path) -> Path:
    return xdg_cache / "memd" / "onnx"


@pytest.fixture(scope="session")
def onnx(onnx_cache: Path) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(cache_dir=onnx_cache)


@pytest.fixture(scope="session")
def torch_vectors() -> np.ndarray:
    return MiniLMEmbedder().embed(TEXTS)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_texts_exercise_truncation(onnx: OnnxMiniLMEmbedder) -> None:
    onnx.embed(["load"])
    tok = onnx._tokenizer
    lengths = [len(tok.encode(t).ids) for t in TEXTS]
    assert max(lengths) == 256 and sum(n == 256 for n in lengths) >= 4
    # Truncation really cuts: what follows token 256 does not change the vector.
    a, b = onnx.embed([LONG_PROSE + " cats", LONG_PROSE + " quantum chromodynamics"])
    assert float(a @ b) > 0.99999


def test_batched_matches_torch(onnx: OnnxMiniLMEmbedder, torch_vectors: np.ndarray) -> None:
    got = onnx.embed(TEXTS)
    cos = _cosines(got, torch_vectors)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.999, (cos.min(), TEXTS[worst][:60])


def test_single_matches_torch(onnx: OnnxMiniLMEmbedder, torch_vectors: np.ndarray) -> None:
    got = np.stack([onnx.embed([t])[0] for t in TEXTS])
    cos = _cosines(got, torch_vectors)
    assert cos.min() >= 0.999, (cos.min(), TEXTS[int(np.argmin(cos))][:60])


def test_forced_thread_counts_agree(onnx_cache: Path, onnx: OnnxMiniLMEmbedder) -> None:
    texts = [*TEXTS[:12], LONG_PROSE]
    ref = onnx.embed(texts)
    for threads in (1, 2):
        got = OnnxMiniLMEmbedder(cache_dir=onnx_cache, threads=threads).embed(texts)
        assert _cosines(got, ref).min() >= 0.99999


def test_a_short_query_runs_on_one_thread_with_the_same_vector(
    onnx_cache: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One short query runs on the int8 copy's one-thread session (two threads cost it
    more than they save), a long one or a batch on the shared session; the vectors are
    those of the int8 copy on two threads."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    emb = OnnxMiniLMEmbedder(cache_dir=onnx_cache)
    two = OnnxMiniLMEmbedder(cache_dir=onnx_cache, threads=2)
    short, long = TEXTS[0], LONG_PROSE
    assert emb.embed_queries([short]).shape == (1, 384)
    assert two.embed_queries([short]).shape == (1, 384)
    assert emb._int8_narrow is not None and two._int8_narrow is None
    used: list[object] = []
    for session in (emb._int8_narrow, emb._quantized["int8"]):
        run = session.run
        monkeypatch.setattr(session, "run", lambda *a, _run=run, _s=session: (
            used.append(_s), _run(*a))[1], raising=False)
    for texts in ([short], [long], [short, long]):
        used.clear()
        got = emb.embed_queries(texts)
        assert np.allclose(got, two.embed_queries(texts), atol=1e-6)
        narrow = texts == [short]
        assert used == [emb._int8_narrow if narrow else emb._quantized["int8"]]  # one call


def test_batches_keep_to_the_token_budget(onnx_cache: Path, onnx: OnnxMiniLMEmbedder,
                                         torch_vectors: np.ndarray) -> None:
    """Long texts go a few to a call, short ones many: no call pads more than the budget
    (one text alone may reach its own width), and the vectors are those of torch."""
    from memd.models import onnx_embedder

    emb = OnnxMiniLMEmbedder(cache_dir=onnx_cache)
    emb.embed(["load"])
    shapes: list[tuple[int, int]] = []
    real = emb._session

    class Spy:
        def get_inputs(self) -> Any:
            return real.get_inputs()

        def run(self, names: Any, feed: dict[str, np.ndarray]) -> Any:
            shapes.append(feed["input_ids"].shape)
            return real.run(names, feed)

    emb._session = Spy()
    got = emb.embed(TEXTS)
    budget = onnx_embedder.TOKEN_BUDGET
    assert all(rows * width <= budget or rows == 1 for rows, width in shapes), shapes
    assert sum(rows for rows, _ in shapes) == len(TEXTS)
    assert any(rows > 1 for rows, _ in shapes)  # short texts still share a call
    assert _cosines(got, torch_vectors).min() >= 0.999


def test_shape_dtype_unit_norm_and_order(onnx: OnnxMiniLMEmbedder) -> None:
    assert onnx.name == MiniLMEmbedder.name and onnx.dim == MiniLMEmbedder.dim == 384
    empty = onnx.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    # Several batches of 64, sorted by length inside: rows must come back in input order.
    distinct = [*TEXTS[:30], LONG_PROSE]
    texts = distinct * 3
    random.Random(1).shuffle(texts)
    got = onnx.embed(texts)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    alone = {t: onnx.embed([t])[0] for t in distinct}
    for row, text in zip(got, texts, strict=True):
        assert float(row @ alone[text]) > 0.99999, text[:40]
    with pytest.raises(TypeError):
        onnx.embed("not a list")


def test_export_is_reused_and_fresh_process_skips_torch(
    onnx_cache: Path, onnx: OnnxMiniLMEmbedder
) -> None:
    first = onnx.embed(["I prefer tabs over spaces"])[0]
    assert onnx.onnx_path is not None and onnx.onnx_path.parent == onnx_cache
    mtime = onnx.onnx_path.stat().st_mtime_ns
    again = OnnxMiniLMEmbedder(cache_dir=onnx_cache)
    assert np.allclose(again.embed(["I prefer tabs over spaces"])[0], first, atol=1e-6)
    assert again.onnx_path == onnx.onnx_path
    assert onnx.onnx_path.stat().st_mtime_ns == mtime
    key = onnx.onnx_path.stem
    names = {p.name for p in onnx_cache.iterdir()}  # the graph, its weights; no temp files
    assert {f"{key}.onnx", f"{key}.safetensors"} <= names
    assert names <= {f"{key}.onnx", f"{key}.safetensors", f"{key}.q8.onnx"}

    script = (
        "import json, sys\n"
        "from memd.models.onnx_embedder import OnnxMiniLMEmbedder\n"
        "e = OnnxMiniLMEmbedder(cache_dir=sys.argv[1])\n"
        "v = e.embed(['I prefer tabs over spaces'])[0]\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "               ('torch', 'transformers', 'sentence_transformers', 'onnx'))\n"
        "print(json.dumps({'vector': v.tolist(), 'heavy': heavy, 'path': str(e.onnx_path)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(onnx_cache)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["heavy"] == []
    assert out["path"] == str(onnx.onnx_path)
    assert np.allclose(np.array(out["vector"], dtype=np.float32), first, atol=1e-6)
    assert onnx.onnx_path.stat().st_mtime_ns == mtime


def test_memd_open_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg_cache: Path, onnx: OnnxMiniLMEmbedder
) -> None:
    onnx.embed(["make sure the shared export exists"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg_cache))  # the default cache dir
    ticks = iter(range(1_000_000, 2_000_000, 10))
    with memd.open(tmp_path / "e2e", embedder="minilm-onnx",
                   clock=lambda: float(next(ticks))) as m:
        inner = m.embedder.inner
        assert isinstance(inner, OnnxMiniLMEmbedder)
        assert m.embedder.name == "all-MiniLM-L6-v2"
        m.add("I prefer tabs over spaces", "alice")
        m.add("I had pasta for lunch", "alice")
        m.add("My cat is called Miso", "alice")
        hits = m.search("indentation preference", "alice")
        assert hits[0].text == "I prefer tabs over spaces"
        assert m.search("what is my pet's name", "alice")[0].text == "My cat is called Miso"
        # The same graph, found by default (in the environment if install.sh put it there).
        assert inner.onnx_path is not None and onnx.onnx_path is not None
        assert inner.onnx_path.name == onnx.onnx_path.name


def test_unsupported_model_dir_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="modules.json"):
        OnnxMiniLMEmbedder(tmp_path, cache_dir=tmp_path / "c").embed(["x"])
    src = default_model_dir()
    fake = tmp_path / "dense"
    fake.mkdir()
    modules = json.loads((src / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense",
                       "type": "sentence_transformers.models.Dense"})
    (fake / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelError, match="Dense"):
        OnnxMiniLMEmbedder(fake, cache_dir=tmp_path / "c").embed(["x"])
    assert not (tmp_path / "c").exists()


def _run_blocked(
    blocked: tuple[str, ...], body: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter where the modules ``blocked`` cannot be imported."""
    script = (f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
              + body)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=300, check=False, env=env)


def test_graph_is_written_without_torch(tmp_path: Path, onnx: OnnxMiniLMEmbedder) -> None:
    """From an empty cache with torch unimportable: the graph is written from the weights
    and gives the vectors of the shared one (which the torch tests above check); it
    refers to the weights, hard-linked beside it, instead of copying them."""
    body = (
        "import json\n"
        "from memd.models.onnx_embedder import OnnxMiniLMEmbedder\n"
        "e = OnnxMiniLMEmbedder(cache_dir=sys.argv[1])\n"
        "v = e.embed(['I prefer tabs over spaces', 'who is Miso'])\n"
        "print(json.dumps({'vectors': v.tolist(), 'path': str(e.onnx_path)}))\n"
    )
    cache = tmp_path / "empty"
    proc = _run_blocked(("torch", "transformers", "sentence_transformers"), body, str(cache))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    want = onnx.embed(["I prefer tabs over spaces", "who is Miso"])
    assert np.allclose(np.array(out["vectors"], dtype=np.float32), want, atol=1e-5)
    assert onnx.onnx_path is not None and Path(out["path"]).name == onnx.onnx_path.name
    key = onnx.onnx_path.stem
    assert sorted(p.name for p in cache.iterdir()) == [f"{key}.onnx", f"{key}.safetensors"]
    assert (cache / f"{key}.onnx").stat().st_size < 1_000_000
    weights = default_model_dir() / "model.safetensors"
    assert (cache / f"{key}.safetensors").samefile(weights)


def test_missing_onnx_is_a_model_error(tmp_path: Path) -> None:
    """With no graph written and onnx unimportable, the error says what to do."""
    body = (
        "from memd.errors import ModelError\n"
        "from memd.models.onnx_embedder import OnnxMiniLMEmbedder\n"
        "try:\n"
        "    OnnxMiniLMEmbedder(cache_dir=sys.argv[1]).embed(['x'])\n"
        "except ModelError as exc:\n"
        "    print(exc)\n"
    )
    proc = _run_blocked(("onnx",), body, str(tmp_path / "empty"))
    assert proc.returncode == 0, proc.stderr
    assert "needs onnx" in proc.stdout and "'models' extra" in proc.stdout


def test_weights_go_inside_the_graph_where_no_link_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx: OnnxMiniLMEmbedder
) -> None:
    def no_link(src: object, dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    inline = OnnxMiniLMEmbedder(cache_dir=tmp_path / "onnx")
    texts = TEXTS[:12]
    assert _cosines(inline.embed(texts), onnx.embed(texts)).min() >= 0.99999
    assert inline.onnx_path is not None
    assert [p.name for p in (tmp_path / "onnx").iterdir()] == [inline.onnx_path.name]
    assert inline.onnx_path.stat().st_size > 80_000_000


def _copy_graph(onnx: OnnxMiniLMEmbedder, dest: Path) -> None:
    onnx.embed_queries(["make sure the int8 copy exists"])
    assert onnx.onnx_path is not None and onnx.query_path is not None
    dest.mkdir(parents=True)
    for path in (onnx.onnx_path, onnx.onnx_path.with_suffix(".safetensors"), onnx.query_path):
        shutil.copy2(path, dest / path.name)


def test_files_inside_the_environment_come_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, onnx: OnnxMiniLMEmbedder
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    _copy_graph(onnx, installed_dir())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    default = OnnxMiniLMEmbedder()
    got = default.embed_queries(["I prefer tabs over spaces"])
    assert np.allclose(got, onnx.embed_queries(["I prefer tabs over spaces"]), atol=1e-6)
    assert default.onnx_path is not None and default.onnx_path.parent == installed_dir()
    assert default.query_path is not None and default.query_path.parent == installed_dir()
    assert not (tmp_path / "cache").exists()  # nothing written, nothing made
    # An explicit cache_dir is the only place looked in.
    explicit = OnnxMiniLMEmbedder(cache_dir=onnx.onnx_path.parent)
    explicit.embed(["x"])
    assert explicit.onnx_path == onnx.onnx_path


def test_prepare_command_writes_what_is_missing_and_keeps_what_is_there(
    tmp_path: Path, onnx: OnnxMiniLMEmbedder,
) -> None:
    dest = tmp_path / "prepared"
    _copy_graph(onnx, dest)
    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    command = [sys.executable, "-m", "memd.models.onnx_export", "--dir", str(dest)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert onnx.onnx_path is not None and proc.stdout.strip() == str(dest / onnx.onnx_path.name)
    after = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    mixed = onnx.onnx_path.with_suffix(".q8-l0.onnx").name  # the copy _copy_graph left out
    assert after == before | {mixed: after[mixed]}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == after


def test_read_safetensors(tmp_path: Path) -> None:
    import struct

    values = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=np.float32)
    blobs = {"f32": ("F32", values.tobytes()), "f16": ("F16", values.astype(np.float16).tobytes()),
             "bf16": ("BF16", (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()),
             "i64": ("I64", np.arange(4, dtype=np.int64).tobytes())}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data, offset = b"", 0
    for name, (dtype, raw) in blobs.items():
        header[name] = {"dtype": dtype, "shape": [2, 2],
                        "data_offsets": [offset, offset + len(raw)]}
        data, offset = data + raw, offset + len(raw)
    head = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    got = read_safetensors(path)
    assert set(got) == {"f32", "f16", "bf16", "i64"}
    for name in ("f32", "f16", "bf16"):
        assert got[name].dtype == np.float32 and np.array_equal(got[name], values), name
    assert got["i64"].tolist() == [[0, 1], [2, 3]]
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ModelError, match="cannot read the weights"):
        read_safetensors(path)


def test_unreadable_cached_file_is_exported_again(
    tmp_path: Path, onnx: OnnxMiniLMEmbedder
) -> None:
    ref = onnx.embed(["I prefer tabs over spaces"])[0]
    cache = tmp_path / "onnx"
    cache.mkdir()
    assert onnx.onnx_path is not None
    broken = cache / onnx.onnx_path.name  # same model, same versions: same key
    broken.write_bytes(b"not an onnx file")
    again = OnnxMiniLMEmbedder(cache_dir=cache)
    assert np.allclose(again.embed(["I prefer tabs over spaces"])[0], ref, atol=1e-6)
    assert again.onnx_path == broken and broken.stat().st_size > 1000
    assert sorted(p.name for p in cache.iterdir()) == [broken.name,
                                                       f"{broken.stem}.safetensors"]


def test_queries_run_on_an_int8_copy_close_to_the_float_model(
    onnx: OnnxMiniLMEmbedder,
) -> None:
    stored = onnx.embed(TEXTS)
    queries = onnx.embed_queries(TEXTS)
    assert onnx.query_path == onnx.onnx_path.with_suffix(".q8.onnx")
    weights = onnx.onnx_path.with_suffix(".safetensors")  # the float graph's
    assert onnx.query_path.stat().st_size < weights.stat().st_size / 2
    cos = _cosines(queries, stored)
    assert cos.min() >= 0.95, TEXTS[int(np.argmin(cos))][:60]
    assert np.median(cos) >= 0.98
    assert np.abs(queries - stored).max() > 1e-4  # really another model, not the float one
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)


def test_int8_queries_rank_like_float_ones(onnx: OnnxMiniLMEmbedder) -> None:
    docs = onnx.embed(TEXTS)
    probes = ["What editor do I use?", "what did I eat for lunch", "who is Miso",
              "indentation preference", "the staging database password"]
    for probe in probes:
        exact = np.argsort(-(docs @ onnx.embed([probe])[0]))[:3]
        approx = np.argsort(-(docs @ onnx.embed_queries([probe])[0]))[:3]
        assert exact[0] == approx[0], probe
        assert len(set(exact) & set(approx)) >= 2, probe


def test_float32_query_precision_uses_the_float_model(onnx_cache: Path) -> None:
    exact = OnnxMiniLMEmbedder(cache_dir=onnx_cache, query_precision="float32")
    got = exact.embed_queries(["I prefer tabs over spaces", "who is Miso"])
    assert np.allclose(got, exact.embed(["I prefer tabs over spaces", "who is Miso"]),
                       atol=1e-6)
    assert exact.query_path is None
    with pytest.raises(ValueError, match="query_precision"):
        OnnxMiniLMEmbedder(query_precision="int4")


def test_unreadable_int8_copy_is_made_again(tmp_path: Path, onnx: OnnxMiniLMEmbedder) -> None:
    ref = onnx.embed_queries(["I prefer tabs over spaces"])[0]
    cache = tmp_path / "onnx"
    cache.mkdir()
    assert onnx.onnx_path is not None and onnx.query_path is not None
    for path in (onnx.onnx_path, onnx.onnx_path.with_suffix(".safetensors")):
        shutil.copy2(path, cache / path.name)
    broken = cache / onnx.query_path.name
    broken.write_bytes(b"not an onnx file")
    again = OnnxMiniLMEmbedder(cache_dir=cache)
    assert np.allclose(again.embed_queries(["I prefer tabs over spaces"])[0], ref, atol=1e-5)
    assert again.query_path == broken and broken.stat().st_size > 5_000_000


def test_cached_embedder_embeds_queries_on_the_query_model(onnx: OnnxMiniLMEmbedder) -> None:
    from memd.models.embedder import CachedEmbedder

    cached = CachedEmbedder(onnx)
    text = "which shell do I use at work"
    assert np.allclose(cached.embed_query(text), onnx.embed_queries([text])[0], atol=1e-6)
    assert np.allclose(cached.embed([text])[0], onnx.embed([text])[0], atol=1e-6)
