"""``python -m memd`` runs the command line, as the ``memd`` script does."""

from __future__ import annotations

import subprocess
import sys


def test_python_dash_m_memd_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "memd", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout
