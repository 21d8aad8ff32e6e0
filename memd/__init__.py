"""memd: a local-first memory daemon for AI assistants.

Use it as a library::

    import memd
    m = memd.open()                      # the default data dir, SQLite + MiniLM
    m.add("I prefer tabs over spaces", user_id="alice")
    hits = m.search("indentation preference", user_id="alice")
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

# memd's numpy work is small matrix-vector products (KNN over a user's vectors), which
# are memory-bound: a second BLAS thread gains nothing and, on a busy machine, waiting
# for it slows every query down. Set before numpy loads; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

if TYPE_CHECKING:
    from memd.engine.memory import Memd


def open(data_dir: Any = None, **kwargs: Any) -> Memd:  # noqa: A001 - the public verb
    """Open (creating if needed) a memd store; see :class:`memd.engine.memory.Memd`."""
    from memd.engine.memory import Memd

    return Memd.open(data_dir, **kwargs)


__all__ = ["open", "__version__"]
