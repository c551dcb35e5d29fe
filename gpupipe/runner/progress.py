"""Progress feedback for long runs: a live bar in a terminal or a notebook, log lines otherwise."""

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


class NotebookProgress:
    """A progress bar in a Jupyter cell without ipywidgets: one HTML ``<progress>`` line per
    step, updated in place through a display handle (at most ~5 updates a second), with a
    plain-text form for front ends that do not render HTML."""

    MIN_INTERVAL = 0.2

    def __init__(self):
        from IPython.display import display

        self._display = display
        self._handle = None
        self.label, self.total, self.done, self.t0, self._shown = "", 0, 0, 0.0, 0.0

    def _bundle(self) -> dict:
        import html

        elapsed = time.perf_counter() - self.t0
        total = max(self.total, 1)
        pct = 100.0 * self.done / total
        text = f"{self.label}: {self.done}/{self.total} tasks ({pct:.0f}%, {elapsed:.1f}s)"
        bar = (f'<div class="gpupipe-progress" style="font-family:monospace;font-size:12px">'
               f'<progress value="{self.done}" max="{total}" style="width:18em"></progress> '
               f'{html.escape(text)}</div>')
        return {"text/plain": text, "text/html": bar}

    def start(self, label: str, total: int, done: int = 0) -> None:
        self.label, self.total, self.done = label, total, done
        self.t0 = self._shown = time.perf_counter()
        self._handle = self._display(self._bundle(), raw=True, display_id=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if self._handle is not None and (self.done >= self.total
                                         or now - self._shown >= self.MIN_INTERVAL):
            self._shown = now
            self._handle.update(self._bundle(), raw=True)

    def close(self) -> None:
        pass


def in_notebook() -> bool:
    """True inside a Jupyter kernel (not a terminal IPython)."""
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:  # noqa: BLE001 - any failure means "not a notebook"
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


class NoProgress:
    def start(self, label, total, done=0):
        pass

    def advance(self, n=1):
        pass

    def close(self):
        pass


def make_progress(progress: bool | str | None):
    """True: live bar; False: silent; "log": log lines; None: a bar on a terminal or in a
    Jupyter notebook (HTML, no ipywidgets needed), log lines otherwise."""
    if progress is False:
        return NoProgress()
    if progress in (None, True) and in_notebook():
        return NotebookProgress()
    if progress == "log" or (progress is None and not sys.stderr.isatty()):
        return LogProgress()
    return RichProgress()
