"""Many genomes in one run: ingest every sample of a manifest, then bring one moment store
per group up to date (the samples of a group are fitted jointly).

    WORKDIR/<group>/counts.zarr     the group's counts store
    WORKDIR/<group>/moments.zarr    its moment store (input to `streambhmm fit`)
    WORKDIR/batch-summary.tsv       the summary of the last run
    WORKDIR/.batch.lock             held by the running batch (which it names): a second is refused

Every sample is ingested by a Dask task of its own, all at once (samples of one store
write their own columns; their commits take turns, in the manifest's order); on stores at URLs, which have no lock,
a group's samples go in one after another. A group's moment pass starts as soon as its
samples are in, so the chunks of all genomes share the cluster. A failed sample is reported with its
cause and leaves everything else in place; its group's moments are not updated, since
they would lack it. A rerun skips unchanged samples and reuses every finished partial.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import os
import re
import socket
import stat
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import lost_scheduler, worker_died
from ..io.blocks import text_lines
from ..io.formats import FORMATS, ReadOptions, quoted
from ..io.ingest import ingest
from ..io.names import sample_name_problem
from ..io.outputs import check_outside, check_replaceable_file, interruptions_held
from ..io.rows import first_few, sheet_fields
from ..io.storage import Location
from ..io.store import open_store
from ..io.store.locking import LOCK_WAIT, LockWait, recover_if_free
from ..io.store.schema import StoreError, store_around
from ..io.tasks import ClusterError, Waiter, wait_timeout
from ..moments.features import DEFAULT_N_BINS
from ..moments.momentstore import update_moments
from ..moments.spec import FeatureSpec

COLUMNS = ("sample", "group", "format", "files")
SUMMARY = "batch-summary.tsv"
SUMMARY_HEAD = b"sample\tgroup\tstatus\t"  # how the summary begins (format_summary)
LOCK = ".batch.lock"
GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# An ingest is one task per sample: its wait is bounded by its input at least at this rate
# (ingest reads tens of MB/s of text, compressed or not), or by wait_timeout() if longer.
INGEST_BYTES_PER_SECOND = 1_000_000
# A stopped batch waits this long for its running ingests to stop (each checks as it hashes and
# reads its files, and before its commit point), so that none stores a sample after the command ends
STOP_WAIT_SECONDS = 30.0
# How often a commit waiting for its turn looks whether the command is gone; a stop wakes it at
# once (the command sets the Events it waits for). At 0.5 s, 384 waiting samples kept the
# scheduler and workers busy answering: each commit took twice as long.
TURN_POLL_SECONDS = 10.0
STOP_GRACE_SECONDS = 0.5  # for tasks no worker runs: the client hears of one that just finished


class ManifestError(ValueError):
    """A malformed manifest; the message names the file, the line and the text."""


class WorkdirBusy(ValueError):
    """Another batch run holds the working directory."""


class BatchStopped(Exception):
    """The batch's command was stopped (Ctrl-C, SIGTERM) before this sample's commit point."""


@dataclass(frozen=True)
class ManifestRow:
    sample: str
    group: str
    format: str
    files: tuple[str, ...]
    line: int


@dataclass(kw_only=True)
class Outcome:
    """How long one job of a batch took, and why it failed ("": it did not)."""

    seconds: float = 0.0
    error: str = ""


@dataclass
class SampleResult(Outcome):
    sample: str
    group: str
    status: str  # ingested, replaced, unchanged, failed, or stopped (by a stop of the command)
    n_rows: int = 0
    n_bins: int = 0
    notes: tuple = ()  # what ingest told its user (a damaged index read again, files of methylated CpGs only)


@dataclass
class GroupResult(Outcome):
    group: str
    samples: list[str]
    status: str = "pending"  # updated, unchanged, skipped or failed
    computed: int = 0  # the moment store's partials computed, reused, and its chromosomes
    reused: int = 0
    chromosomes: int = 0


@dataclass
class BatchSummary:
    samples: list[SampleResult] = field(default_factory=list)
    groups: list[GroupResult] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        return [f"sample {s.sample}" for s in self.samples if s.status == "failed"] + \
               [f"group {g.group}" for g in self.groups if g.status == "failed"]


def read_batch_manifest(path) -> list[ManifestRow]:
    """Parse MANIFEST.tsv: a header naming the columns sample, group, format and files (any
    order); files are comma-separated, relative to the manifest's directory; '#' starts a
    comment line."""
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        # read twice (the command, then the run) and its files named relative to its directory: a
        # FIFO waited for a second writer forever, a pipe (<(...), /dev/stdin) could not seek (an audit)
        raise ManifestError(f"{path}: is not a regular file (a pipe or FIFO?); batch reads its manifest from a "
                            f"file, whose samples' files it finds relative to the file's directory: save it to a "
                            f"file and give that")
    rows, header, seen = [], None, {}
    with contextlib.closing(text_lines(path)) as read:  # as ingest reads text: a byte-order mark, CRLF, gzip
        numbered = [(number, text) for number, text, _ in read]
    for number, text in numbered:
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        fields = sheet_fields(text)
        where = f"{path}, line {number}: {quoted(text)}"
        if header is None:
            missing = [c for c in COLUMNS if c not in fields]
            if missing:
                raise ManifestError(f"{where}: the header lacks column(s) {', '.join(missing)} "
                                    f"(tab- or blank-separated: {', '.join(COLUMNS)})")
            header = {c: fields.index(c) for c in COLUMNS}
            continue
        if len(fields) < len(header) or any(not fields[i] for i in header.values()):
            raise ManifestError(f"{where}: expected {len(header)} non-empty fields, as the header's")
        sample, group, fmt, files = (fields[header[c]] for c in COLUMNS)
        if fmt not in ("auto", *FORMATS):
            raise ManifestError(f"{where}: unknown format {fmt!r} (one of auto, {', '.join(FORMATS)})")
        if not GROUP_NAME.match(group) or group == SUMMARY:
            raise ManifestError(f"{where}: group {group!r} is not a valid directory name"
                                + (" (the summary file is named so)" if group == SUMMARY else ""))
        if sample_name_problem(sample):  # the rule ingest applies, before any sample goes in
            raise ManifestError(f"{where}: invalid {sample_name_problem(sample)}")
        if (sample, group) in seen:
            raise ManifestError(f"{where}: sample {sample} of group {group} is listed again "
                                f"(first on line {seen[sample, group]}); list its replicate files together")
        seen[sample, group] = number
        # absolute: the ingest tasks run in the workers' working directories
        paths = tuple(str(path.parent.absolute() / f.strip()) for f in files.split(",") if f.strip())
        rows.append(ManifestRow(sample, group, fmt, paths, number))
    if not rows:
        raise ManifestError(f"{path}: no samples (a header line and one line per sample are expected)")
    return rows


def stop_check(stop: str | None):
    """In a task: a check that raises BatchStopped once the batch's command has set the
    distributed Event named ``stop`` (None: no Event), or has gone: its client closed, so the
    scheduler let go of the task (after a kill -9 an ingest stored its sample all the same).
    ``check(at_commit=True)``, right before the commit point, asks the scheduler itself
    whether the task is still wanted: the worker hears of a release later (an audit saw a
    sample commit after a kill -9 of the command, its predecessor's Event set by its task).
    A scheduler out of reach for a moment does not fail the ingest: it goes on, as it did
    before the check. Outside a worker, and with no Event, nothing is checked."""
    task = _RunningTask.here()
    if stop is None and task is None:
        return lambda at_commit=False: None
    from distributed import Event

    event = Event(stop) if stop is not None else None  # on the worker's client

    def check(at_commit: bool = False) -> None:
        if task is not None and task.gone(ask_scheduler=at_commit):
            raise BatchStopped("the batch's command is gone")
        try:
            stopped = event is not None and event.is_set()
        except OSError:  # distributed's CommClosedError, a connection's timeout
            return
        if stopped:
            raise BatchStopped("the batch was stopped")
    return check


def done_event(run: str, index: int) -> str:
    """The Event set once the ingests of the manifest's ``index``-th row and of every row
    listed before it in its group are over: the next row of the group may commit."""
    return f"streambhmm-batch-done-{run}-{index}"


class CommitTurn:
    """In a task: the wait, before the store's lock is taken for the commit, until the Event
    ``after`` (the sample listed right before this one in its group, and all before it, are
    over) is set, so that a group's samples take their columns in the manifest's order
    whichever ingest ends first (three runs of one manifest gave three orders, and a command
    on the store without --samples other results). While it waits the task leaves the
    worker's thread pool (distributed.secede), so it never holds a thread that an earlier
    sample's ingest needs. A stop ends the wait. Once the sample's ingest is over, its own
    Event ``done`` is set by the task (``over``), which saves the chain a round trip through
    the command; the command sets it too, as it sees every end, a task's death included."""

    def __init__(self, after: str | None, done: str | None, check):
        self.after, self.done, self.check = after, done, check  # check: the task's stop_check
        self.taken = False  # the wait is over: every sample listed before this one is over

    def __call__(self) -> None:
        if self.after is not None:
            self._wait()
        self.taken = True

    def _wait(self) -> None:
        from distributed import Event, rejoin, secede

        event = Event(self.after)
        secede()
        # a stopped task ends outside the thread pool (its check raises): dozens rejoining it one
        # by one to clean up made an audit's stop take 30 s
        while True:
            self.check()
            try:
                if event.wait(TURN_POLL_SECONDS):
                    self.check()  # a stop sets it too
                    break
            except OSError:  # the scheduler out of reach for a moment: look again
                time.sleep(TURN_POLL_SECONDS)
        rejoin()

    def over(self) -> None:
        """The sample's ingest is over: once its turn was taken, the next sample's may come,
        unless the batch was stopped (the command has set every Event) or its command is gone
        (nothing would clear the Event, and no later sample may commit)."""
        if not (self.taken and self.done):
            return
        from distributed import Event

        with contextlib.suppress(OSError, BatchStopped):  # the command sets it too
            self.check()
            Event(self.done).set()


class _RunningTask:
    """In a task: whether the task is still wanted, as its worker and its scheduler see it."""

    GONE = (None, "cancelled", "released", "forgotten")
    SCHEDULER_TIMEOUT = 10  # seconds: a scheduler that does not answer lets the ingest go on

    def __init__(self, worker, key):
        self.worker, self.key = worker, key

    @classmethod
    def here(cls):
        """The task this thread runs; None outside a worker."""
        from distributed import get_worker
        from distributed.worker import thread_state

        try:
            return cls(get_worker(), thread_state.key)
        except (ValueError, AttributeError):
            return None

    def gone(self, ask_scheduler: bool = False) -> bool:
        task = self.worker.state.tasks.get(self.key)
        if (None if task is None else task.state) in self.GONE:
            return True
        if not ask_scheduler:
            return False
        try:
            state = self.scheduler_state()
        except (OSError, TimeoutError):
            return False
        return state != "processing"

    def scheduler_state(self):
        """The task's state on the scheduler (None: it forgot the task)."""
        from distributed.utils import sync

        states = sync(self.worker.loop, self.worker.scheduler.get_task_status, keys=[self.key],
                      callback_timeout=self.SCHEDULER_TIMEOUT)
        return states.get(self.key)


def ingest_sample(row: ManifestRow, store: str, bin_size: int, context: str, chunk_size: int | None,
                  options: ReadOptions | None = None, stop: str | None = None, run: str | None = None,
                  quiet: bool = False, after: str | None = None, done: str | None = None) -> SampleResult:
    """Dask task: ingest one sample into its group's store. A failure is recorded, not
    raised, so the group's other samples still go in. Once the command sets the Event named
    ``stop``, the ingest ends before its commit point (status "stopped"). ``run`` names the
    batch run: the task run again after its worker was lost finds the sample stored by its
    first try, in this run, and says "ingested", not "unchanged". A wait for the store's lock
    is said naming the sample, unless ``quiet``. The commit waits for the Event ``after``; the
    Event ``done`` says the sample is over (CommitTurn)."""
    start = time.perf_counter()
    notes = []
    holders = LOCK_WAIT.set(LockWait(f"another sample of this batch's group {row.group} (or another streambhmm command)",
                                     f"batch: sample {row.sample}", quiet))
    check = stop_check(stop)
    turn = CommitTurn(after, done, check)
    try:  # once its turn is taken, the only check left is the commit point's
        report = ingest(row.files, row.sample, store, fmt=row.format, bin_size=bin_size, context=context,
                        chunk_size=chunk_size, echo=notes.append, options=options,
                        stop_check=lambda: check(at_commit=turn.taken), run=run, turn=turn)
    except BatchStopped:
        return SampleResult(row.sample, row.group, "stopped", seconds=time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - reported per sample
        return SampleResult(row.sample, row.group, "failed", seconds=time.perf_counter() - start,
                            error=_error_text(exc))
    finally:
        LOCK_WAIT.reset(holders)
        turn.over()
    this_run = report.unchanged and run is not None and report.stored_by == run
    if report.unchanged:  # (ingest's note says so, as the status does)
        notes = []
    if this_run:  # not "unchanged": a new workdir's summary said so of samples this run ingested
        notes = [f"sample {row.sample}: stored by this run's first try of its task, whose worker was lost before "
                 f"it reported"]
    status = ("ingested" if this_run else "unchanged" if report.unchanged else
              "replaced" if report.replaced else "ingested")
    return SampleResult(row.sample, row.group, status, report.n_rows, report.n_bins,
                        seconds=time.perf_counter() - start, notes=tuple(notes))


def ingest_group(rows: list[ManifestRow], store: str, bin_size: int, context: str,
                 chunk_size: int | None, options: ReadOptions | None = None,
                 stop: str | None = None, run: str | None = None, quiet: bool = False) -> list[SampleResult]:
    """Dask task: a group's samples one after another (stores at URLs have no lock, so
    their ingests must not overlap)."""
    return [ingest_sample(row, store, bin_size, context, chunk_size, options, stop, run, quiet) for row in rows]


def _error_text(exc: BaseException) -> str:
    """The cause as the commands print it: a user's error by its message (it names the file),
    an unexpected one with its type."""
    if isinstance(exc, (ValueError, FileNotFoundError, ClusterError)):
        return worker_died(exc) or str(exc)
    return worker_died(exc) or f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def workdir_lock(workdir: Location):
    """Hold WORKDIR/.batch.lock for the run: a second batch on the same working directory is
    refused, naming the first (from what the lock file says). Working directories at URLs
    have no lock, as stores there have none."""
    if not workdir.is_local:
        yield
        return
    path = workdir / LOCK
    try:
        fd = os.open(path.url, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise WorkdirBusy(f"cannot open the batch lock {path} ({why})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = " ".join(os.pread(fd, 200, 0).decode(errors="replace").split()) or "it did not say who it is"
            raise WorkdirBusy(f"{workdir} is in use by another batch run ({holder}); wait for it to end, or "
                              f"give another --workdir") from None
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _ingest_bound(rows: list[ManifestRow]) -> float:
    """The longest a wait on ingest tasks goes without one finishing: the largest sample's
    files at INGEST_BYTES_PER_SECOND, or wait_timeout() if longer."""
    largest = max((sum(os.path.getsize(f) for f in row.files if os.path.isfile(f)) for row in rows), default=0)
    return max(wait_timeout(), largest / INGEST_BYTES_PER_SECOND)


def check_summary(manifest, workdir) -> None:
    """Refuse, before any work, a summary that would replace the manifest or a file of the
    user's in ``workdir`` (the summary replaces only a summary)."""
    workdir = Location.of(workdir).absolute()
    if workdir.is_local:  # its groups' stores go inside it: not into a store (an audit's batch wrote into one)
        around = store_around(workdir.url) or (workdir.url if (workdir / "zarr.json").exists() else None)
        if around is not None:
            where = "is a Zarr store" if around == workdir.url else f"lies inside the Zarr store {around}"
            raise ValueError(f"{workdir} {where}; batch's --workdir is a directory of its own, where it makes a "
                             f"store per group: give another")
    if workdir.is_local and workdir.exists():
        check_outside(workdir / SUMMARY, manifest)
        check_replaceable_file(workdir / SUMMARY, SUMMARY_HEAD, "the batch's --workdir")


def run_batch(manifest, workdir, client, n_bins: int = DEFAULT_N_BINS, bin_size: int = 100, context: str = "CG",
              chunk_size: int | None = None, echo=lambda message: None, warn=lambda message: None,
              progress=lambda done, total, note: None, options: ReadOptions | None = None,
              pooled: bool = False, feature: str = "auto", projection_dim: int = 32, quiet: bool = False
              ) -> BatchSummary:
    """Ingest every sample of ``manifest`` and update each group's moment store on ``client``
    (``pooled``: summed over the group's samples); ``options`` (reading options) apply to
    every sample; ``echo`` says what each sample and group became, ``warn`` what needs the
    user's eye (notes on a sample's files, a counts store holding samples the manifest no
    longer lists, a moment store made again); ``progress(done, total, note)`` follows the
    samples ingested and the partials computed; ``quiet``: a sample's ingest does not say that
    it waits for its store's lock (the group's samples take turns at it)."""
    rows = read_batch_manifest(manifest)
    workdir = Location.of(workdir).absolute()  # the ingest tasks run in the workers' working directories
    check_summary(manifest, workdir)
    workdir.mkdir()  # the summary is written even when every sample fails
    with workdir_lock(workdir):
        spec = FeatureSpec(feature, n_bins, projection_dim, pooled=pooled)
        return _BatchRun(rows, workdir, client, spec, bin_size, context, chunk_size, echo, warn, progress,
                         options, quiet).run()


class _BatchRun:
    """run_batch's work, with the working directory's lock held: the ingests, and each
    group's moment pass in a thread of its own as soon as its samples are in."""

    def __init__(self, rows, workdir: Location, client, spec: FeatureSpec, bin_size, context, chunk_size, echo,
                 warn, progress, options, quiet=False):
        self.rows, self.workdir, self.client, self.spec = rows, workdir, client, spec  # the moments' feature, as asked
        self.bin_size, self.context, self.chunk_size = bin_size, context, chunk_size
        self.echo, self.warn, self.progress, self.options, self.quiet = echo, warn, progress, options, quiet
        self.notes_said: dict[str, str] = {}  # an ingest note, without its sample -> the first sample it was said of
        self.groups: dict[str, list[ManifestRow]] = {}
        self.index = {row: i for i, row in enumerate(rows)}
        for row in rows:
            self.groups.setdefault(row.group, []).append(row)
        self.summary = BatchSummary(groups=[GroupResult(g, [r.sample for r in members])
                                            for g, members in self.groups.items()])
        self.partials: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()
        self.run_id = uuid.uuid4().hex  # recorded with each sample this run stores
        self.stop = f"streambhmm-batch-stop-{self.run_id}"  # the Event that stops the ingest tasks
        self.stopped = threading.Event()  # set when the command is stopped: the moment passes keep quiet
        self.over: set[ManifestRow] = set()  # rows whose ingests are over
        self.died: set[ManifestRow] = set()  # rows whose tasks died with their workers
        self.turns = dict.fromkeys(self.groups, 0)  # per group: its first rows, all over, whose Events are set
        self.stop_heard = False  # stopped, and every ingest task has ended since: the stop Event may go

    def run(self) -> BatchSummary:
        self.warn_of_unlisted_groups()
        futures = self.submit_ingests()
        waiting = {g.group: len(g.samples) for g in self.summary.groups}
        running, recorded = [], set()
        ingests = Waiter(self.client, futures, f"the ingests into {self.workdir}", bound=_ingest_bound(self.rows))
        pool = ThreadPoolExecutor(max_workers=len(self.groups))
        try:
            for future in ingests.as_completed():
                group, group_rows = futures[future]
                results = self.ingested(ingests, future, group, group_rows)
                self.ingest_over(group_rows)
                with self.lock:
                    self.record(group, results)
                    self.show()
                recorded.add(future)
                waiting[group.group] -= len(results)
                if waiting[group.group]:
                    continue
                self.sweep(group)
                if group.status == "skipped":
                    continue
                group.status = "running"
                running.append(pool.submit(self.update_moments, group))
            for thread in running:  # in the try: a stop during the moments is said as one during the ingests
                thread.result()  # re-raise a lost scheduler
        except (KeyboardInterrupt, SystemExit):
            self.stopped.set()
            self.stop_ingests({f: where for f, where in futures.items() if f not in recorded})
            raise
        finally:
            # on a stop the moment passes are not waited for: they end with the cluster, and
            # a rerun reuses every partial they finished
            pool.shutdown(wait=not self.stopped.is_set(), cancel_futures=self.stopped.is_set())
            with interruptions_held(deliver_after=True):  # a second Ctrl-C here left the run's Events
                self.forget_turns()
        order = {(row.sample, row.group): i for i, row in enumerate(self.rows)}
        self.summary.samples.sort(key=lambda r: order[r.sample, r.group])
        (self.workdir / SUMMARY).write_text(format_summary(self.summary, sep="\t"))  # locally through a temporary
        return self.summary

    def ingest_over(self, rows) -> None:
        """The ingests of ``rows`` are over (stored, failed or stopped): the Event of each row
        whose group's rows up to it are all over is set, and the commit waiting for it goes on
        (CommitTurn). Set by the command, which sees every end, a task's death too; one it
        could not set (the scheduler out of reach) is set at the next call."""
        from distributed import Event

        self.over.update(rows)
        for group in {row.group for row in rows}:
            members = self.groups[group]
            while self.turns[group] < len(members) and members[self.turns[group]] in self.over:
                try:
                    Event(done_event(self.run_id, self.index[members[self.turns[group]]]), client=self.client).set()
                except OSError:
                    break
                self.turns[group] += 1

    def forget_turns(self) -> None:
        """The run is over: the scheduler drops the run's Events (an Event cleared without
        waiters is deleted), which a long-lived one would otherwise keep; the stop's too, once
        no task is left to hear it. A scheduler out of reach keeps them: nothing is waited for."""
        from distributed import Event

        # every row's, not only those the command set: a task sets its own as it ends, unseen by a
        # run that ended before it recorded that row (an audit's error left five)
        names = [done_event(self.run_id, i) for i in range(len(self.rows))]
        for name in names + ([self.stop] if self.stop_heard else []):
            try:
                Event(name, client=self.client).clear()
            except Exception:  # noqa: BLE001 - the run's outcome is already known
                return

    def sweep(self, group: GroupResult) -> None:
        """The group's ingests are over: what their killed workers staged beside its counts store
        goes now, as the next writer's lock would remove it (an audit's workers, killed
        mid-ingest, left staged counts that nothing else would remove until a rerun). Only
        stagings whose writers are gone go; a store another command holds is left to it."""
        counts = self.workdir / group.group / "counts.zarr"
        if self.workdir.is_local and counts.parent.exists():
            # its failures are the group's ingests' to report (an audit's planted link at the lock
            # file failed them, then ended the whole run here, with no summary)
            with contextlib.suppress(StoreError, OSError):
                recover_if_free(counts)

    def stop_ingests(self, futures: dict) -> None:
        """The command was stopped: tell the ingest tasks, which run on, to stop before their
        commit points, and wait for them (STOP_WAIT_SECONDS at most), so that none stores a
        sample once the command has ended. ``futures``: those whose samples the run has not
        reported; each sample stored all the same (its commit had begun) is named. Tasks that
        no worker runs (not started, or finished a moment before the client hears of it) are
        waited for STOP_GRACE_SECONDS."""
        from distributed import Event

        # told whole, whatever a second Ctrl-C: cut short, the waiting tasks woke only at their next
        # poll, 10 s after the command had ended (a helper's audit); that Ctrl-C ends the wait below
        with interruptions_held(deliver_after=True):
            Event(self.stop, client=self.client).set()
            for group, members in self.groups.items():  # the commits waiting for their turns wake, and stop
                for row in members[self.turns[group]:]:
                    with contextlib.suppress(OSError):
                        Event(done_event(self.run_id, self.index[row]), client=self.client).set()
        running = [f for f in futures if not f.done()]
        if running:
            self.echo(f"stopping {len(running)} ingest task(s) before their commits")
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        idle_since = None
        while running and time.monotonic() < deadline:
            pending = {f.key for f in running if not f.done()}
            if not pending:
                break
            if pending & {key for keys in self.client.processing().values() for key in keys}:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > STOP_GRACE_SECONDS:
                break
            time.sleep(0.05)
        self.stop_heard = all(f.done() for f in futures)
        stored = sum(r.status in ("ingested", "replaced") for r in self.summary.samples)
        still_running: dict[str, int] = {}
        for future in futures:
            if future.status == "finished":
                results = future.result()
                for r in results if isinstance(results, list) else [results]:
                    if r.status in ("ingested", "replaced"):  # with --quiet too: the store changed
                        stored += 1
                        self.warn(f"sample {r.sample} ({r.group}): {r.status} before the stop; its group's "
                                  f"moments are not updated (rerun to update them)")
            elif not future.done() and time.monotonic() >= deadline:
                group = futures[future][0].group
                still_running[group] = still_running.get(group, 0) + 1
        for group, n in still_running.items():  # a line per group: an audit's stop printed 54 of the same
            self.warn(f"{n} ingest(s) into {self.workdir / group} still running {STOP_WAIT_SECONDS:g} s after the "
                      f"stop (hashing files, waiting for the store's lock, or removing what they staged) store "
                      f"nothing: each checks for the stop right before its commit point")
        self.warn(f"batch stopped: the {stored} sample(s) this run stored are kept; rerun the command to ingest the "
                  f"others and to update the moments")

    def submit_ingests(self) -> dict:
        """{future: (group, its rows)}: local stores, every sample its own task (ingests of one
        store may overlap, their commits take turns); stores at URLs have no lock: a group's
        samples in one task, in turn."""
        futures = {}
        settings = (self.bin_size, self.context, self.chunk_size, self.options, self.stop, self.run_id, self.quiet)
        for g in self.summary.groups:
            store = (self.workdir / g.group / "counts.zarr").url
            if self.workdir.is_local:  # each commit waits for the group's samples listed before it
                events = [done_event(self.run_id, self.index[row]) for row in self.groups[g.group]]
                futures.update({self.client.submit(ingest_sample, row, store, *settings, ([None] + events)[k],
                                                   events[k], pure=False): (g, [row])
                                for k, row in enumerate(self.groups[g.group])})
            else:
                futures[self.client.submit(ingest_group, self.groups[g.group], store, *settings, pure=False)] = \
                    (g, self.groups[g.group])
        return futures

    def warn_of_unlisted_groups(self) -> None:
        """A group of an earlier run that the manifest no longer lists keeps its stores, unsaid
        otherwise: a command run on them reads samples the batch has left out."""
        earlier = [d.name for d in self.workdir.children() if d.name not in self.groups
                   and (d / "counts.zarr").exists() and (d / "moments.zarr").exists()]
        if earlier:
            self.warn(f"warning: {self.workdir} holds the stores of group(s) {first_few(sorted(earlier))} of an "
                      f"earlier run, which the manifest no longer lists; they are left as they are (remove them "
                      f"if they are no longer wanted)")

    def ingested(self, ingests: Waiter, future, group: GroupResult, group_rows) -> list[SampleResult]:
        """The SampleResults of one finished ingest task (failed, when the task itself died)."""
        try:
            results = ingests.result(future)
            return results if isinstance(results, list) else [results]
        except Exception as exc:  # noqa: BLE001 - the task itself died (e.g. a worker's memory)
            if lost_scheduler(self.client, exc):
                raise
            return [SampleResult(r.sample, group.group, "failed", error=_error_text(exc) + self._waited(exc, r))
                    for r in group_rows]

    def _waited(self, exc: BaseException, row: ManifestRow) -> str:
        """What to add to the death of ``row``'s task: the sample may only have been waiting for
        its turn, on a worker that another sample ran out of memory (an audit's waiting samples
        all failed "most likely out of memory")."""
        if worker_died(exc) is None or not self.workdir.is_local:
            return ""
        members = self.groups[row.group]
        # by the samples before it, not the order the deaths are reported in (an audit's first
        # waiting sample was reported after the large one, and named no other)
        before = next((r for r in members[:members.index(row)] if r not in self.over or r in self.died), None)
        self.died.add(row)
        if before is None:
            return ""
        how = "died with its worker too" if before in self.over else "was not yet over"
        return (f". Sample {before.sample}, listed before it in group {row.group}, {how}, so this one may only "
                f"have been waiting for its turn on a worker that died of another's work; a rerun ingests it")

    def record(self, group: GroupResult, results: list[SampleResult]) -> None:
        self.summary.samples.extend(results)
        for r in results:
            rows_read = f", {r.n_rows:,} rows" if r.n_rows else ""
            self.echo(f"sample {r.sample} ({r.group}): {r.status}" + (f": {r.error}" if r.error else rows_read))
            for note in r.notes:  # each names its sample; one said of an earlier sample too is shortened
                said = note.removeprefix("note: ").removeprefix("warning: ").removeprefix(f"sample {r.sample}: ")
                if said in self.notes_said:
                    self.warn(f"{note[:note.index(said)]}as for sample {self.notes_said[said]}")
                else:
                    self.notes_said[said] = r.sample
                    self.warn(note)
        if any(r.status == "failed" for r in results):
            group.status, group.error = "skipped", "a sample failed; moments not updated"

    def show(self) -> None:
        """``progress(done, total, note)``: samples ingested and partials computed, of those known."""
        done, total = (sum(v[i] for v in self.partials.values()) for i in (0, 1))
        ingested = len(self.summary.samples)
        self.progress(ingested + done, len(self.rows) + total,
                      f"{ingested}/{len(self.rows)} samples ingested, {done}/{total} partials")

    def _update_group_moments(self, result: GroupResult, progress):
        """The group's moment store brought up to date; one made for other samples or settings
        (the group's samples changed), or before the workdir moved, is batch's own and is made
        again in place (its partials that still hold reused, the rest dropped)."""
        moments = self.workdir / result.group / "moments.zarr"
        counts = open_store(self.workdir / result.group / "counts.zarr")
        others = [s for s in counts.samples if s not in result.samples]
        if others:  # a sample taken out of the manifest, or moved to another group: its counts stay
            self.warn(f"warning: group {result.group}: its counts store {counts.path} also holds "
                      f"{first_few(others)}, which the manifest does not list in it. The group's moments leave "
                      f"them out, but a command run on that counts store reads every sample it holds unless given "
                      f"--samples; to drop them, remove {self.workdir / result.group} and run batch again (its "
                      f"samples are ingested anew)")
        held = [s for s in counts.samples if s in result.samples]
        if len(held) == len(result.samples) and held != result.samples:
            # a sample stored by a later run (repaired, or added) took the next column
            k = next(i for i, (s, listed) in enumerate(zip(held, result.samples)) if s != listed)
            self.warn(f"note: group {result.group}: its counts store holds its samples in an order other than the "
                      f"manifest's (its sample {k + 1} is {held[k]}, where the manifest lists {result.samples[k]}); "
                      f"its moments follow the manifest's, but a command run on that counts store without "
                      f"--samples reads them in the store's order (remove {self.workdir / result.group} and run "
                      f"batch again to store them in the manifest's order)")
        report = update_moments(counts, moments, self.client, self.spec, result.samples, progress=progress,
                                start_again=True)
        if report.started_again:
            changed = {"settings": "its samples or settings changed since its moment store was made",
                       "source": "its moment store was computed from a counts store elsewhere (the workdir moved?)"}
            self.warn(f"group {result.group}: {' and '.join(changed[why] for why in report.started_again)}; made "
                      f"again, {report.reused} of its partials reused (those of unchanged counts)")
        return report

    def update_moments(self, result: GroupResult) -> None:
        start = time.perf_counter()

        def count(done: int, total: int) -> None:
            if self.stopped.is_set():
                return
            with self.lock:
                self.partials[result.group] = (done, total)
                self.show()
        try:
            report = self._update_group_moments(result, count)
        except Exception as exc:  # noqa: BLE001 - reported per group
            if lost_scheduler(self.client, exc):
                raise
            result.status, result.error = "failed", _error_text(exc)
        else:
            result.status = "updated" if report.computed or report.dropped else "unchanged"
            result.computed, result.reused, result.chromosomes = report.computed, report.reused, \
                len(report.chromosomes)
        result.seconds = time.perf_counter() - start
        if self.stopped.is_set():
            return  # the command has ended; what this pass finished a rerun reuses
        self.echo(f"group {result.group}: moments {result.status}"
                  + (f" ({result.error})" if result.error else f", {result.computed} partial(s) computed, "
                                                               f"{result.reused} reused"))


def format_summary(summary: BatchSummary, sep: str | None = None) -> str:
    """Two tables (samples, then groups): aligned text, or with ``sep`` a TSV."""
    samples = [("sample", "group", "status", "rows", "bins", "seconds", "error")] + [
        (r.sample, r.group, r.status, f"{r.n_rows}", f"{r.n_bins}", f"{r.seconds:.1f}", r.error)
        for r in summary.samples]
    groups = [("group", "samples", "moments", "computed", "reused", "chromosomes", "seconds", "error")] + [
        (g.group, ",".join(g.samples), g.status, f"{g.computed}", f"{g.reused}", f"{g.chromosomes}",
         f"{g.seconds:.1f}", g.error) for g in summary.groups]
    return _table(samples, sep) + "\n" + _table(groups, sep)


def _table(rows, sep: str | None) -> str:
    if sep is not None:  # errors may hold any text: keep one row per line
        return "".join(sep.join(" ".join(v.split()) for v in row) + "\n" for row in rows)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]  # the last column is free
    return "".join("  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  " + row[-1] + "\n" for row in rows)
