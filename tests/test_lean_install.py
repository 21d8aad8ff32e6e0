"""The user's install on its own: ``./install.sh`` with no flags, into a fresh venv, holds
what the daemon needs and nothing of the development set (no torch, no test tools). From
that venv the daemon embeds end to end with an empty user cache, and its vectors are the
reference model's: sentence-transformers on torch, in the development venv running this
test.

One venv for the module (``user_venv``): installing it takes about a minute with pip's
cache warm. It is made the way ``bench/bench_footprint.py`` makes it, which measures it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.bench_footprint import daemon_env, imports, install_user_venv, one_run
from memd.models.embedder import MiniLMEmbedder

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

TEXTS = [
    "I prefer tabs over spaces", "indentation preference", "My cat is called Miso",
    "The deploy pipeline runs on Kubernetes and takes about twelve minutes.",
    "café naïve résumé", "日本語のテキストも埋め込めますか？", "🚀🔥 emoji only 🎉🐍",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    " ".join(f"Sentence {i} of a long memory about the user's editors." for i in range(40)),
]
EMBED = """
import json, sys
from memd.models.onnx_embedder import OnnxMiniLMEmbedder
from memd.models.onnx_model import installed_dir
texts = json.loads(sys.stdin.read())
e = OnnxMiniLMEmbedder()
stored, queries = e.embed(texts), e.embed_queries(texts)
print(json.dumps({
    "stored": stored.tolist(), "queries": queries.tolist(),
    "paths": [str(e.onnx_path), str(e.query_path)], "installed": str(installed_dir()),
    "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnx")),
}))
"""


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("user-install")
    venv = where / "venv"
    install_user_venv(venv, where / "install.log")
    return venv


def test_the_user_set_holds_no_torch_and_no_dev_tools(user_venv: Path) -> None:
    assert imports(user_venv, "onnxruntime") and imports(user_venv, "memd")
    for module in ("torch", "sentence_transformers", "transformers", "pytest", "mypy"):
        assert not imports(user_venv, module), module


def test_the_daemon_stores_and_finds_with_an_empty_cache(
    user_venv: Path, tmp_path: Path
) -> None:
    run = one_run(user_venv, tmp_path / "home")
    assert run["found"], run
    assert run["cache_files"] == []  # the ONNX files came from the venv, none were made


def test_the_cli_adds_and_searches(user_venv: Path, tmp_path: Path) -> None:
    env = daemon_env(tmp_path / "home")
    memd = str(user_venv / "bin" / "memd")
    for text in ("I prefer tabs over spaces", "My cat is called Miso",
                 "I had pasta for lunch on Tuesday"):
        subprocess.run([memd, "add", text, "--user", "alice"], env=env, check=True,
                       capture_output=True, timeout=120)
    done = subprocess.run([memd, "search", "what is my pet's name", "--user", "alice",
                           "--json"], env=env, check=True, capture_output=True, text=True,
                          timeout=120)
    hits = json.loads(done.stdout)
    assert hits[0]["text"] == "My cat is called Miso"


def test_vectors_equal_the_reference_model(user_venv: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(user_venv / "bin" / "python"), "-c", EMBED],
                          input=json.dumps(TEXTS), env=daemon_env(tmp_path / "home"),
                          check=True, capture_output=True, text=True, timeout=300)
    out = json.loads(done.stdout)
    assert out["heavy"] == []  # the daemon's embedder loads files: no torch, no onnx
    assert all(Path(p).parent == Path(out["installed"]) for p in out["paths"])
    reference = MiniLMEmbedder().embed(TEXTS)
    stored = np.array(out["stored"], dtype=np.float32)
    queries = np.array(out["queries"], dtype=np.float32)
    assert stored.shape == reference.shape == (len(TEXTS), 384)
    cos = np.sum(stored * reference, axis=1)  # all unit vectors
    assert cos.min() >= 0.999, (cos.min(), TEXTS[int(np.argmin(cos))][:40])
    assert np.abs(stored - reference).max() < 1e-3
    # Queries run on the int8 copy: close to the reference, and not the float model.
    cos_q = np.sum(queries * reference, axis=1)
    assert cos_q.min() >= 0.95 and np.abs(queries - stored).max() > 1e-4


def test_run_all_judges_the_footprint_figures() -> None:
    from bench.run_all import footprint_targets

    figures = {"verdicts": {"venv_mb": [383.1, 500.0, True], "rss_mb": [312.0, 300.0, False],
                            "first_request_s": [0.7, 2.0, True],
                            "first_search_s": [0.2, 2.0, True]},
               "torch_importable": True}
    rows = {r["target"]: r for r in footprint_targets(figures)}
    assert rows["the user's venv (./install.sh)"] == {
        "target": "the user's venv (./install.sh)", "measured": 383.1, "limit": "<= 500 MB",
        "met": True}
    assert not rows["daemon RSS after the first search"]["met"]
    assert not rows["torch importable in the user's venv"]["met"]
    assert len(rows) == 5
