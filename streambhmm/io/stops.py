"""The signals that stop a command: one list for the console script, which makes them stops
(app/console.py), and for the blocks that hold them off (io.outputs.interruptions_held).
Standard library only: the console script imports it before anything else."""

import signal

# SIGHUP joins where the console script makes a closed terminal a stop (not under nohup)
STOPS = [signal.SIGINT, signal.SIGTERM]


def ignore_terminal_stops() -> None:
    """For a process the command spawned (a worker): Ctrl-C and a closed terminal's SIGHUP
    reach the whole process group, and the command stops its workers in order, so they
    ignore both."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
