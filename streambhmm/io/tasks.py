"""Waiting on Dask futures with a bound (every layer computes on Dask, so this is at the bottom),
and InProcessClient, which runs the same Dask graphs in this process.

A computation may go $STREAMBHMM_WAIT_TIMEOUT seconds (WAIT_TIMEOUT by default) without the
cluster making progress: none of its futures finishing, and the tasks the workers are running
unchanged (a stopped or hung worker keeps its tasks). Then the wait stops with
ClusterStalled, naming what it waited for and where. A long computation waits as long as it
progresses. In process there is no worker to lose: a wait lasts until the tasks are done."""

from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
        self._running = None  # the tasks each worker ran at the last look ({}: the scheduler had no worker)
        self._unanswered = False  # the scheduler did not answer the last look
        self._told_no_worker = False

    def as_completed(self):
        """The futures as they finish (their results: result())."""
        if isinstance(self.client, InProcessClient):
            yield from self._as_completed_here()
            return
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

    def _as_completed_here(self):
        finished = queue.SimpleQueue()
        for future in self.futures:
            future.add_done_callback(finished.put)
        for _ in self.futures:
            while True:
                try:
                    yield finished.get(timeout=POLL_SECONDS)
                    break
                except queue.Empty:
                    self._check()

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
                                 f"(scheduler {self.client.scheduler.address}): the worker or the scheduler may be "
                                 f"stopped or hung. Check them, or set ${WAIT_ENV} to wait longer than "
                                 f"{self.bound:g} s.") from None

    def _check(self) -> None:
        """Note whether the workers' tasks changed since the last look; stop after ``bound``
        seconds without progress."""
        now = time.monotonic()
        if self.tick is not None:
            self.tick(now - self._start)
        if isinstance(self.client, InProcessClient):
            return  # the tasks run in this process: none is lost to a stopped worker
        if self.client.status != "running":
            # the scheduler went away: its tasks went with it, whether or not the client reconnects,
            # and the futures would wait out the reconnection (30 s) before they are cancelled
            raise ConnectionError(f"the connection to the Dask scheduler is {self.client.status}")
        if now - self._looked >= LOOK_SECONDS:
            self._looked = now
            running = self._running_tasks()
            self._unanswered = running is None
            if running is not None and running != self._running:
                self._running, self._progress = running, now
            if running == {} and not self._told_no_worker:  # said at once, even when quiet: nothing can run
                self._told_no_worker = True
                address = self.client.scheduler.address
                print(f"note: the Dask scheduler at {address} has no worker; waiting up to {self.bound:g} s for one, "
                      f"for {self.what} (start one: `dask worker {address}`)", file=sys.stderr, flush=True)
        idle = now - self._progress
        if idle > self.bound:
            address = self.client.scheduler.address
            if self._unanswered:
                raise ClusterStalled(f"waited {idle:.0f} s for {self.what}: the Dask scheduler at {address} does not "
                                     f"answer (stopped or hung?). Check it, or set ${WAIT_ENV} to wait longer than "
                                     f"{self.bound:g} s.")
            if self._running == {}:
                raise ClusterStalled(f"waited {idle:.0f} s for {self.what}: the Dask scheduler at {address} has no "
                                     f"worker. Start some (`dask worker {address}`), or set ${WAIT_ENV} to wait "
                                     f"longer than {self.bound:g} s for them.")
            raise ClusterStalled(
                f"waited {idle:.0f} s for {self.what} while no task finished on the Dask cluster (scheduler "
                f"{address}): a worker may be stopped, hung or out of memory. Check the workers, or set "
                f"${WAIT_ENV} to wait longer than {self.bound:g} s.")

    def _running_tasks(self) -> dict | None:
        """The tasks each worker runs (None: the scheduler did not answer in time)."""
        try:
            running = self.client.sync(self.client.scheduler.processing, workers=None,
                                       callback_timeout=LOOK_SECONDS)
        except (TimeoutError, OSError):
            return None
        return {worker: sorted(map(str, keys)) for worker, keys in running.items()}


class LocalFuture:
    """The result of one task computed by InProcessClient (the part of distributed.Future the
    commands use: key, result, add_done_callback, release, status)."""

    def __init__(self, key):
        self.key = key
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._callbacks = []
        self._value = self._error = None

    @property
    def status(self) -> str:
        return "pending" if not self._finished.is_set() else "error" if self._error is not None else "finished"

    def done(self) -> bool:
        return self._finished.is_set()

    def _finish(self, value=None, error: BaseException | None = None) -> None:
        with self._lock:
            if self._finished.is_set():
                return
            self._value, self._error = value, error
            self._finished.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback) -> None:
        with self._lock:
            if not self._finished.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def result(self, timeout: float | None = None):
        if not self._finished.wait(timeout):
            raise TimeoutError(f"task {self.key} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    def release(self) -> None:
        """Drop the result (the caller has it): memory holds the results not yet used."""
        self._value = None


def _deliver(value, future: LocalFuture) -> None:
    future._finish(value)  # noqa: SLF001 - the future's own computation


class ComputationStopped(Exception):
    """An InProcessClient's computation stopped because its command is stopping."""


class InProcessClient:
    """Runs Dask graphs in this process on Dask's threaded scheduler, ``threads`` at a time, in
    place of a distributed Client (the part of its interface the commands use: ``compute``,
    ``status``). The tasks, and so the results, are a cluster's; what is saved is starting
    and stopping a scheduler and a worker, and importing distributed (0.5-1 s of a small
    command). Each computation runs in a thread of its own; each result is handed to its
    future as its task finishes, and released by the future (LocalFuture.release). Leaving
    the context waits until the computations started are done; leaving it on an error
    (Ctrl-C, SIGTERM, a failed step) first stops them from starting more tasks, so it waits
    for the tasks running, not for the whole pass. Computations running side by side share
    one pool of ``threads`` threads, as a cluster's share its workers."""

    status = "running"

    def __init__(self, threads: int):
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="streambhmm-task")
        self._running: list[threading.Thread] = []
        self._computed: set = set()  # the keys of the tasks computed so far (progress counts them)
        self._stopping = threading.Event()

    def count_computed(self, keys) -> int:
        """How many of ``keys`` have been computed (a distributed scheduler's count of a graph's
        parts done, here)."""
        return sum(1 for key in keys if key in self._computed)

    def compute(self, collections):
        """A LocalFuture for a Delayed, or a list of them for a list."""
        import dask
        import dask.threaded

        items = collections if isinstance(collections, (list, tuple)) else [collections]
        futures = [LocalFuture(item.key) for item in items]
        deliveries = [dask.delayed(_deliver, pure=False)(item, future) for item, future in zip(items, futures)]

        def computed(key, result, dsk, state, worker_id):  # Dask's posttask callback
            self._computed.add(key)

        def starting(key, dsk, state):  # Dask's pretask callback, in the scheduler's thread
            if self._stopping.is_set():
                raise ComputationStopped("the command is stopping")

        def run():
            try:
                # the scheduler itself, not its name: a name makes Dask import distributed to look for a client
                dask.compute(*deliveries, scheduler=dask.threaded.get, pool=self._pool,
                             callbacks=[(None, None, starting, computed, None)])
            except BaseException as exc:  # noqa: BLE001 - handed to the futures, raised where they are read
                for future in futures:
                    future._finish(error=exc)  # noqa: SLF001

        thread = threading.Thread(target=run, name="streambhmm-compute", daemon=True)
        thread.start()
        self._running.append(thread)
        return futures if isinstance(collections, (list, tuple)) else futures[0]

    def __enter__(self) -> "InProcessClient":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self._stopping.set()
        for thread in self._running:
            thread.join()
        self._pool.shutdown()
        self.status = "closed"


def task_threads(client) -> int:
    """How many tasks ``client`` runs at once: its threads, or its workers' (at least 1)."""
    if isinstance(client, InProcessClient):
        return client.threads
    return max(1, sum(client.nthreads().values()))
