"""bench_proxy's count of the prefix breaks memd causes beyond the client's own."""

from __future__ import annotations

from typing import Any

from bench.bench_proxy import prefix_breaks
from memd.engine.block.inject import BLOCK_HEADER


def _req(*contents: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": c} for c in contents]}


def test_a_step_the_client_extends_and_memd_keeps_is_no_break() -> None:
    sent = [_req("a"), _req("a", "b")]
    assert prefix_breaks(sent, sent) == {"block": 0, "rewritten": 0}


def test_breaks_are_counted_by_cause() -> None:
    sent = [_req("a", "b"), _req("a", "b", "c"), _req("a", "b", "c", "d")]
    block = f"{BLOCK_HEADER}\n- one"
    forwarded = [_req(block + "a", "b"),
                 _req(block + " changed\na", "b", "c"),  # the block changed
                 _req(block + " changed\na", "[held out]", "c", "d")]  # b rewritten
    assert prefix_breaks(forwarded, sent) == {"block": 1, "rewritten": 1}


def test_a_client_that_rewrites_its_history_itself_is_not_memds_break() -> None:
    sent = [_req("a", "b"), _req("x", "b", "c")]
    assert prefix_breaks(sent, sent) == {"block": 0, "rewritten": 0}
