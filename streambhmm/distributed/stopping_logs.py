"""Tracebacks distributed logs while a run stops, which tell the user nothing: filtered out
in the command's process (quiet_interrupted_sync) and, preloaded by distributed, in the
embedded cluster's worker processes (dask_setup). Nothing is lost: the run is stopping.
There, too, a worker leaves Ctrl-C to the command (dask_setup)."""

from __future__ import annotations

import logging

from ..io.stops import ignore_terminal_stops


def _interrupted_sync(record: logging.LogRecord) -> bool:
    """False for the traceback Ctrl-C leaves after a Client call it stops: distributed's sync()
    then cancels a future it may not have made yet (a NameError that tornado logs in the
    client's event loop; distributed 2026.8)."""
    error = record.exc_info[1] if record.exc_info else None
    return not (isinstance(error, NameError) and "sync.<locals>.cancel" in record.getMessage())


def _forgotten_gather(record: logging.LogRecord) -> bool:
    """False for the embedded scheduler's error on a gather of results it has already
    forgotten: Ctrl-C released the futures while the client was gathering them (a helper's
    audit; the ctrl-c test failed on it one run in four). The client raises on such a gather
    itself, so the line adds nothing where the results matter."""
    states = record.args  # logging keeps a lone mapping argument as the args themselves
    return not (record.msg == "Couldn't gather keys: %s" and isinstance(states, dict)
                and states and set(states.values()) == {"forgotten"})


def _closing_heartbeat(record: logging.LogRecord) -> bool:
    """False for a worker's heartbeat cut off as the cluster closes (its own connection pool
    closing, or the scheduler's end of the connection), which distributed logs as an error
    with a traceback. The embedded scheduler lives in the command's process: it goes only
    when the command does."""
    from distributed.comm.core import CommClosedError

    error = record.exc_info[1] if record.exc_info else None
    return not (record.getMessage().startswith("Failed to communicate with scheduler during heartbeat")
                and isinstance(error, CommClosedError))


def _client_gone(record: logging.LogRecord) -> bool:
    """False for a worker's error on sending results to a client that closed the connection
    (``who`` None: not another worker) as Ctrl-C stopped the command while it gathered them
    (the ctrl-c test failed on its traceback once in several full runs)."""
    from distributed.comm.core import CommClosedError

    error = record.exc_info[1] if record.exc_info else None
    return not (record.msg == "failed during get data with %s -> %s" and isinstance(error, CommClosedError)
                and isinstance(record.args, tuple) and len(record.args) == 2 and record.args[1] is None)


def _peer_gone(record: logging.LogRecord) -> bool:
    """False for a worker's error on fetching a task's input from another worker whose
    connection closed (Ctrl-C closing the cluster while the workers passed a pass's partials
    between them: the ctrl-c test failed on its traceback once, on a slow host). distributed
    recovers from it itself (the input is fetched elsewhere or computed again), and a worker
    that died is the scheduler's to report, as the command does when its tasks fail."""
    from distributed.comm.core import CommClosedError

    error = record.exc_info[1] if record.exc_info else None
    return not (record.msg == "Worker stream died during communication: %s" and isinstance(error, CommClosedError))


def _add_filter(logger_name: str, keep) -> None:
    logger = logging.getLogger(logger_name)
    if keep not in logger.filters:
        logger.addFilter(keep)


def quiet_interrupted_sync() -> None:
    _add_filter("tornado.application", _interrupted_sync)
    _add_filter("distributed.scheduler", _forgotten_gather)


def dask_setup(worker) -> None:  # distributed's preload hook, in each worker process
    _add_filter("distributed.worker", _closing_heartbeat)
    _add_filter("distributed.worker", _client_gone)
    _add_filter("distributed.worker", _peer_gone)
    # A Ctrl-C in a terminal reaches the whole process group: it ended the workers at once, each
    # printing a traceback, so `batch` could not stop its ingests before their commits. The
    # command stops their tasks, and then the cluster. So does a closed terminal's SIGHUP.
    ignore_terminal_stops()
    # the command removes the workers' directory as they close: not an error to log
    logging.getLogger("distributed.diskutils").setLevel(logging.CRITICAL)
