"""Progress feedback for long runs: a live bar on a terminal / notebook, log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("gpupipe.progress")


class LogProgress:
    """Logs a line about every 10% (batch jobs, CI logs)."""

    def __init__(self):
        self.label, self.total, self.done, self.next_pct, self.t0 = "", 0, 0, 0, 0.0

    def start(self, label: str, total: int, done: int = 0) -> None:
        self.label, self.total, self.done, self.next_pct = label, total, done, 10
        self.t0 = time.perf_counter()
        log.info("%s: %d task(s)%s", label, total,
                 f", {done} already done (resumed)" if done else "")

    def advance(self, n: int = 1) -> None:
        self.done += n
        pct = 100 * self.done // max(self.total, 1)
        if pct >= self.next_pct or self.done == self.total:
            log.info("%s: %d/%d tasks (%.1fs)", self.label, self.done, self.total,
                     time.perf_counter() - self.t0)
            self.next_pct = (pct // 10 + 1) * 10

    def close(self) -> None:
        pass


class RichProgress:
    """A live progress bar (rich) on stderr; works in terminals and Jupyter."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        self._progress.start()
        self._task = None

    def start(self, label: str, total: int, done: int = 0) -> None:
        from rich.markup import escape

        self._task = self._progress.add_task(escape(label), total=total, completed=done)

    def advance(self, n: int = 1) -> None:
        self._progress.advance(self._task, n)

    def close(self) -> None:
        self._progress.stop()


class NoProgress:
    def start(self, label, total, done=0):
        pass

    def advance(self, n=1):
        pass

    def close(self):
        pass


def make_progress(progress: bool | str | None):
    """True: live bar; False: silent; "log": log lines; None: bar on a terminal, else log lines."""
    if progress is False:
        return NoProgress()
    if progress == "log" or (progress is None and not sys.stderr.isatty()):
        return LogProgress()
    return RichProgress()
