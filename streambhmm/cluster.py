"""Where the Dask work runs: an existing scheduler, or an embedded LocalCluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys

SCHEDULER_ENV = "STREAMBHMM_SCHEDULER"


def scheduler_address(scheduler: str | None) -> str | None:
    """The --scheduler value, else $STREAMBHMM_SCHEDULER, else None (embedded cluster)."""
    return scheduler or os.environ.get(SCHEDULER_ENV) or None


class SchedulerLost(RuntimeError):
    """The Dask scheduler cannot be reached, or went away during the run."""


def lost_scheduler(client, exc: BaseException) -> bool:
    """Whether ``exc`` means the client lost its scheduler (so the run cannot go on)."""
    from distributed.comm import CommClosedError

    cancelled = isinstance(exc, (asyncio.CancelledError, concurrent.futures.CancelledError))
    return cancelled or isinstance(exc, CommClosedError) or client.status != "running"


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, n_workers: int | None = None, if_lost: str = ""):
    """A distributed Client: to ``scheduler`` if given (or in the environment), otherwise
    to a LocalCluster of one single-threaded worker process per core.

    Losing the scheduler raises :class:`SchedulerLost` (tasks cancelled for that reason,
    closed connections), its message ending with ``if_lost`` (what the user keeps); a
    killed worker is not an error: the scheduler reruns its tasks."""
    from distributed import Client, LocalCluster

    address = scheduler_address(scheduler)
    if address:
        try:
            client = Client(address)  # waits distributed.comm.timeouts.connect (30 s)
        except OSError as exc:
            raise SchedulerLost(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        with client:
            try:
                yield client
            except (asyncio.CancelledError, concurrent.futures.CancelledError, OSError) as exc:
                if not lost_scheduler(client, exc):
                    raise  # a file error, not the cluster
                logging.getLogger("distributed.client").setLevel(logging.CRITICAL)  # its reconnect tracebacks
                cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                raise SchedulerLost(f"lost the Dask scheduler at {address} during the run ({cause}). {if_lost}"
                                    .rstrip()) from None
        return
    workers = n_workers or os.cpu_count() or 1
    # scheduler, workers and dashboard on the loopback interface only: never reachable from the network
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        yield client


def show_progress(quiet: bool) -> bool:
    return not quiet and sys.stdout.isatty()


def status_line(quiet: bool):
    """A callback that keeps one status line updated on a terminal (else does nothing)."""
    if not show_progress(quiet):
        return lambda message: None

    def update(message: str) -> None:
        sys.stdout.write("\r\033[K" + message[:150])
        sys.stdout.flush()
    return update


def clear_status(quiet: bool) -> None:
    if show_progress(quiet):
        sys.stdout.write("\r\033[K")
        sys.stdout.flush()


def compute(client, delayed, quiet: bool = False):
    """Compute a delayed value (or a list of them) on ``client``, with a progress bar on a
    terminal."""
    futures = client.compute(delayed)
    if show_progress(quiet):
        from distributed import progress

        progress(futures)
        print(file=sys.stdout, flush=True)
    return client.gather(futures)
