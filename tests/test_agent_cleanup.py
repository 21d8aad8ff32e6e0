"""What an agent CLI leaves running in its work dir is ended after its run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agents.clients import end_leftovers

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_processes_in_or_naming_the_work_dir_end_and_others_stay(tmp_path: Path) -> None:
    inside = subprocess.Popen(SLEEP, cwd=tmp_path, start_new_session=True)
    naming = subprocess.Popen([*SLEEP, "--cwd", str(tmp_path)], start_new_session=True)
    other = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        assert sorted(end_leftovers(tmp_path)) == sorted([inside.pid, naming.pid])
        assert inside.wait(10) < 0 and naming.wait(10) < 0
        assert other.poll() is None
    finally:
        for p in (inside, naming, other):
            p.kill()
            p.wait(10)
