"""Progress of the steps that take long: one module for every command.

A step is a ``stage``: a name, what is done out of a total (bytes, chunks, starts, folds,
replicates, iterations) and, optionally, a note (EM's log-likelihood). On a terminal it is one
line on standard error, updated in place by tqdm (stage, done/total, elapsed, time left) and
cleared when the step ends, redrawn at most every REDRAW seconds; it is drawn when the step
starts and its clock redrawn every TICK seconds, so a step of one long task (a chromosome's
chunk, a first run's compilation) shows its time passing. Without a terminal (a pipe,
a log file, CI) a line is written every ``$STREAMBHMM_PROGRESS_EVERY`` seconds (5) instead,
news or not, and a last one when a step that wrote one ends with a count not yet written (0: a line, or a
redraw, at every update, and none between).
``quiet`` writes nothing. A ``capped`` step's total is a cap it may stop before (EM's
iterations): it shows no time left. While numba compiles a kernel (a first run after
installation: 20 s and more of a first `hmr`), the line says so (COMPILING).

Stages nest (a sweep's number of states, then that fit's starts): the innermost is shown,
after its outer stages' names and counts. Code below the command line takes a plain
``progress(done, total)`` callback, which a Stage is; messages printed while a stage is shown
go through :func:`printing`, so the line is cleared first and redrawn after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from typing import Iterator

EVERY_ENV = "STREAMBHMM_PROGRESS_EVERY"
EVERY = 5.0  # seconds between lines without a terminal
REDRAW = 0.2  # seconds between redraws of the line on a terminal (or $STREAMBHMM_PROGRESS_EVERY if shorter)
TICK = 1.0  # seconds between redraws of a terminal line's clock while its step has no news
SEPARATOR = " > "
COMPILING = "compiling numba kernels, once per installation"

_active: list["Stage"] = []  # the stages open now, outermost first
_lock = threading.RLock()
_last_line = [0.0]  # when the last line was written without a terminal
_last_written = [0.0]  # the same by the machine's clock (time.monotonic), which the ticks go by
_compiling = [0]  # threads in a numba compilation now
_watching = [False]  # a listener is on numba's compile events


def _now() -> float:
    return time.time()  # tqdm's clock: a stage's start is its bar's


def _tqdm():
    from tqdm import tqdm  # imported on first use: the command line starts without it

    return tqdm


def every() -> float:
    """Seconds between progress lines without a terminal ($STREAMBHMM_PROGRESS_EVERY)."""
    text = os.environ.get(EVERY_ENV)
    if text is None:
        return EVERY
    try:
        return max(float(text), 0.0)
    except ValueError:
        raise ValueError(f"${EVERY_ENV} must be a number of seconds, got {text!r}") from None


def _size() -> os.terminal_size:
    """The terminal's size (one that reports none, as a bare pseudo-terminal: 100 x 24, where
    tqdm itself would draw nothing)."""
    return shutil.get_terminal_size((100, 24))


class Stage:
    """The progress of one step; ``stage(done, total=None, note=None)`` sets it,
    ``stage.advance(n)`` adds to it."""

    def __init__(self, name: str, total: int | None, unit: str, unit_scale: bool, stream, terminal: bool,
                 capped: bool = False):
        self.name, self.total, self.unit, self.unit_scale, self.capped = name, total, unit, unit_scale, capped
        self.stream, self.terminal = stream, terminal
        self.done, self.note, self.started, self.opened = 0, "", _now(), time.monotonic()
        self.logged = None  # without a terminal: (done, total, note) of the last line written
        self.bar = None

    @property
    def counted(self) -> str:
        """The stage as an outer one shows it: name, done/total and its note."""
        text = f"{self.name} {min(self.done + 1, self.total)}/{self.total}" if self.total else self.name
        return f"{text} ({self.note})" if self.note else text

    @property
    def waiting(self) -> bool:
        """A step that counts nothing (no total, no unit): shown by its time alone."""
        return not (self.total or self.unit)

    def shown_note(self) -> str:
        """The note, and that numba is compiling when it is."""
        return ", ".join(part for part in (self.note, COMPILING if _compiling[0] else "") if part)

    def description(self) -> str:
        outer = [s.counted for s in _active if s is not self]
        return SEPARATOR.join([*outer, self.name])

    def __call__(self, done: int, total: int | None = None, note: str | None = None) -> None:
        with _lock:
            self.done = int(done)
            if total is not None:
                self.total = int(total)
            if note is not None:
                self.note = note
            self._show()

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self(self.done + n, note=note)

    def _show(self) -> None:
        if _active and _active[-1] is not self:  # an inner stage has the line
            return
        if self.terminal:
            self._draw()
            return
        now = _now()
        if now - max(_last_line[0], _active[0].started if _active else self.started) >= every():
            self._line(now)

    def _draw(self) -> None:
        made = self.bar is None
        if made:
            self.bar = _tqdm()(total=self.total, initial=self.done, desc=self.description(), unit=self.unit or "it",
                               unit_scale=self.unit_scale, unit_divisor=1024 if self.unit_scale else 1000,
                               file=self.stream, leave=False, ncols=_size().columns, nrows=_size().lines,
                               mininterval=min(REDRAW, every()), miniters=1, smoothing=0.1,
                               bar_format=BAR_CAPPED if self.capped else BAR_WAITING if self.waiting else None)
            self.bar.start_t = self.started
        bar = self.bar
        bar.ncols, bar.nrows = _size()  # the window may change
        retotalled = self.total != bar.total
        if retotalled:
            bar.total = self.total
        note = self.shown_note()
        if note or bar.postfix:  # (a note gone: the compilation ended)
            bar.set_postfix_str(note, refresh=False)
        bar.update(self.done - bar.n)
        if made or retotalled:
            bar.refresh()  # tqdm drew it when made, before its start and note were set; update(0) draws nothing

    def _line(self, now: float) -> None:
        _last_line[0] = now
        _last_written[0] = time.monotonic()
        self.logged = (self.done, self.total, self.note)
        text = _tqdm().format_meter(self.done, self.total, now - self.started, prefix=self.description(),
                                    unit=self.unit or "it", unit_scale=self.unit_scale,
                                    unit_divisor=1024 if self.unit_scale else 1000, postfix=self.shown_note() or None,
                                    bar_format=LINE_CAPPED if self.capped else LINE if self.total
                                    else LINE_WAITING if self.waiting else LINE_UNKNOWN)
        self.stream.write(text + "\n")
        self.stream.flush()

    def tick(self, stopped: threading.Event) -> None:
        """Until ``stopped``, while this step is the one shown: on a terminal, redraw its line
        every TICK seconds (its elapsed time); elsewhere, write a line when none was written
        for ``every()`` seconds, though the step has no news (looked at every TICK seconds, or
        every ``every()`` when shorter)."""
        while not stopped.wait(TICK if self.terminal else min(TICK, every() or TICK)):
            with _lock:
                if not (_active and _active[-1] is self):
                    continue
                if self.terminal:
                    if self.bar is not None:
                        self.bar.refresh()
                elif 0 < every() <= time.monotonic() - max(_last_written[0], _active[0].opened):
                    self._line(_now())

    def hide(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


LINE = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed} elapsed, {remaining} left, {rate_fmt}]{postfix}"
LINE_UNKNOWN = "{desc}: {n_fmt} [{elapsed} elapsed, {rate_fmt}]{postfix}"
LINE_CAPPED = "{desc}: {n_fmt} of at most {total_fmt} [{elapsed} elapsed, {rate_fmt}]{postfix}"
BAR_CAPPED = "{desc}: {n_fmt} of at most {total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
# a step that counts nothing (no total, no unit), a wait: its time alone
LINE_WAITING = "{desc} [{elapsed} elapsed]{postfix}"
BAR_WAITING = "{desc} [{elapsed}{postfix}]"


class _Silent:
    """A quiet stage: takes the calls, shows nothing."""

    done, total = 0, None

    def __call__(self, done: int, total: int | None = None, note: str | None = None) -> None:
        self.done = done
        self.total = total if total is not None else self.total

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.done += n


@contextlib.contextmanager
def stage(name: str, total: int | None = None, *, quiet: bool = False, unit: str = "",
          unit_scale: bool = False, capped: bool = False) -> Iterator[Stage]:
    """A step's progress while the block runs (see the module docstring): ``unit`` names
    what is counted ("B" with ``unit_scale`` for bytes, shown as kB, MB...); ``capped``: the
    total is a cap the step may stop before. Without a total or a unit, the step is a wait,
    shown by its time alone."""
    stream = sys.stderr
    if quiet or stream is None:  # None: standard error closed (2>&-), nowhere to show it
        yield _Silent()
        return
    terminal = bool(getattr(stream, "isatty", lambda: False)())
    _watch_compilations()
    stopped = threading.Event()
    with _lock:
        if _active:
            _active[-1].hide()
        current = Stage(name, total, unit, unit_scale, stream, terminal, capped)
        _active.append(current)
        if terminal:
            current._draw()
        threading.Thread(target=current.tick, args=(stopped,), name="progress clock", daemon=True).start()
    try:
        yield current
    finally:
        stopped.set()
        with _lock:
            current.hide()
            if current.logged not in (None, (current.done, current.total, current.note)) and not terminal:
                current._line(_now())  # the step's last count, unless its last line showed it
            _active.remove(current)
            if not _active:
                _last_line[0] = 0.0
            elif terminal:
                _active[-1]._draw()  # the outer step's line again, its clock running


def _compilation(change: int) -> None:
    with _lock:
        _compiling[0] += change
        if _active:
            try:
                _active[-1]._show()
            except Exception:  # (a closed standard error): never into numba, whose kernel call would fail
                pass


def _watch_compilations() -> None:
    """Once numba is loaded (the commands that compile load it before their steps), follow
    its compile events: numba reports only compilations, not loads from its cache."""
    with _lock:
        if _watching[0] or "numba" not in sys.modules:
            return
        _watching[0] = True
    from numba.core import event

    depth = threading.local()  # a kernel compiles the kernels it calls inside its own event

    class Compiling(event.Listener):
        def on_start(self, ev) -> None:
            depth.n = getattr(depth, "n", 0) + 1
            if depth.n == 1:
                _compilation(+1)

        def on_end(self, ev) -> None:
            n = getattr(depth, "n", 0)
            if n == 0:  # a compilation that started before the listener: it was not counted
                return
            depth.n = n - 1
            if n == 1:
                _compilation(-1)

    event.register("numba:compile", Compiling())


@contextlib.contextmanager
def printing() -> Iterator[None]:
    """Messages written in this block go above the progress line (it is cleared, then redrawn)."""
    with _lock:
        if not any(s.bar is not None for s in _active):
            yield
            return
        with _tqdm().external_write_mode():
            yield


def printed(echo):
    """``echo`` that writes above the progress line (:func:`printing`)."""
    def write(message) -> None:
        with printing():
            echo(message)
    return write


def em_progress(shown):
    """EM's ``report(iteration, loglik)`` as a progress stage: the iteration out of the cap,
    the log-likelihood and the last gain."""
    history = []

    def report(iteration: int, loglik: float) -> None:
        gain = f" ({loglik - history[-1]:+.3g})" if history else ""
        history.append(loglik)
        shown(iteration, note=f"loglik {loglik:.8g}{gain}")
    return report
