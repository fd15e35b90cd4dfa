"""Where the Dask work runs: an existing scheduler, this process, or an embedded LocalCluster; and
store_session, which opens a counts store for a command (its lock, and where the work runs).

Without a scheduler, Dask's threaded scheduler runs a command's tasks in this process, a
thread per core (io.tasks.InProcessClient), with no scheduler, worker or server to start (nor
distributed to import: 0.5-1 s of a command on a chromosome); the tasks, and so the results,
are those of a cluster. A task holds a chunk, so the threads hold what worker processes would,
whatever the store's size. EM on a small store (at most IN_PROCESS_MAX_CELLS covered bins x samples,
$STREAMBHMM_IN_PROCESS_MAX to change; for `pmd`, which works on 5 kb sums of the bins, the bins
of those) keeps every chunk's counts and emissions for the next iteration
(distributed.em.LocalEStep); on a larger one each E-step is a graph, its chunks read again.
$STREAMBHMM_IN_PROCESS_MAX=0 runs every command on an embedded cluster of worker processes,
one per core.

The embedded cluster of worker processes listens on 127.0.0.1, and only with TLS: a
self-signed certificate made for the run, kept in memory, is the credential every
connection must show, so no other local user can reach its scheduler or workers (which
run any code they are sent). A scheduler given with --scheduler is the user's to secure.

Every wait is bounded: connecting to a scheduler by distributed.comm.timeouts.connect, and
a computation by $STREAMBHMM_WAIT_TIMEOUT seconds without any of its tasks finishing (a
stopped or hung worker), after which the command stops with a message naming what it
waited for."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import weakref
from typing import TYPE_CHECKING

from ..io.progress import stage
from ..io.storage import Location
from ..io.tasks import ClusterError, ClusterStalled, InProcessClient, Waiter
from . import stopping_logs
from .stopping_logs import quiet_interrupted_sync

if TYPE_CHECKING:
    from ..io.store import CountsStore

# dask, distributed and threadpoolctl are imported where a client is made or an error read,
# and io.store (zarr, xarray) where a store is opened: every command imports this module,
# and the command line starts without them (0.6 s).

SCHEDULER_ENV = "STREAMBHMM_SCHEDULER"
IN_PROCESS_ENV = "STREAMBHMM_IN_PROCESS_MAX"
IN_PROCESS_MAX_CELLS = 20_000_000  # bins x samples: a chromosome or two of 100 bp bins for a few samples
# The nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which makes glibc hand freed
# memory back at once: our chunk tasks (many mid-sized temporary arrays) ran 2.7x slower
# with it (a one-sample chunk with its block statistics). Workers keep glibc's default.
TRIM, NANNY_TRIM = "MALLOC_TRIM_THRESHOLD_", 65536
WORKER_CONFIG = {f"distributed.nanny.pre-spawn-environ.{TRIM}": None}
HEALTH_ONLY = {f"distributed.{server}.http.routes": ["distributed.http.health"] for server in ("scheduler", "worker")}
# Each worker's profiler samples its threads' call stacks every 10 ms for the dashboard's
# profile page, which these servers do not serve.
NO_PROFILER = {"distributed.worker.profile.enabled": False}


def scheduler_address(scheduler: str | None) -> str | None:
    """The --scheduler value, else $STREAMBHMM_SCHEDULER, else None (embedded cluster)."""
    return scheduler or os.environ.get(SCHEDULER_ENV) or None


class SchedulerLost(ClusterError):
    """The Dask scheduler cannot be reached, or went away during the run."""


def lost_scheduler(client, exc: BaseException) -> bool:
    """Whether ``exc`` means the client lost its scheduler (so the run cannot go on)."""
    from distributed.comm import CommClosedError

    cancelled = isinstance(exc, (asyncio.CancelledError, concurrent.futures.CancelledError))
    return cancelled or isinstance(exc, CommClosedError) or client.status != "running"


def worker_died(exc: BaseException) -> str | None:
    """What a task's KilledWorker means, in words (None for any other exception)."""
    from distributed import KilledWorker

    if not isinstance(exc, KilledWorker):
        return None
    return (f"the Dask workers running task {exc.task!r} died {exc.allowed_failures + 1} time(s), the last "
            f"{exc.last_worker.address}: most likely out of memory (a nanny kills its worker at 95% of the "
            f"worker's memory limit). Give each worker more memory (fewer workers per machine), or use a "
            f"smaller --chunk-size for a new counts store")


def in_process_limit() -> int:
    """Bins x samples up to which the embedded cluster runs in process."""
    value = os.environ.get(IN_PROCESS_ENV, "")
    try:
        return int(value) if value else IN_PROCESS_MAX_CELLS
    except ValueError:
        raise ValueError(f"${IN_PROCESS_ENV} must be an integer (bins x samples), got {value!r:.100}") from None


def is_small(store, bin_size: int | None = None) -> bool:
    """Whether a counts store (a CountsStore, or where one is) has at most
    in_process_limit() covered bins x samples (CountsStore.n_covered_cells: no counts are read); with
    ``bin_size``, of its bins summed into bins that wide (where a command's work runs). True
    for a path that is not a readable counts store: the command refuses it, in process."""
    from ..io.store import CountsStore, open_store

    limit = in_process_limit()
    try:
        opened = store if isinstance(store, CountsStore) else open_store(store)
    except Exception:  # noqa: BLE001 - not a readable counts store: the command says why, without a cluster
        return True
    factor = max((bin_size or 0) // opened.bin_size, 1)
    return opened.n_covered_cells(factor) <= limit


def _check_workers_reach(paths, address: str | None) -> None:
    """Refuse a memory:// store where worker processes do the work: fsspec's memory is each
    process's own, so the workers wrote into theirs and the command reported work it did not
    keep (a helper's audit)."""
    for path in map(Location.of, paths):
        if path.in_process_memory:
            where = f"the workers of the Dask scheduler at {address}" if address else "the embedded cluster's workers"
            raise ValueError(f"{str(path)[:200]}: a memory:// store lives in this process's memory, which {where} "
                             f"do not share; give a directory or a URL they all reach")


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, n_workers: int | None = None, if_lost: str = "",
                in_process: bool = False, quiet: bool = False, shared=()):
    """A distributed Client: to ``scheduler`` if given (or in the environment), otherwise
    to a LocalCluster of one single-threaded worker process per core; or with
    ``in_process`` an io.tasks.InProcessClient running the tasks here, a thread per core.
    Connecting to a scheduler is a progress step (io.progress; none with ``quiet``).

    Losing the scheduler raises :class:`SchedulerLost`, a stalled computation
    :class:`ClusterStalled`, workers dying on a task over and over (KilledWorker: most
    likely memory) :class:`ClusterError`, their messages ending with ``if_lost`` (what the
    user keeps); a worker killed once is not an error: the scheduler reruns its tasks.
    ``shared``: the stores the workers read or write (a memory:// one is refused unless in process)."""
    address = scheduler_address(scheduler)
    if address or not in_process:
        _check_workers_reach(shared, address)
    quiet_interrupted_sync()
    if address:
        client_of = _external_client(address, quiet)
    elif in_process:
        client_of = _in_process_client(n_workers or os.cpu_count() or 1)
    else:
        client_of = _embedded_client(n_workers or os.cpu_count() or 1)
    with client_of as client:
        try:
            yield client
        except (asyncio.CancelledError, concurrent.futures.CancelledError, OSError) as exc:
            if not (address and lost_scheduler(client, exc)):
                raise  # a file error, not the cluster
            logging.getLogger("distributed.client").setLevel(logging.CRITICAL)  # its reconnect tracebacks
            cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise SchedulerLost(f"lost the Dask scheduler at {address} during the run ({cause}). {if_lost}"
                                .rstrip()) from None
        except ClusterStalled as exc:
            raise ClusterStalled(f"{exc} {if_lost}".rstrip()) from None
        except Exception as exc:  # noqa: BLE001 - only KilledWorker is translated
            died = worker_died(exc)
            if died is None:
                raise
            raise ClusterError(f"{died}. {if_lost}".rstrip()) from None


@contextlib.contextmanager
def _external_client(address: str, quiet: bool):
    from distributed import Client

    from ..io.progress import stage

    timeout = _connect_timeout()
    # shown while it lasts: Dask retries a refused connection until the timeout (30 s by default),
    # so a wrong address waits that long before its error
    with stage(f"connecting to the Dask scheduler at {address} (at most {timeout:g} s)", quiet=quiet):
        _check_scheduler(address, timeout)
        try:
            client = Client(address, timeout=timeout)
        except OSError as exc:
            raise SchedulerLost(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    with client:
        yield client


def _connect_timeout() -> float:
    import dask
    from dask.utils import parse_timedelta

    return parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds")


def _check_scheduler(address: str, timeout: float) -> None:
    """Connect to ``address`` and ask what it is, within ``timeout`` seconds: Client()
    bounds only the TCP connection, then waits for Dask's handshake forever (an HTTP server
    at that port never sends one)."""
    from distributed.comm import connect, parse_address, parse_host_port
    from distributed.security import Security

    scheme, location = parse_address(address)
    if scheme in ("tcp", "tls"):  # nothing listening is said at once: Dask's connect retries it for `timeout`
        try:
            socket.create_connection(parse_host_port(location), timeout=timeout).close()
        except ConnectionRefusedError:
            raise SchedulerLost(f"cannot reach the Dask scheduler at {address}: nothing listens there (connection "
                                f"refused); is the scheduler running, at that address?") from None
        except OSError:
            pass  # unreachable or slow: Dask's connect below says so within `timeout`

    async def identity():
        comm = await connect(address, timeout=timeout, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:  # in a thread of its own: the caller may be running an event loop
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            answer = thread.submit(asyncio.run, asyncio.wait_for(identity(), timeout)).result()
    except (OSError, asyncio.TimeoutError, ValueError, TypeError) as exc:
        why = f"no Dask handshake within {timeout:g} s" if isinstance(exc, asyncio.TimeoutError) else \
            f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        raise SchedulerLost(f"cannot reach the Dask scheduler at {address} ({why}); is it the address of a "
                            f"running Dask scheduler?") from None
    except Exception:  # noqa: BLE001 - another service's bytes, read as Dask's frames (a greeting as a length)
        raise SchedulerLost(f"{address} is not a Dask scheduler (what it sent is not Dask's protocol: another "
                            f"service at that port?); give the scheduler's address") from None
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind != "Scheduler":
        raise SchedulerLost(f"{address} is not a Dask scheduler (it answered as {str(kind)[:100]}); give the "
                            f"scheduler's address")


@contextlib.contextmanager
def _in_process_client(threads: int):
    from threadpoolctl import threadpool_limits

    # The tasks' threads are the parallelism: one BLAS thread each, as worker processes have.
    # No scheduler, no worker, no server: Dask's threaded scheduler runs the graphs here.
    with threadpool_limits(limits=1, user_api="blas"), InProcessClient(threads) as client:
        yield client


@contextlib.contextmanager
def _embedded_client(workers: int):
    import dask
    from distributed import Client, LocalCluster
    from distributed.security import Security

    # Scheduler, nannies and workers on the loopback interface only: never reachable from
    # the network. Their connections need this run's certificate (mutual TLS), which only
    # this process and its workers hold: other local users cannot connect. Their HTTP
    # servers (plain HTTP, open to local users) answer health checks only: no dashboard,
    # task names, logs or call stacks. The workers' directory is private to this run:
    # Dask's default, $TMPDIR/dask-scratch-space, is a name any local user can create first,
    # and the nannies put it on sys.path, so modules planted there ran as this user.
    with tempfile.TemporaryDirectory(prefix="streambhmm-dask-") as scratch:
        _removed_at_exit(scratch)  # before the cluster: its finalizers run first
        _resource_tracker_ignoring_hangups()
        with dask.config.set({**WORKER_CONFIG, **HEALTH_ONLY, **NO_PROFILER, "temporary-directory": scratch}), \
                _without_nanny_trim(), \
                LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                             dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                             local_directory=scratch, security=Security.temporary(), silence_logs=logging.ERROR,
                             preload=[stopping_logs.__name__]) as cluster, \
                Client(cluster) as client:
            yield client


class _ExitSentinel:
    """Lives until the interpreter exits: finalizers made on it run at exit."""


_AT_EXIT = _ExitSentinel()


def _removed_at_exit(scratch: str) -> None:
    """``scratch`` (the embedded cluster's directory) removed at exit too, after Dask's own
    finalizers: a command stopped while its cluster closed (SIGTERM, 2 of 8 runs) left the
    scheduler's workspace to a finalizer at exit, which made its lock files again in the
    removed directory (/tmp/streambhmm-dask-*/dask-scratch-space/*.lock) and logged "Failed
    to remove". Made before the cluster, this finalizer runs after the scheduler's (at exit,
    the latest made run first); shutil.rmtree follows no link."""
    weakref.finalize(_AT_EXIT, shutil.rmtree, scratch, ignore_errors=True)
    logging.getLogger("distributed.diskutils").setLevel(logging.CRITICAL)


def _resource_tracker_ignoring_hangups() -> None:
    """Start multiprocessing's resource tracker (the workers' spawning needs it) with SIGHUP
    ignored, as it ignores SIGINT and SIGTERM: a closed terminal's SIGHUP reaches the whole
    process group, and it died and was relaunched, each worker printing KeyError tracebacks
    (a helper's audit). The ignored disposition passes to it through its exec."""
    from multiprocessing import resource_tracker

    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL if previous is None else previous)


class OpenedStore:
    """A counts store opened for a command (store_session): where its work runs, and the
    store itself, read under the lock on first use."""

    def __init__(self, path, client, em_in_memory: bool = False):
        self.path = path
        self.client = client  # a distributed Client, an InProcessClient, or None: no Dask work
        self.em_in_memory = em_in_memory  # EM keeps the store's counts in this process (store_session)

    @property
    def in_process(self) -> bool:
        """Whether the work runs in this process (no scheduler given, nor worker processes asked for)."""
        return isinstance(self.client, InProcessClient)

    @property
    def em_client(self):
        """Where EM's E-steps run: None, in this process with every chunk's counts and emissions
        kept between iterations (distributed.em.LocalEStep), for a command that said it runs EM
        on a small store; else the client, a graph per E-step (a chunk per task)."""
        return None if self.em_in_memory else self.client

    @functools.cached_property
    def store(self) -> CountsStore:
        """The store as it is under the lock (a commit may have landed since the command began)."""
        from ..io.store import open_store

        return open_store(self.path)


@contextlib.contextmanager
def store_session(path, scheduler: str | None = None, write: bool = False, dask: bool = True, if_lost: str = "",
                  bin_size: int | None = None, em: bool = False, quiet: bool = False, outputs=()):
    """Open the counts store at ``path`` for a command. Where the work runs is decided here,
    once: on the scheduler when one is given, else in this process (an embedded cluster of
    worker processes with $STREAMBHMM_IN_PROCESS_MAX=0); ``dask`` False: no client. ``em``: the
    command runs EM on the store, which keeps its counts in this process if it is small
    (is_small; ``bin_size``: the command sums the store's bins into bins that wide and works on
    those). In process, a genome's `hmr` and EM take 0.84-1.02 of the time and 0.52-0.67 of the
    memory of worker processes (scripts/where_work_runs.py, docs/guide/cluster.md).
    The store's lock is held throughout: ``write``, exclusive (the command writes into the
    store), else shared, so an ingest waits until the command is done (and the command
    waits for a running ingest) and the command never sees a mix of old and new counts. A
    given scheduler is connected to first, so an unreachable one never holds the lock; an
    embedded cluster starts under the lock, sized to the store as it is then (a store that
    cannot be read is refused by the command, in process, without starting one). ``quiet``:
    no progress line while a given scheduler is connected to. ``outputs``: stores the tasks write
    besides the counts store (dask_client's ``shared``)."""
    from ..io.store import locked

    external = bool(dask and scheduler_address(scheduler))
    with contextlib.ExitStack() as stack:
        shared = (path, *outputs)
        client = stack.enter_context(dask_client(scheduler, if_lost=if_lost, quiet=quiet, shared=shared)) \
            if external else None
        stack.enter_context(locked(path, shared=not write))
        em_in_memory = False
        if dask and not external:
            in_process = in_process_limit() > 0
            # the store's size matters to EM, or where work runs in process only when small (it
            # reads every chunk summary: 0.3-1 s on 2,000 contigs); a path that is not a
            # readable store counts as small: it is refused here
            small = (em or not in_process) and is_small(path, bin_size)
            em_in_memory = em and small
            client = stack.enter_context(dask_client(None, if_lost=if_lost, in_process=small or in_process,
                                                     shared=shared))
        yield OpenedStore(path, client, em_in_memory)


@contextlib.contextmanager
def _without_nanny_trim():
    """A nanny started earlier in this process (any LocalCluster) leaves its
    MALLOC_TRIM_THRESHOLD_=65536 in os.environ, where our workers would inherit it: take it
    out while our cluster runs (a value the user chose is kept)."""
    value = os.environ.get(TRIM)
    if value != str(NANNY_TRIM):
        yield
        return
    del os.environ[TRIM]
    try:
        yield
    finally:
        os.environ[TRIM] = value


def compute(client, delayed, quiet: bool = False, what: str = "the computation", parts: list | None = None,
            unit: str = "tasks"):
    """Compute a delayed value (or a list of them) on ``client``, its progress shown unless
    ``quiet`` (io.progress: the values of a list done, or of one value the ``parts`` of its
    graph done, counted on the scheduler, in ``unit``); bounded as every wait
    (io.tasks.Waiter), ``what`` naming the computation."""
    futures = client.compute(delayed)
    with stage(what, quiet=quiet, unit=unit) as shown:
        if not isinstance(futures, list):
            count = _PartsDone(client, parts or [], shown)
            result = Waiter(client, [futures], what, tick=count).result(futures)
            count.finished()
            return result
        results = {}
        waiter = Waiter(client, futures, what)
        shown(0, len(futures))
        for future in waiter.as_completed():
            results[future.key] = waiter.result(future)
            shown(len(results))
        return [results[f.key] for f in futures]


class _PartsDone:
    """A Waiter's tick: how many of a graph's ``parts`` (delayed values) are done, asked of the
    scheduler at most every LOOK seconds (a part whose result was used and released counts)."""

    LOOK = 1.0

    def __init__(self, client, parts: list, shown):
        self.client, self.keys, self.shown = client, [p.key for p in parts], shown
        self.looked = -self.LOOK
        shown(0, len(self.keys) or None)

    def __call__(self, seconds: float) -> None:
        if not self.keys:
            self.shown(0, note=f"{seconds:.0f} s")
        elif seconds - self.looked >= self.LOOK:
            self.looked = seconds
            try:
                if isinstance(self.client, InProcessClient):
                    self.shown(self.client.count_computed(self.keys))
                else:
                    self.shown(self.client.run_on_scheduler(_finished, self.keys))
            except (TimeoutError, OSError):
                pass  # the count waits for the next look; the Waiter judges the scheduler

    def finished(self) -> None:
        """Every part is done (the value is): the count says so."""
        if self.keys:
            self.shown(len(self.keys))


def _finished(keys, dask_scheduler=None) -> int:
    """(On the scheduler) how many of ``keys`` are computed: in memory, or used and released."""
    tasks = dask_scheduler.tasks
    return sum(1 for k in keys if (ts := tasks.get(k)) is None or ts.state in ("memory", "released", "erred"))
