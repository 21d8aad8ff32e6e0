"""The store's blocking work, handed from the event loop to a thread in one step.

A proxied chat call goes to a thread twice on its path (to store what is new and build
what goes upstream, then to store the reply), and an agent's tool-loop step is short
enough for the trips to show in the latency memd adds. Starlette's
``run_in_threadpool`` (anyio's worker threads) takes several turns of the event loop
per trip (a checkpoint, the capacity limiter's, the result's); :func:`in_thread` takes
one: the function is handed to a thread of the server's own, its result comes back
through the loop's own future. The thread most recently idle takes it (anyio's order
too; a thread pool's shared queue wakes them in turn), so that one call's two trips run
in the same thread, its caches warm, when calls do not overlap.

What anyio's trip guarantees is kept: the function runs in a copy of the caller's
context (team mode's acting user is a context variable the store reads), and a caller
cancelled meanwhile (its client gone) still waits for the function to end before the
cancellation goes on, so no write of the call is left running unseen.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, ParamSpec, TypeVar

import anyio

P = ParamSpec("P")
T = TypeVar("T")

# As many threads as anyio's default limit: the calls that may wait on the store at once.
MAX_THREADS = 40

Job = tuple[Callable[[], Any], "Future[Any]"]


class Threads:
    """Up to ``limit`` threads, started as needed; a job goes to the thread that became
    idle last, or waits for the first one free when all are busy."""

    def __init__(self, limit: int = MAX_THREADS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Job]] = []  # each idle thread's inbox
        self._waiting: list[Job] = []  # jobs for which no thread was free
        self._started = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        job: Job = (fn, future)
        with self._lock:
            if self._idle:
                self._idle.pop().put(job)
            elif self._started < self.limit:
                self._started += 1
                threading.Thread(target=self._serve, args=(job,), daemon=True,
                                 name=f"memd-call-{self._started}").start()
            else:
                self._waiting.append(job)
        return future

    def _serve(self, job: Job) -> None:
        inbox: queue.SimpleQueue[Job] = queue.SimpleQueue()
        while True:
            fn, future = job
            del job
            done = _call(fn) if future.set_running_or_notify_cancel() else None
            # Idle before the caller has the result: its next trip finds this thread.
            with self._lock:
                later = self._waiting.pop(0) if self._waiting else None
                if later is None:
                    self._idle.append(inbox)
            if done is not None:
                if done[0]:
                    future.set_result(done[1])
                else:
                    future.set_exception(done[1])
            del fn, future, done  # an idle thread keeps nothing of a finished call alive
            job = later if later is not None else inbox.get()


def _call(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, what ``fn`` returned) or (False, what it raised)."""
    try:
        return True, fn()
    except BaseException as exc:  # the caller's to handle, in its own thread
        return False, exc


_threads = Threads()


async def in_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` run in a thread, in a copy of the caller's context."""
    context = contextvars.copy_context()
    future = asyncio.wrap_future(
        _threads.submit(functools.partial(context.run, fn, *args, **kwargs)))
    with anyio.CancelScope(shield=True):
        result = await future
    return result
