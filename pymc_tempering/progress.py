"""The progress bar of every long loop in the library (driver loops, ADVI fits).

A leaf module, as ``pymc.progress_bar`` is: it imports nothing from the package. rich, which
PyMC already depends on, draws the bar; it is imported when a bar is shown.
"""

from __future__ import annotations

__all__ = ["progress_bar"]


class progress_bar:  # noqa: N801 - used as a context manager, like rich's own
    """A rich progress bar over ``total`` iterations; does nothing when ``enabled`` is false.

    Use as ``with progress_bar(total, "AIS", enabled) as advance: ... advance()``.
    """

    def __init__(self, total: int, description: str, enabled: bool = True):
        self.total, self.description, self.enabled = int(total), description, bool(enabled)
        self._progress = None

    def __enter__(self):
        if not self.enabled:
            return lambda n=1: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self._progress.__enter__()
        task = self._progress.add_task(self.description, total=self.total)
        return lambda n=1: self._progress.advance(task, n)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False
