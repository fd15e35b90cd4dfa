"""The console script (and ``python -m streambhmm``), kept apart from the commands' modules so
that what it sets up is in place before they are imported: a SIGTERM (a batch scheduler's
time limit, ``kill``) or SIGHUP (a closed terminal) unwinds a command as Ctrl-C does, so its
temporaries, scratch stores and embedded cluster go with it; a stop that a callback swallowed is delivered again; Ctrl-C
during the imports ends the command without a traceback."""

import _thread
import atexit
import gc
import io
import multiprocessing
import os
import signal
import stat
import sys
import threading

from ..io.stops import STOPS, ignore_terminal_stops

REDELIVERY_DELAY = 0.05  # s: the callback that swallowed the stop has returned by then

if (multiprocessing.current_process().name != "MainProcess"
        and sys.modules.get("__mp_main__", sys.modules["__main__"]) is not sys.modules["__main__"]):
    # A worker process the command spawned (an embedded Dask cluster's, a sweep's): multiprocessing
    # names it and runs the console script in it as __mp_main__ (runpy.run_path's module, in
    # sys.modules while it runs). A Ctrl-C in a terminal reaches the whole process group; the
    # command stops its workers' tasks in order, so they ignore it from here on, before their
    # imports (an embedded cluster's workers printed tracebacks when it came while they
    # started). distributed/stopping_logs.py does the same for a cluster started from Python.
    ignore_terminal_stops()


def run() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    # a closed terminal or ssh session: a stop too (nohup's SIG_IGN is kept), so the temporaries go
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        signal.signal(signal.SIGHUP, _terminated)
        STOPS.append(signal.SIGHUP)
    sys.unraisablehook = _stop_swallowed(sys.unraisablehook)
    atexit.register(_ignore_stops_if_ended)  # first registered, so the last to run
    sys.stdout, sys.stderr = _reader_may_leave(sys.stdout), _reader_may_leave(sys.stderr)
    try:
        from .cli import main
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    try:
        main()
    except SystemExit as ended:
        exit_on_late_stop(ended.code)
        # The command is done. The interpreter's shutdown would run full garbage collections
        # over every object the imports made (numba, scipy, Dask): 0.3-0.5 s a process,
        # measured. Frozen, those are left to the operating system; exit handlers still run,
        # and objects outside reference cycles are still released (files are closed by then).
        gc.freeze()
        raise


class _DroppedOnceGone(io.RawIOBase):
    """A pipe's file descriptor, written as usual until its reader leaves; then what is written
    is dropped."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd, self.gone = fd, False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return False

    def write(self, data) -> int:
        if not self.gone:
            try:
                return os.write(self.fd, data)
            except ConnectionError:  # EPIPE; ECONNRESET from a socket's reader that left with data unread
                self.gone = True
        return len(data)


def _reader_may_leave(stream):
    """``stream`` (standard output or error) as it is, unless it is a pipe or socket: then a
    stream that drops what is written once the reader has left (`streambhmm decode ... | head
    -1`), where a BrokenPipeError stopped the command before its files were in place (a
    helper's audit lost decode's and fit's outputs so). The command ends as it would have."""
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no file descriptor: a test's captured stream
        return stream
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return stream
    stream.flush()
    return io.TextIOWrapper(io.BufferedWriter(_DroppedOnceGone(stream.fileno())), encoding=stream.encoding,
                            errors=stream.errors, line_buffering=stream.line_buffering)


_ended = False  # the command has ended (exit_on_late_stop)


def exit_on_late_stop(code) -> None:
    """The command has ended with ``code`` (its outputs in place, or its error said): a Ctrl-C
    or SIGTERM while the interpreter shuts down would only turn that status into -2 or -15
    (seen: a pipeline counted a finished `pmd` as failed). Such a stop now ends the process
    at once with the command's status; once the last exit handler has run, stops are ignored
    (the interpreter's finalization would reset our handlers to the default action, which
    kills: it keeps SIG_IGN, and nothing after it can wait)."""
    global _ended
    status = code if isinstance(code, int) else 0 if code is None else 1
    for signum in STOPS:
        signal.signal(signum, lambda *_: os._exit(status))
    _ended = True


def _ignore_stops_if_ended():
    if _ended:
        for signum in STOPS:
            signal.signal(signum, signal.SIG_IGN)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _stop_swallowed(hook):
    """``hook`` (sys.unraisablehook), which also delivers again a Ctrl-C or SIGTERM raised
    where Python can only print it: a ctypes callback, as llvmlite's while numba compiles
    (seen: Ctrl-C during `dmr` printed "Exception ignored on calling ctypes callback
    function ... KeyboardInterrupt", and the command ran on). It is delivered to the main
    thread from another, once the callback has returned (raised in the hook, it would be
    swallowed too)."""

    def unraisable(args):
        hook(args)
        if args.exc_type is not None and issubclass(args.exc_type, (KeyboardInterrupt, SystemExit)):
            signum = signal.SIGINT if issubclass(args.exc_type, KeyboardInterrupt) else signal.SIGTERM
            redelivery = threading.Timer(REDELIVERY_DELAY, _thread.interrupt_main, (signum,))
            redelivery.daemon = True
            redelivery.start()

    return unraisable
