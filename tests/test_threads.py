"""memd.server.threads: the store's blocking work handed to a thread from the event loop,
with the caller's context, its errors, and a cancelled caller waiting for it."""

from __future__ import annotations

import asyncio
import threading

import anyio
import pytest

from memd.auth import acting_as, current_actor
from memd.server.threads import Threads, in_thread


def test_runs_in_another_thread_and_returns_its_value() -> None:
    async def main() -> tuple[int, int, int]:
        loop_thread = threading.get_ident()
        value, worker = await in_thread(lambda a, *, b: (a + b, threading.get_ident()), 2, b=3)
        return value, worker, loop_thread

    value, worker, loop_thread = asyncio.run(main())
    assert value == 5
    assert worker != loop_thread


def test_the_callers_context_goes_with_it() -> None:
    """Team mode's acting user is a context variable the store reads in the thread."""
    async def main() -> tuple[str | None, str | None]:
        with acting_as("alice"):
            inside = await in_thread(current_actor)
        return inside, await in_thread(current_actor)

    assert asyncio.run(main()) == ("alice", None)


def test_its_error_reaches_the_caller() -> None:
    def refuse() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        asyncio.run(in_thread(refuse))


def test_a_cancelled_caller_waits_for_the_work_to_end() -> None:
    """As anyio's run_sync: the cancellation goes on only once the function returned,
    so a call's write is never left running after its handler is gone."""
    started, release = threading.Event(), threading.Event()
    done: list[str] = []

    def work() -> None:
        started.set()
        release.wait(10)
        done.append("written")

    async def main() -> list[str]:
        seen: list[str] = []
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                try:
                    await in_thread(work)
                finally:
                    seen.extend(done)  # what had finished when the call ended

            tg.start_soon(call)
            await anyio.to_thread.run_sync(started.wait, 10)
            tg.cancel_scope.cancel()
            await asyncio.sleep(0.05)  # the cancellation is delivered meanwhile
            release.set()
        return seen

    assert asyncio.run(main()) == ["written"]


def test_the_thread_idle_last_takes_the_next_call() -> None:
    """One call's two trips (prepare, then store the reply) run in the same thread when
    calls do not overlap."""
    async def main() -> set[int]:
        return {await in_thread(threading.get_ident) for _ in range(5)}

    assert len(asyncio.run(main())) == 1


def test_a_call_waits_for_a_thread_when_all_are_busy() -> None:
    pool = Threads(limit=1)
    release = threading.Event()
    first = pool.submit(lambda: release.wait(10) and threading.get_ident())
    second = pool.submit(threading.get_ident)
    assert not second.done()
    release.set()
    assert second.result(10) == first.result(10)
