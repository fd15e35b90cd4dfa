"""The console script (and ``python -m streambhmm``), kept apart from the commands' modules so
that what it sets up is in place before they are imported: a SIGTERM (a batch scheduler's
time limit, ``kill``) unwinds a command as Ctrl-C does, so its temporaries, scratch stores and
embedded cluster go with it; Ctrl-C during the imports ends the command without a traceback."""

import signal
import sys


def run() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    try:
        from .cli import main
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    main()


def _terminated(signum, frame):
    raise SystemExit(128 + signum)
