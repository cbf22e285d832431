"""Progress of a long write (``insert_memories``'s embedding and storing phases): a rich bar
on a terminal, plain lines on stderr otherwise (logs, CI, ``nohup``), and a timed stage per
phase."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

PROGRESS_INTERVAL = 5.0
"""Seconds between two progress lines when the output is not a terminal."""


class PhaseProgress:
    """``on_progress`` for :func:`~llama_index_recency.writing.updates.insert_memories`.

    On a terminal (``console.is_terminal``): a transient bar per phase. Otherwise, on
    ``lines`` (stderr): ``storing: 1200/5000 memories, 240/s, ETA 16 s`` once a phase has
    run ``interval`` seconds and then at most every ``interval`` seconds, and a closing
    ``storing: 5000/5000 memories, 250/s, done in 20 s`` for a phase that printed any. A
    phase shorter than ``interval`` prints nothing: short writes stay quiet, and a failure
    stays the one line on stderr. ``record(name, seconds)`` is called when a phase ends
    (``"embedding 16 memories"``).
    """

    def __init__(self, console: Console, lines: Console,
                 record: Callable[[str, float], None], *,
                 clock: Callable[[], float] = time.monotonic,
                 interval: float | None = None) -> None:
        self._lines, self._record, self._clock = lines, record, clock
        self._interval = PROGRESS_INTERVAL if interval is None else interval
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console, transient=True,
                             disable=not console.is_terminal)
        self._terminal = console.is_terminal
        self._phase: str | None = None
        self._started = self._shown_at = 0.0
        self._shown = False
        self._task: TaskID | None = None

    @property
    def phase(self) -> str | None:
        """The phase under way (or last reported): "embedding", "storing", or None before any."""
        return self._phase

    def __enter__(self) -> PhaseProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._bar.__exit__(kind, error, traceback)

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self._clock()
        if phase != self._phase or done == 0:  # a phase starts (reported with done 0)
            self._phase, self._shown = phase, False
            self._started = self._shown_at = now
            self._task = self._bar.add_task(f"{phase} memories", total=total)
        assert self._task is not None
        self._bar.update(self._task, completed=done, total=total)
        elapsed = now - self._started
        if done >= total:
            self._record(f"{phase} {total} memories", elapsed)
            if not self._terminal and (self._shown or elapsed >= self._interval):
                self._lines.print(Text(f"{phase}: {done}/{total} memories{_rate(done, elapsed)}"
                                       f", done in {_seconds(elapsed)}"))
        elif not self._terminal and done and now - self._shown_at >= self._interval:
            eta = f", ETA {_seconds((total - done) * elapsed / done)}" if done and elapsed else ""
            self._lines.print(Text(f"{phase}: {done}/{total} memories{_rate(done, elapsed)}{eta}"))
            self._shown_at, self._shown = now, True


def _rate(done: int, elapsed: float) -> str:
    return f", {done / elapsed:.0f}/s" if elapsed > 0 else ""


def _seconds(seconds: float) -> str:
    """``16 s``, ``2 min 05 s``."""
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"
