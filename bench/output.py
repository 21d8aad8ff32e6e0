"""The common end of a benchmark script: its figures as JSON on stdout and, with ``--out``,
in that file too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(result: Any, out: Path | None) -> None:
    """Print ``result`` as indented JSON; when ``out`` is given, write the same text there
    (its folder created if need be)."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", "utf-8")
