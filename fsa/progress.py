"""Progress of long compiles (opt-in): what stage a compile is in, once it has run ~2 s.

A compile is front end → byte NFA → lift (component walks, then the plain walk in chunks) →
label rows.  The compilers report each stage here (:func:`report`); nothing is shown unless the
caller asked for it with :func:`compile_progress`, and then only for a compile that has run for
``after`` seconds (default 2: most schemas compile in well under a second, and a line for each
would be noise), then every ``every`` seconds (the stage the compile is in then, shown by a
timer thread), plus a last line with the total when a compile that printed anything ends.
``tractable compile`` turns it on (on stderr; ``--no-progress`` turns it off).

    from tractable.fsa.progress import compile_progress
    with compile_progress():                        # lines on stderr
        A = tractable.compile_json_schema(schema, vocab)
    with compile_progress(lambda p: log.info("%s", p.line())):   # or any callback
        ...

A callback gets a :class:`Progress`: ``stage`` (``"byte NFA"``, ``"lift: components"``,
``"lift: walk"``, ``"labels"``, ``"done"``), ``done``/``total`` where the stage counts, and
``elapsed`` seconds since the compile started.  Reporting is context-local (a ``contextvars``
variable), so threads and tasks compiling side by side report separately; the callback runs
in the reporter's timer thread.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from .errors import InvalidArgumentError

__all__ = ["Progress", "compile_progress", "report", "compile_stage"]


@dataclass(frozen=True)
class Progress:
    """One progress event: ``stage``, ``done``/``total`` (None where the stage does not count)
    and ``elapsed`` seconds since the compile started."""

    stage: str
    done: int | None
    total: int | None
    elapsed: float

    def line(self) -> str:
        count = f" {self.done:,}/{self.total:,}" if self.done is not None and self.total else ""
        return f"tractable: compiling, {self.elapsed:5.1f} s: {self.stage}{count}"


class _Reporter:
    """What one :func:`compile_progress` block shows.  The compiling thread records its stage
    (:func:`report`) and shows it at once when the compile has run ``after`` seconds and
    nothing was shown for ``every`` seconds; a timer thread started with the outermost compile
    shows the current stage on the same schedule while no report comes, so a long stage is
    seen while it runs, not only when the next one starts."""

    def __init__(self, callback: Callable[[Progress], None], after: float, every: float):
        self.callback = callback
        self.after = after
        self.every = every
        self.depth = 0
        self.t0 = 0.0
        self.current: tuple[str, int | None, int | None] = ("start", None, None)
        self.shown = False
        self.last = -float("inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _emit(self, due: bool = False) -> None:
        """Show the current stage (``due``: only if the schedule says so)."""
        with self._lock:
            now = time.perf_counter()
            if due and (now - self.t0 < self.after or now - self.last < self.every):
                return
            stage, done, total = self.current
            self.shown, self.last = True, now
            self.callback(Progress(stage, done, total, now - self.t0))

    def _run(self) -> None:
        if self._stop.wait(self.after):
            return
        while True:
            self._emit(due=True)
            if self._stop.wait(max(self.every, 0.05)):
                return

    def begin(self) -> None:
        self.t0, self.shown, self.current = time.perf_counter(), False, ("start", None, None)
        self.last = -float("inf")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tractable-progress",
                                        daemon=True)
        self._thread.start()

    def end(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.shown:
            self.current = ("done", None, None)
            self._emit()


_CURRENT: contextvars.ContextVar[_Reporter | None] = contextvars.ContextVar(
    "tractable_compile_progress", default=None)


def _printer(stream: TextIO | None) -> Callable[[Progress], None]:
    def show(p: Progress) -> None:
        out = sys.stderr if stream is None else stream
        print(p.line(), file=out, flush=True)

    return show


@contextmanager
def compile_progress(callback: Callable[[Progress], None] | None = None, *, after: float = 2.0,
                     every: float = 1.0, stream: TextIO | None = None) -> Iterator[None]:
    """Report the progress of the compiles run inside: to ``callback``, or as lines on
    ``stream`` (default ``sys.stderr``), for each compile once it has run ``after`` seconds, at
    most one event per ``every`` seconds.  Raises :class:`~.errors.InvalidArgumentError` for
    negative times."""
    if after < 0 or every < 0:
        raise InvalidArgumentError(f"after and every must be >= 0 (got {after}, {every})")
    rep = _Reporter(callback if callback is not None else _printer(stream), after, every)
    token = _CURRENT.set(rep)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextmanager
def compile_stage() -> Iterator[None]:
    """Mark one compile (nested compiles count as part of the outermost): starts its clock and
    the reporter's timer, and at its end reports ``"done"`` when anything was shown.  No
    reporter: does nothing.  Also a decorator (``@compile_stage()``)."""
    rep = _CURRENT.get()
    if rep is None:
        yield
        return
    if rep.depth == 0:
        rep.begin()
    rep.depth += 1
    try:
        yield
    finally:
        rep.depth -= 1
        if rep.depth == 0:
            rep.end()


def report(stage: str, done: int | None = None, total: int | None = None) -> None:
    """Record that the current compile is at ``stage`` (``done`` of ``total``), and show it when
    it is due (see :class:`_Reporter`).  Cheap when no one listens (one context-variable
    read)."""
    rep = _CURRENT.get()
    if rep is not None and rep.depth:
        rep.current = (stage, done, total)
        rep._emit(due=True)
