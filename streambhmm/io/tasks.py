"""Waiting on Dask futures with a bound (every layer computes on Dask, so this is at the bottom).

A computation may go $STREAMBHMM_WAIT_TIMEOUT seconds (WAIT_TIMEOUT by default) without the
cluster making progress: none of its futures finishing, and the tasks the workers are running
unchanged (a stopped or hung worker keeps its tasks). Then the wait stops with
ClusterStalled, naming what it waited for and where. A long computation waits as long as it
progresses."""

from __future__ import annotations

import threading
import time

from .limits import WAIT_ENV, WAIT_TIMEOUT, wait_timeout  # noqa: F401 - also read from here

POLL_SECONDS = 0.5  # how often a wait for one result looks at the clock
LOOK_SECONDS = 2.0  # how often a wait asks the scheduler what the workers are running


class ClusterError(RuntimeError):
    """The Dask cluster could not do the run (the message says what to do)."""


class ClusterStalled(ClusterError):
    """No task of a computation finished for wait_timeout() seconds."""


class Waiter:
    """Waits on the futures of one computation as long as the cluster progresses:
    ClusterStalled when neither any of them finishes nor the tasks the workers run change
    for ``bound`` seconds (wait_timeout() by default), naming ``what`` it waited for.
    ``tick(seconds)``, if given, is told how long the wait has lasted, every POLL_SECONDS.

        for future in Waiter(client, futures, "the moment partials").as_completed(): ...
        value = Waiter(client, [future], "the E-step").result(future)"""

    def __init__(self, client, futures, what: str, bound: float | None = None, tick=None):
        self.client, self.futures, self.what = client, list(futures), what
        self.bound = wait_timeout() if bound is None else bound
        self.tick = tick
        self._start = self._progress = self._looked = time.monotonic()
        self._running = None

    def as_completed(self):
        """The futures as they finish (their results: result())."""
        from distributed import as_completed  # lazy: the command line's start imports this module (via
        # distributed/cluster.py) and must not import distributed (tests/app/test_cli.py)

        finished = as_completed(self.futures)
        while not finished.is_empty():
            if finished.has_ready():
                self._progress = time.monotonic()
                yield from finished.next_batch(block=False)
            else:
                self._check()
                time.sleep(POLL_SECONDS / 10)

    def result(self, future):
        """The result of one of the futures (its task's error raised), fetched within ``bound``."""
        finished = threading.Event()
        future.add_done_callback(lambda _: finished.set())
        while not finished.wait(POLL_SECONDS):
            self._check()
        self._progress = time.monotonic()
        try:
            return future.result(timeout=self.bound)
        except TimeoutError:
            if future.status == "error":
                raise  # the task's own
            raise ClusterStalled(f"waited {self.bound:g} s to fetch a result of {self.what} from a Dask worker "
                                 f"(scheduler {self.client.scheduler.address}): the worker may be stopped or hung. "
                                 f"Check the workers, or set ${WAIT_ENV} to wait longer") from None

    def _check(self) -> None:
        """Note whether the workers' tasks changed since the last look; stop after ``bound``
        seconds without progress."""
        now = time.monotonic()
        if self.tick is not None:
            self.tick(now - self._start)
        if now - self._looked >= LOOK_SECONDS:
            self._looked = now
            running = self._running_tasks()
            if running is not None and running != self._running:
                self._running, self._progress = running, now
        idle = now - self._progress
        if idle > self.bound:
            raise ClusterStalled(
                f"waited {idle:.0f} s for {self.what} while no task finished on the Dask cluster (scheduler "
                f"{self.client.scheduler.address}): a worker may be stopped, hung or out of memory. Check the "
                f"workers, or set ${WAIT_ENV} to wait longer than {self.bound:g} s")

    def _running_tasks(self) -> dict | None:
        """The tasks each worker runs (None: the scheduler did not answer in time)."""
        try:
            running = self.client.sync(self.client.scheduler.processing, workers=None,
                                       callback_timeout=LOOK_SECONDS)
        except (TimeoutError, OSError):
            return None
        return {worker: sorted(map(str, keys)) for worker, keys in running.items()}
