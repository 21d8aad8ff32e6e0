"""A settable clock for ``memd.open(clock=...)``: tests move time by setting ``t``."""

from __future__ import annotations


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
