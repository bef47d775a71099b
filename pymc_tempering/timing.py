"""Where a call's seconds go: the phase report of a sampler's result.

An entry point opens a report (:func:`phase_report`) around its work; the functions that do a
phase (the mode search, the base fit, the compilation, tuning, sampling, the weights, the checks)
say so with :func:`phase`, wherever they are called from. Phases nest, and each second counts
once, in the innermost phase open at that moment: the mode search inside the base fit is
``mode_search``'s, the rest of the fit the base fit's. What no phase claims is ``other``. Outside a
report :func:`phase` costs a clock read and records nothing.

Written here because it is a stack of timers in a context variable, which nothing in the
ecosystem keeps in this shape (the profilers time functions, not a call's phases).
"""

from __future__ import annotations

import contextlib
import functools
import time
from contextvars import ContextVar

import xarray as xr
from xarray import DataTree

__all__ = ["PHASES", "TIMING", "add_phase", "phase", "phase_report", "timed"]

#: The phases, in the order a run goes through them.
PHASES = (
    "mode_search", "base_fit", "compile", "tuning", "sampling", "weights", "checks", "other",
)

#: The result group that holds the seconds per phase.
TIMING = "timing"

_REPORT: ContextVar = ContextVar("pymc_tempering_phase_report", default=None)


class _Report:
    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.stack: list[list] = []  # [phase, started] of the open phases, innermost last
        self.started = time.perf_counter()

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        if self.stack:  # the outer phase pauses
            outer = self.stack[-1]
            self.seconds[outer[0]] += now - outer[1]
        self.stack.append([name, now])

    def leave(self) -> None:
        now = time.perf_counter()
        name, started = self.stack.pop()
        self.seconds[name] += now - started
        if self.stack:
            self.stack[-1][1] = now

    def total(self) -> dict[str, float]:
        seconds = dict(self.seconds)
        elapsed = time.perf_counter() - self.started
        seconds["other"] = max(0.0, elapsed - sum(seconds.values()))
        seconds["total"] = elapsed
        return seconds


@contextlib.contextmanager
def phase(name: str):
    """Count the seconds of the block as phase ``name`` of the open report (if any)."""
    if name not in PHASES:
        raise ValueError(f"Unknown phase {name!r}; the phases are {PHASES}.")
    report = _REPORT.get()
    if report is None:
        yield
        return
    report.enter(name)
    try:
        yield
    finally:
        report.leave()


def add_phase(name: str, seconds: float, within: str) -> None:
    """Move ``seconds`` already counted as phase ``within`` to phase ``name`` (a split known only
    afterwards: the tuning inside a sampler's run)."""
    report = _REPORT.get()
    if report is not None:
        seconds = min(float(seconds), report.seconds[within])
        report.seconds[within] -= seconds
        report.seconds[name] += seconds


@contextlib.contextmanager
def phase_report():
    """Open a report for the block; yields a function giving the seconds per phase so far
    (a dict over :data:`PHASES` and ``total``). A report open already (a method called by
    another) is the one counted into, and the inner call's is the outer's."""
    report = _REPORT.get()
    if report is not None:
        yield report.total
        return
    report = _Report()
    token = _REPORT.set(report)
    try:
        yield report.total
    finally:
        _REPORT.reset(token)


def timed(method):
    """Give ``method``'s result (a ``DataTree``) the group :data:`TIMING`: the seconds of the
    call per phase (:data:`PHASES`) and in ``total``. A call inside another timed one (a
    method that runs another) counts into the outer call's report and adds no group."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        outer = _REPORT.get() is not None
        with phase_report() as seconds:
            result = method(*args, **kwargs)
        if not outer and isinstance(result, DataTree):
            result[TIMING] = DataTree(xr.Dataset(
                {name: ((), value) for name, value in seconds().items()},
                attrs={"unit": "seconds"},
            ))
        return result

    return wrapper
