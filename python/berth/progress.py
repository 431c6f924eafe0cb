"""The progress ``wait()`` shows, as ``berth wait`` draws it (src/cli/wait_cmds.cpp).

On a terminal one line is redrawn in place (``\\r``): a bar, then pending / running / succeeded /
failed (and cancelled), how many are done, the rate at which jobs end and the time left at that rate.
Anywhere else (a notebook, a log file, a pipe) a plain line is printed each time the counts change.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Optional

from .models import Progress

BAR_WIDTH = 24


def format_duration(seconds: float) -> str:
    """A short duration: 45s, 3m05s, 1h02m."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def is_terminal(stream: IO[str]) -> bool:
    """Whether `stream` is a terminal that takes \\r redraws."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressView:
    """Draws successive Progress snapshots of what is waited for (`what`: "group 3", "job 7")."""

    def __init__(self, what: str, stream: Optional[IO[str]] = None) -> None:
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = is_terminal(self.stream)
        self.started = time.monotonic()
        self.first: Optional[Progress] = None
        self.last: Optional[Progress] = None
        self.open_line = False

    def line(self, p: Progress, why: str = "") -> str:
        """The progress line for `p`."""
        if self.first is None:
            self.first = p
        elapsed = time.monotonic() - self.started
        rate = (p.done - self.first.done) / elapsed if elapsed > 0.5 else 0.0
        if p.finished:
            eta = "0s"
        elif rate > 0:
            eta = format_duration((p.total - p.done) / rate)
        else:
            eta = "-"
        cancelled = f", {p.cancelled} cancelled" if p.cancelled else ""
        text = (f"{self.what}: {p.pending} pending, {p.running} running, {p.succeeded} succeeded, "
                f"{p.failed} failed{cancelled} | {p.done}/{p.total} done, {rate:.1f}/s, ETA {eta}")
        if why:
            text += " | " + why
        return text

    def show(self, p: Progress, why: str = "") -> None:
        """Draws `p`: redrawn in place on a terminal, else a new line when the counts changed."""
        text = self.line(p, why)
        if self.tty:
            filled = int(BAR_WIDTH * p.done / p.total) if p.total else 0
            bar = "[" + "#" * filled + "-" * (BAR_WIDTH - filled) + "] "
            self.stream.write("\r\033[K" + bar + text)
            self.open_line = True
        elif self.last is None or p != self.last or p.finished:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.last = p

    def close(self) -> None:
        """Ends the redrawn line (on a terminal)."""
        if self.tty and self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False
