"""Where the Dask work runs: an existing scheduler, or an embedded LocalCluster."""

from __future__ import annotations

import contextlib
import logging
import os
import sys

SCHEDULER_ENV = "STREAMBHMM_SCHEDULER"


def scheduler_address(scheduler: str | None) -> str | None:
    """The --scheduler value, else $STREAMBHMM_SCHEDULER, else None (embedded cluster)."""
    return scheduler or os.environ.get(SCHEDULER_ENV) or None


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, n_workers: int | None = None):
    """A distributed Client: to ``scheduler`` if given (or in the environment), otherwise
    to a LocalCluster of one single-threaded worker process per core."""
    from distributed import Client, LocalCluster

    address = scheduler_address(scheduler)
    if address:
        with Client(address, timeout="30s") as client:
            yield client
        return
    workers = n_workers or os.cpu_count() or 1
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
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
