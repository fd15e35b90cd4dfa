"""The store's lock: a sibling lock file, shared for readers and exclusive for writers, taken
without following links; whoever takes it first finishes what killed writers left."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass

from ..limits import WAIT_ENV, wait_timeout
from ..storage import Location
from .recovery import needs_recovery, recover
from .schema import StoreError, store_around


def _read_only(directory: Location) -> bool:
    """Whether nobody can write in ``directory``: its filesystem is mounted read-only, or its
    mode lets no one write."""
    try:
        return bool(os.statvfs(directory.url).f_flag & os.ST_RDONLY) or not os.stat(directory.url).st_mode & 0o222
    except OSError:
        return False


def open_lock(lock_file: Location, shared: bool = False) -> int | None:
    """The lock file, opened without following a symlink and never truncated (a planted link
    cannot make us clobber its target). A shared lock needs no write access (flock works on
    a file opened read-only); None: a reader on read-only media, where there is nothing to
    exclude."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if shared:
            with contextlib.suppress(FileNotFoundError):
                return os.open(lock_file.url, flags | os.O_RDONLY)
            return os.open(lock_file.url, flags | os.O_RDONLY | os.O_CREAT, 0o666)  # the umask decides
        return os.open(lock_file.url, flags | os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        if shared and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and _read_only(lock_file.parent):
            return None
        raise StoreError(_lock_problem(lock_file, exc, shared)) from None


def _lock_problem(lock_file: Location, exc: OSError, shared: bool) -> str:
    directory, reason = lock_file.parent, (exc.strerror or str(exc)).lower()
    if exc.errno == errno.ELOOP:
        return (f"the lock file {lock_file} is a symbolic link, which streambhmm never creates (it may have been "
                f"planted); remove the link")
    if exc.errno == errno.EROFS:
        return f"{directory} is on a read-only file system: a store there can be read, not written"
    if exc.errno in (errno.EACCES, errno.EPERM) and shared and os.path.lexists(lock_file.url):
        return f"cannot read the lock file {lock_file} ({reason}); its owner can let others read it (chmod a+r)"
    if exc.errno in (errno.EACCES, errno.EPERM) and shared:
        return (f"cannot create the lock file {lock_file} ({reason}); someone who may write in {directory} can "
                f"create it (any streambhmm command on the store does), or make the directory read-only")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write in {directory} (opening the lock file {lock_file.name}: {reason})"
    return f"cannot open the lock file {lock_file} ({reason})"


@dataclass(frozen=True)
class LockWait:
    """What a command says when another holds a store's lock it needs."""

    holders: str = "another streambhmm command"  # who else may hold it
    waiter: str = ""  # who waits, when not the command itself (a batch's sample)
    quiet: bool = False  # say nothing (batch -q: its samples' ingests take turns at their store's lock)


# batch's ingests share their group's store: a wait there is most often for another of its own samples
LOCK_WAIT: ContextVar[LockWait] = ContextVar("lock_wait", default=LockWait())


def _take_lock(fd: int, operation: int, path: Location) -> None:
    """flock, saying on stderr what the command waits for when another holds the lock
    (LOCK_WAIT). The wait is as long as the holder's run, which is bounded itself: every
    command's waits on Dask and on a scheduler are (io/tasks.py, distributed/cluster.py).
    A holder known to be another program, not Python (a user's `flock`), is not bounded so:
    it is waited for at most io.limits.wait_timeout() seconds, then refused naming it (a
    helper's audit waited for ever, told that a streambhmm command held the lock)."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        wait = LOCK_WAIT.get()
        kind, others = _holders(fd)
        if not wait.quiet:
            holder = "writing" if operation == fcntl.LOCK_SH else "reading or writing"
            who = {"other": f"{others} holds it, not a streambhmm command",
                   "unknown": "a process that /proc/locks does not tell holds it (a streambhmm command, or one "
                              "that inherited the lock?)"}.get(kind, f"{wait.holders} is {holder} it")
            print(f"{wait.waiter + ': ' if wait.waiter else ''}waiting for the lock of {path}: {who}",
                  file=sys.stderr, flush=True)
    if kind == "other":
        _wait_for_another_program(fd, operation, path, others)
    else:
        fcntl.flock(fd, operation)


def _wait_for_another_program(fd: int, operation: int, path: Location, others: str) -> None:
    """flock within io.limits.wait_timeout() seconds while only other programs hold the
    lock (waiting without a bound once a streambhmm command holds it), else StoreError."""
    limit = wait_timeout()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.2)
        if _holders(fd)[0] != "other":  # now a streambhmm command's (or no longer to be told)
            fcntl.flock(fd, operation)
            return
    raise StoreError(f"{path}: its lock ({lock_file(path)}) has been held for {limit:.0f} s by {others}, which is not "
                     f"a streambhmm command; end it, or wait longer with ${WAIT_ENV}=SECONDS")


def _holders(fd: int) -> tuple[str, str]:
    """Who holds the flock of the file open as ``fd``, from /proc/locks: ("streambhmm", "")
    for this process, a streambhmm command or a Python program; ("other", "process PID (its
    command line), ...") when every holder is another program; ("unknown", "") when they
    cannot be told (no /proc/locks, a holder gone or in another PID namespace, whose lock a
    child it forked may hold)."""
    entry = os.fstat(fd)
    key = f"{os.major(entry.st_dev):02x}:{os.minor(entry.st_dev):02x}:{entry.st_ino}"
    try:
        with open("/proc/locks") as fh:  # "1: FLOCK  ADVISORY  WRITE 1503 00:2e:1863 0 EOF"; waiters have "->"
            pids = {int(f[4]) for f in (line.split() for line in fh) if len(f) > 5 and f[1] == "FLOCK" and f[5] == key}
    except (OSError, ValueError):
        return "unknown", ""
    commands = {pid: _command_line(pid) for pid in pids}
    if os.getpid() in pids or any(args is not None and _may_be_streambhmm(args) for args in commands.values()):
        return "streambhmm", ""
    if not pids or any(args is None for args in commands.values()):
        return "unknown", ""
    return "other", ", ".join(f"process {pid} ({' '.join(args)[:200]})" for pid, args in sorted(commands.items()))


def _command_line(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [os.fsdecode(a) for a in fh.read().split(b"\0") if a]
    except OSError:  # gone, or in another PID namespace
        return None


def _may_be_streambhmm(args: list[str]) -> bool:
    """A streambhmm command (its script, `python -X dev -m streambhmm`, `coverage run -m
    streambhmm`) or a Python program, which may be one using streambhmm's API (a notebook's
    ingest, a test)."""
    if not args:
        return False
    return any(os.path.basename(a) == "streambhmm" for a in args) or \
        os.path.basename(args[0]).startswith(("python", "pypy"))


def lock_file(path: Location) -> Location:
    """The lock file of the store at the real local ``path``: beside it, hidden."""
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def locked(path, shared: bool = False):
    """Lock ``path`` through a sibling lock file: exclusive for writers, ``shared`` for
    readers, so a store never changes under a command reading it (a commit waits for the
    readers, a reader waits for a commit). The lock goes by the real path: however a store
    is reached (a symbolic link to it or to a directory above it), it is one lock. fsspec
    URLs get no lock: there, one writer per store at a time, and no readers meanwhile, is
    the user's to ensure."""
    path = Location.of(path)
    if not path.is_local:
        recover(path)
        yield
        return
    path = path.real()
    around = store_around(path.url)
    if around is not None:  # its lock file would be made inside that store
        raise StoreError(f"{path}: is a part of the counts store {around}, not a store; pass {around}")
    if shared and _held.get(path.url):  # this process holds it already (a caller of a reader)
        yield
        return
    if shared and not (path / "zarr.json").exists() and not lock_file(path).exists() and not needs_recovery(path):
        yield  # no store to read (the caller says so): no lock file beside the user's path
        return
    path.parent.mkdir()  # no error where it exists, read-only or not
    fd = open_lock(lock_file(path), shared)
    if fd is None:
        if needs_recovery(path):
            raise StoreError(f"{path}: a commit stopped after its commit point awaits completion, which needs to "
                             f"write; run any streambhmm command on the store where it is writable")
        yield  # read-only media: nobody can change the store
        return
    try:
        _take_lock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, path)
        if not shared:
            recover(path)
        elif needs_recovery(path):
            _take_lock(fd, fcntl.LOCK_EX, path)  # a writer died mid-change: finish it first
            recover(path)
            fcntl.flock(fd, fcntl.LOCK_SH)
        with _holding(path.url) if shared else contextlib.nullcontext():
            yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def recover_if_free(path) -> bool:
    """recover() the local store at ``path`` if its lock is free now (True), without waiting
    for the commands that hold it (False: the next writer recovers it)."""
    path = Location.of(path).real()
    fd = open_lock(lock_file(path))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            recover(path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


_held: dict[str, int] = {}  # real path -> how many of this process's blocks hold its shared lock
_held_guard = threading.Lock()


@contextlib.contextmanager
def _holding(url: str):
    """Count a held lock: a shared lock taken again inside it is already held. A second
    descriptor's lock would wait on the first where the store needs recovery (an upgrade to
    exclusive), for ever (a helper's audit: `hmr --moments` on a store with a stale staging
    folder)."""
    with _held_guard:
        _held[url] = _held.get(url, 0) + 1
    try:
        yield
    finally:
        with _held_guard:
            _held[url] -= 1
            if not _held[url]:
                del _held[url]
