"""The files a command writes for the user: checked before any work, written under a
temporary name of ours beside them and renamed into place when complete, and the
temporaries a killed run left removed by the next run of the same output.

A temporary of ``DIR/NAME`` is ``DIR/.NAME.tmp-<12 hex digits>``, created with the umask's
permissions (as any other file of the user's) and locked (flock) while its writer lives, so
that :func:`remove_leftovers` removes only what a dead run left: regular files of exactly
that name, never following a symbolic link.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from .documents import written_by
from .stops import STOPS

_HEX = 12
REMOVALS = 20  # tries, 0.1 s apart, of a directory a stopped write may bring back (removed_while_it_returns)
# "." before the name, "." and the longest kind of temporary_path ("scratch": pmd's), "-" and the digits
TEMPORARY_OVERHEAD = 1 + len(".scratch-") + _HEX


def temporary_path(path, kind: str = "tmp") -> Path:
    """A new temporary (or, with ``kind`` "old", set-aside) name beside ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{kind}-{uuid.uuid4().hex[:_HEX]}")


def is_temporary_of(path, candidate, kind: str = "tmp") -> bool:
    """Whether ``candidate``'s name is one :func:`temporary_path` gives ``path``."""
    pattern = rf"\.{re.escape(Path(path).name)}\.{kind}-[0-9a-f]{{{_HEX}}}"
    return re.fullmatch(pattern, Path(candidate).name) is not None


def beside_name(output, extension: str) -> Path:
    """A file written beside a BED ``output``: NAME.bed -> NAME``extension``, any other name
    keeps its whole name (calls.hmr -> calls.hmr``extension``), so outputs that differ only in
    their last extension never share a file beside them."""
    output = Path(output)
    stem = output.stem if output.suffix.lower() == ".bed" else output.name
    return output.with_name(stem + extension)


def same_name(first, second) -> bool:
    """Whether two paths name one entry, spelled alike or reached through links (a directory
    link: --save-model sl/alias/x.bed replaced the BED sl/real/x.bed in a helper's audit)."""
    return os.path.realpath(first) == os.path.realpath(second)


def check_output_file(path) -> Path:
    """``path``, refused (naming it) when it cannot be written: its directory missing or
    unwritable, a directory in its place, a name ending in a separator (a directory's name),
    or a name too long for its temporary."""
    if str(path).endswith((os.sep, "/")):  # Path() would drop it and write the file x.bed for "x.bed/"
        raise ValueError(f"{path}: names a directory (it ends in {os.sep}); give a file name")
    path = _named(path)
    _check_directory(path.parent, path)
    _check_name(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory; give a file name")
    mode = os.lstat(path).st_mode if os.path.lexists(path) else stat.S_IFREG
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a device or a FIFO would be replaced by a file
        raise ValueError(f"{path}: is not a regular file; give the name of a file to write")
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):  # a dangling link is replaced as a name
            if not stat.S_ISREG(os.stat(path).st_mode):
                # /dev/stdout: the output is moved into place, which would replace the link itself
                raise ValueError(f"{path}: is a link to {os.path.realpath(path)}, not to a regular file (a "
                                 f"terminal, pipe or device); outputs are written beside their name and moved into "
                                 f"place, which would replace the link: give the name of a file to write")
    _checked[_entry_key(path)] = (_identity(path), None)
    return path


# Per checked output path, which file it held when checked (None: none) and what this command's
# output there begins with (check_replaceable_file), so that a file put there while the command
# ran is not replaced by its output (the check is made before any work). A name left empty, the
# same file (its mode changed), or one that begins as the command's output (touched, rewritten by
# a rerun) is no one else's.
_checked: dict[str, tuple] = {}


def _locked_by(path: Path) -> Path | None:
    """The entry beside ``path`` whose lock file ``path`` is named as (.NAME.lock, as a store's
    is: io.store.locking), if it exists."""
    match = re.fullmatch(r"\.(.+)\.lock", path.name)
    return path.with_name(match[1]) if match and os.path.lexists(path.with_name(match[1])) else None


def _entry_key(path) -> str:
    """One key per directory entry however spelled: the real directory, and the name in it."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _identity(path) -> tuple | None:
    """Which file (or link) is at ``path`` and its content's size and time, not following a
    link; None: nothing."""
    try:
        entry = os.lstat(path)
    except FileNotFoundError:
        return None
    return entry.st_dev, entry.st_ino, stat.S_IFMT(entry.st_mode), entry.st_size, entry.st_mtime_ns


def _check_unchanged(path: Path) -> None:
    """Refuse to replace a file put or changed at ``path`` after it was checked, unless it is
    one this command may replace (above)."""
    key = _entry_key(path)
    if key not in _checked:
        return
    then, ours = _checked[key]
    now = _identity(path)
    if now is None or now == then or ours is not None and _replaceable(path, ours):
        return
    what = "was made" if then is None else "was changed or replaced"
    raise ValueError(f"{path}: {what} while this command ran, after it was checked; it is left as it is and "
                     f"this run's output is not written there. Move it, or give another output name")


def _replaceable(path, ours) -> bool:
    """Whether the file at ``path`` is empty or is ``ours`` (a link, never ours, is not): it
    begins with ``ours`` (bytes, or a pattern of them), or ``ours(its bytes)`` is true (a
    model, whose command is its last key)."""
    if _empty_file(path):
        return True
    data = _read_entry(path, None if callable(ours) else HEAD_BYTES)
    if callable(ours):
        return ours(data)
    pattern = re.compile(re.escape(ours)) if isinstance(ours, bytes) else ours
    return pattern.match(data) is not None


HEAD_BYTES = 1 << 20  # read to match what a file begins with (a track line, a table's header: its samples)
WHOLE_BYTES = 256 << 20  # read whole to tell it (a model of 45,000 contigs passes HEAD_BYTES)


def _read_entry(path, limit: int | None) -> bytes:
    """The first ``limit`` bytes of the file at ``path`` (None: all of a regular file of at most
    WHOLE_BYTES), b"" for a link (never followed) or a file that cannot be read: someone else's."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if limit is not None:
                return os.read(fd, limit)
            entry = os.fstat(fd)
            if not stat.S_ISREG(entry.st_mode) or entry.st_size > WHOLE_BYTES:
                return b""
            parts = []
            while piece := os.read(fd, 1 << 20):
                parts.append(piece)
            return b"".join(parts)
        finally:
            os.close(fd)
    return b""


def check_replaceable_file(path, ours, named_after=None) -> Path:
    """``path`` (check_output_file), refused when it exists and is not ``ours`` (what this
    command writes there: bytes or a pattern of them it begins with, or a test of its bytes;
    _replaceable): a file of the user's or of another command, or a link, which the command
    did not write and must not replace; also a read-only file and a store's lock file. A file
    the command wrote before (a rerun), or an empty one (`mktemp`'s: nothing to lose), is
    replaced. ``named_after``: the output a file the user did not name is named after."""
    if named_after is not None and os.path.isdir(path):  # "give a file name" would not say which output it is
        raise ValueError(f"{path}: is a directory, where the output named after {named_after} goes; move it, or "
                         f"give another output name")
    path = check_output_file(path)
    key = _entry_key(path)
    _checked[key] = (_checked[key][0], ours)
    locked = _locked_by(path)
    if locked is not None:  # empty, it passed as mktemp's (a helper's audit replaced a moment store's)
        raise ValueError(f"{path}: is the lock file of {locked}, which the commands on it share; give another "
                         f"output name")
    if _is_read_only(path):
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        raise ValueError(f"{path}: is read-only (mode {mode:o}), and is left as it is. Make it writable "
                         f"(chmod u+w) to have it replaced, or give another output name")
    if os.path.lexists(path) and not _replaceable(path, ours):
        what = "is a link" if os.path.islink(path) else \
            f"exists and does not begin as this command's output does{_described(path)}"
        if named_after is not None:
            raise ValueError(f"{path}: {what}; it would be replaced by the output named after {named_after}. "
                             f"Move it, or give another output name")
        raise ValueError(f"{path}: {what}, and is left as it is (outputs replace only what this command "
                         f"wrote). Move it, or give another output name")
    return path


def _described(path) -> str:
    """What the file at ``path`` says it holds, as a refusal shows it: a BED's track line
    (another command's regions, or an older release's), or a JSON document of ours (a model:
    the command that wrote it, io.documents.written_by; `fit` records none); "" for others."""
    head = _read_entry(path, 1024)
    match = re.match(rb'track [^\n]*description="([^"\n]{1,200})', head)
    if match:
        return f" (its track line says: {match[1].decode(errors='replace')})"
    found = written_by(_read_entry(path, None)) if re.match(rb'{\s*"format": "streambhmm-', head) else None
    if found is None:
        return ""
    kind, command = found
    return f" (a model written by `{(command or 'fit')[:40]}`)" if kind == "streambhmm-model" else f" (a {kind[:60]})"


def _is_read_only(path) -> bool:
    """A regular file (not a link) that no one may write: a user's way to keep it, which a
    rename beside it would ignore (and root's writes ignore its mode)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    return stat.S_ISREG(mode) and not mode & 0o222


def _empty_file(path) -> bool:
    """A regular file of no bytes (not a link)."""
    try:
        entry = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(entry.st_mode) and entry.st_size == 0


class Inputs:
    """What a command reads (stores, directories, files), resolved once, and the files a store's
    samples were ingested from (``ingested``, those that still exist): an output must neither
    be one nor lie inside one."""

    def __init__(self, *reads, ingested=(), locks=()):
        self.roots = {}  # resolved path -> (as given, why it is refused)
        for given, why in [(g, "which this command reads") for g in reads] + \
                          [(g, "a file the store's samples were ingested from") for g in ingested
                           if os.path.lexists(g)] + \
                          [(g, "the store's lock file, which commands on it share") for g in locks]:
            if given is None or "://" in str(given):
                continue
            for root in (Path(os.path.abspath(given)), Path(os.path.realpath(given))):
                self.roots.setdefault(root, (given, why))

    def check(self, path, role: str = "") -> None:
        """Refuse ``path`` (``role``: what the command writes there, when the user did not name
        it, as "the table beside x.bed")."""
        named = f"{path} ({role})" if role else f"{path}"
        for where in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
            if where in self.roots:
                given, why = self.roots[where]
                raise ValueError(f"{named}: is {given}, {why}, and the output would replace it; write it elsewhere")
            inside = next((self.roots[p] for p in where.parents if p in self.roots), None)
            if inside is not None:
                raise ValueError(f"{named}: is inside {inside[0]}, {inside[1]}; write it elsewhere")


def check_outside(path, *inputs, ingested=()) -> None:
    """Refuse an output that is or lies inside one of the ``inputs`` the command reads, or is
    one of the ``ingested`` files (Inputs; for many outputs, make one Inputs and check each)."""
    Inputs(*inputs, ingested=ingested).check(path)


def check_output_dir(path) -> Path:
    """``path``, refused (naming it) when it cannot be made in its parent or a file is in its
    place (whether an existing directory may be replaced is the command's to say)."""
    path = _named(path)
    _check_directory(path.parent, path)
    _check_name(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path}: is a file, not a directory")
    return path


def check_output_prefix(prefix: str) -> str:
    """``prefix`` of files PREFIX.*, refused (naming it) when their directory is missing or
    unwritable (each file's name is checked with :func:`check_output_file` once known)."""
    _check_directory(Path(os.path.dirname(f"{prefix}.") or "."), prefix)
    return prefix


def _named(path) -> Path:
    """``path``; made absolute when its last part names no entry of its own ('.', '..')."""
    path = Path(path)
    return Path(os.path.abspath(path)) if path.name in ("", ".", "..") else path


def check_parent_directory(path) -> None:
    """Refuse ``path`` when the directory it goes in is missing (every command refuses it
    instead of making it) or is not a directory."""
    _check_exists(_named(path).parent, path)


def _check_exists(directory: Path, shown) -> None:
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist (create it first)"
        raise ValueError(f"{shown}: the directory {directory} {what}")


def _check_directory(directory: Path, shown) -> None:
    """Every command refuses a missing directory instead of making it, and one it cannot write in.
    Asked of the kernel, not tried with a file: a probe file would be made before the command
    knows the directory is inside a store it reads (a helper's audit)."""
    _check_exists(directory, shown)
    if not os.access(directory, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids):
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        reason = os.strerror(errno.EROFS if read_only else errno.EACCES)
        raise ValueError(f"{shown}: cannot write in {directory} ({reason})")


def _create_new(path: Path, flags: int, mode: int, shown, directory) -> int:
    """A new file (a link there is not followed), or ValueError naming ``shown``."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise ValueError(f"{shown}: cannot write in {directory} ({exc.strerror})") from None


def _check_name(path: Path) -> None:
    """The name and its temporary's fit the file system's limit on a name."""
    limit = _name_max(path.parent)
    size = len(os.fsencode(path.name))
    if size + TEMPORARY_OVERHEAD > limit:
        shown = str(path) if len(str(path)) <= 200 else f"{str(path)[:100]}...{str(path)[-100:]}"
        raise ValueError(f"{shown}: the file name is {size} bytes; at most {limit - TEMPORARY_OVERHEAD} fit in "
                         f"{path.parent.resolve()} (it is written first under a name up to {TEMPORARY_OVERHEAD} bytes "
                         f"longer)")


def _name_max(directory: Path) -> int:
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


@dataclass
class _Written:
    """A complete temporary awaiting its rename (written_together); ``release`` closes its
    descriptor, removing the temporary unless it was renamed."""

    tmp: Path
    fd: int
    path: Path
    release: contextlib.ExitStack


_together: ContextVar[list | None] = ContextVar("written_together", default=None)


@contextlib.contextmanager
def written_together(commit_on: tuple = ()):
    """The files that :func:`replacing` (and :func:`replacing_pair`, a bigWig) complete inside
    the block are renamed into place together when it ends, Ctrl-C and SIGTERM ignored
    meanwhile, in the order they were completed: a command stopped or failing before then
    leaves every one of them as it was (a BED never beside another run's table), and so does
    a rename that fails (the files renamed before it are put back). An exception of a type
    in ``commit_on`` renames the files completed so far before it goes on. Nested: the
    outermost block renames them."""
    if _together.get() is not None:
        yield
        return
    written: list[_Written] = []
    token = _together.set(written)
    try:
        try:
            yield
        except commit_on:
            _put_in_place_together(written)
            raise
        finally:
            _together.reset(token)
        _put_in_place_together(written)
    finally:
        for item in written:
            item.release.close()


def _put_in_place_together(written: list) -> None:
    """Rename each complete temporary to its path; if one cannot be, put back what the
    others replaced (each set aside first as a hard link, or a copy) and say so."""
    for item in written:
        with no_room_said(item.path, item.tmp):
            os.fsync(item.fd)
    replaced, asides = [], []
    with interruptions_held():
        for item in written:
            _check_unchanged(item.path)  # all before any rename: a refusal leaves every file as it was
        try:
            for item in written:
                aside = _set_aside(item.path)
                if aside is not None:
                    asides.append(aside)
                _replace(item.tmp, item.path)
                replaced.append((item.path, aside))
        except ValueError as exc:
            for path, aside in reversed(replaced):
                if aside is None:
                    path.unlink(missing_ok=True)  # it was not there before
                else:
                    os.replace(aside, path)
            n = len(written) - 1
            others = "" if n == 0 else ", as is the other file of this run" if n == 1 else \
                f", as are the {n} other files of this run"
            raise ValueError(f"{exc}{others}") from None
        finally:
            for aside in asides:
                aside.unlink(missing_ok=True)  # those put back are gone already
        for directory in dict.fromkeys(item.path.parent for item in written):
            sync_directory(directory)


def _set_aside(path: Path) -> Path | None:
    """A second name for the file (or link) at ``path``, which its replacement leaves in
    place (None: nothing there to keep)."""
    if not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)):
        return None
    aside = temporary_path(path, "old")
    try:
        os.link(path, aside, follow_symlinks=False)
    except OSError:  # a filesystem without hard links
        shutil.copy2(path, aside, follow_symlinks=False)
    return aside


def defer_rename(tmp: Path, fd: int, path: Path, held: contextlib.ExitStack) -> bool:
    """Leave the rename of the complete ``tmp`` to the written_together block running, if
    one is, taking over what ``held`` would close (``fd``, and ``tmp`` unless renamed) until
    after it; False: none is (``held`` is left as it was)."""
    written = _together.get()
    if written is None:
        return False
    written.append(_Written(tmp, fd, path, held.pop_all()))
    return True


@contextlib.contextmanager
def replacing(path, mode: str = "w"):
    """A file object writing ``path``'s temporary, flushed to disk (fsync) and renamed to
    ``path`` when the block ends without an exception (in a :func:`written_together` block,
    when that ends), removed when it raises. Opening the temporary fails with a message
    naming ``path``."""
    path = Path(path)
    with contextlib.ExitStack() as stack:
        tmp, fd = stack.enter_context(held_temporary(path))
        with no_room_said(path, tmp), os.fdopen(os.dup(fd), mode) as fh:
            yield fh
        if not defer_rename(tmp, fd, path, stack):
            rename_into_place(fd, tmp, path)


NO_ROOM = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a quota reached
ROOM_LEFT = 1 << 20  # bytes a disk that filled has free at most, as far as no_room_said goes


@contextlib.contextmanager
def no_room_said(path: Path, tmp: Path):
    """A full disk (or quota) met writing ``path``'s temporary ``tmp`` said as a refusal naming
    ``path``, which is left as it was (the temporary is removed): it was a traceback of
    `hmr` (a helper's audit). Errors of other files (named in them) pass."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_ROOM or exc.filename not in (None, str(tmp)):
            raise
        kept = "it is left as it was" if os.path.lexists(path) else "nothing was written"
        fs = os.statvfs(path.parent)
        if exc.errno == errno.ENOSPC and fs.f_bavail * fs.f_frsize > ROOM_LEFT:  # the store's (decode --posteriors)
            raise ValueError(f"{path}: not written ({exc.strerror.lower()} on another disk the command writes, "
                             f"as {path.parent.resolve()} has {fs.f_bavail * fs.f_frsize / 2**20:,.0f} MiB free: the "
                             f"store's?); {kept}") from None
        raise ValueError(f"{path}: cannot be written in {path.parent.resolve()} ({exc.strerror.lower()}); {kept}. "
                         f"Free space there, or write it elsewhere") from None


@contextlib.contextmanager
def replacing_pair(first, second):
    """(``first``'s file object, ``second``'s): two files written together (a BED and the table
    beside it), as :func:`replacing` writes each, after removing what killed runs left of them,
    and renamed together (written_together): ``first`` before ``second``, so a ``first`` that
    cannot be replaced leaves both as they were."""
    for path in (first, second):
        remove_leftovers(path)
    with written_together(), replacing(second) as later, replacing(first) as sooner:
        yield sooner, later


def check_distinct(named) -> None:
    """Refuse, before any work, two of a command's outputs at one path (``named``: (path, what
    would be written there)): names made from sample names keep only letters, digits and
    . _ - +, so two samples can come to one file name."""
    seen = {}
    for path, what in named:
        key = os.path.realpath(path)  # one entry however reached (same_name)
        if key in seen:
            raise ValueError(f"{path}: both {seen[key]} and {what} would be written there (file names keep the "
                             f"letters, digits and . _ - + of sample names); rename one of the samples "
                             f"(`streambhmm ingest` it again under another name) or choose another output name")
        seen[key] = what


def rename_into_place(fd: int, tmp: Path, path: Path) -> None:
    """Flush the temporary open as ``fd`` to disk, rename it to ``path``, and flush the
    directory's entry of it."""
    with no_room_said(path, tmp):
        os.fsync(fd)
    _check_unchanged(path)
    _replace(tmp, path)
    sync_directory(path.parent)


def _replace(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` to ``path`` (checked with _check_unchanged first)."""
    try:
        os.replace(tmp, path)
    except OSError as exc:  # an immutable file, another user's in a sticky directory
        raise ValueError(f"{path}: cannot be replaced ({exc.strerror}); it is left as it was") from None
    key = _entry_key(path)
    if key in _checked:
        _checked[key] = (_identity(path), _checked[key][1])  # ours now: the command may write it again


def sync_directory(directory) -> None:
    """fsync a local directory (its entries: a rename in it survives a crash)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(root) -> None:
    """fsync every regular file and directory under the local directory ``root`` (symbolic
    links are neither followed nor synced)."""
    for directory, _, files in os.walk(root, followlinks=False):
        for name in files:
            with contextlib.suppress(OSError):  # a link (ELOOP) or a special file: not ours to sync
                fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        os.fsync(fd)
                finally:
                    os.close(fd)
        sync_directory(directory)


@contextlib.contextmanager
def held_temporary(path):
    """(temporary path, its descriptor): a new empty temporary of ``path``, locked for as
    long as the block runs (so no other run takes it for a leftover), removed unless the
    block renamed it."""
    tmp, fd = _create_locked(path)
    try:
        yield tmp, fd
    finally:
        if _is_file_of(fd, tmp):
            tmp.unlink()
        os.close(fd)


def _create_locked(path) -> tuple[Path, int]:
    while True:
        tmp = temporary_path(path)
        fd = _create_new(tmp, os.O_RDWR, 0o666, path, Path(path).parent)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _is_file_of(fd, tmp):
            return tmp, fd
        os.close(fd)  # another run took it for a leftover in the instant before the lock: a new name


def _is_file_of(fd: int, path: Path) -> bool:
    """Whether ``path`` is still the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def remove_leftovers(path) -> list[Path]:
    """Remove the temporaries of ``path`` that killed runs left (regular files named as
    :func:`temporary_path` names them, whose writer is gone); returns them."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    for candidate in path.parent.iterdir():
        if is_temporary_of(path, candidate) and _remove_abandoned(candidate):
            removed.append(candidate)
    return removed


def _remove_abandoned(candidate: Path) -> bool:
    """Remove ``candidate`` if it is a regular file (a link is not followed) whose lock no
    live writer holds; the lock is held while it is removed."""
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # a symbolic link (ELOOP), gone, or not ours to open
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer holds it
        if not _is_file_of(fd, candidate):
            return False
        candidate.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory_lock_now(directory: Path):
    """``directory``'s lock (not following a link), or BlockingIOError when a live run holds it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


SCRATCH_MARK = ".streambhmm-scratch"  # in every scratch directory: what tells a killed run's from a user's


@contextlib.contextmanager
def scratch_directory(path):
    """A new directory beside ``path`` (so on its filesystem) for a command's temporary
    files, locked while the command runs and removed with them afterwards. Directories that
    killed runs left for ``path`` (our name, a directory itself holding our mark, no live
    run's lock) are removed first."""
    path = Path(path)
    for candidate in path.parent.iterdir():
        # a live run's (locked), a link, gone, or without our mark (a user's): left as it is
        if is_temporary_of(path, candidate, "scratch") and is_plain(candidate / SCRATCH_MARK):
            with contextlib.suppress(OSError), directory_lock_now(candidate):
                shutil.rmtree(candidate)
    scratch = temporary_path(path, "scratch")
    with contextlib.ExitStack() as stack:
        # created and locked with stops held off: a stop between the two would leave it (seen
        # once: SIGTERM as the directory appeared), or another run's cleanup could take it
        with interruptions_held(deliver_after=True), no_room_for_scratch(path):
            scratch.mkdir()
            stack.callback(_remove_scratch, scratch)
            stack.enter_context(directory_lock_now(scratch))
            (scratch / SCRATCH_MARK).touch()
        yield scratch


@contextlib.contextmanager
def no_room_for_scratch(path: Path):
    """A disk without room (or inodes) for a scratch directory said as a refusal naming the
    output it is beside: it was a traceback of `pmd` and `tracks` (a helper's audit)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        raise ValueError(f"{path}: no room in {path.parent.resolve()} for a scratch directory beside it "
                         f"({exc.strerror.lower()}); nothing was written. Free space there, or write "
                         f"elsewhere") from None


def is_plain(path: Path, kind=stat.S_ISREG) -> bool:
    """A regular file (``kind`` stat.S_ISDIR: a directory) itself, not a symbolic link to one."""
    try:
        return kind(os.lstat(path).st_mode)
    except OSError:  # not there, or a path through a file
        return False


def _remove_scratch(scratch: Path) -> None:
    with interruptions_held():
        removed_while_it_returns(lambda: shutil.rmtree(scratch, ignore_errors=True), lambda: os.path.lexists(scratch))


def removed_while_it_returns(remove, exists) -> None:
    """``remove()``, once zarr's pending writes are done, and tried again while ``exists()``.
    A stop that interrupts a zarr call (its sync()) does not cancel the call's writes: zarr's
    I/O thread went on to create files in a directory after it was removed (seen once in 45
    stopped ingests, and in 5 of 120 `pmd` runs stopped as their scratch store began). Only
    the main thread's calls are interrupted so: elsewhere (a Dask task) the wait is left out,
    as zarr's loop there serves the other tasks too, whose writes may never all be done at
    once (an audit's stopped batch waited 10 s a sample)."""
    if threading.current_thread() is threading.main_thread():
        _zarr_writes_finished()
    for _ in range(REMOVALS):
        remove()
        if not exists():
            return
        time.sleep(0.1)


def _zarr_writes_finished(timeout: float = 10.0) -> None:
    """Wait (at most ``timeout`` seconds) for the tasks on zarr's event loop: the file
    operations of zarr calls that a stop interrupted."""
    sync = sys.modules.get("zarr.core.sync")  # not imported: zarr wrote nothing
    loop = sync.loop[0] if sync is not None else None
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def others_done():
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others)

    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(others_done(), loop).result(timeout)


@contextlib.contextmanager
def interruptions_held(deliver_after: bool = False):
    """Ctrl-C and SIGTERM held off meanwhile (in the main thread; elsewhere signals do not
    arrive): a second Ctrl-C while a stopping command removes its temporaries would leave
    them half removed. One that comes is dropped: the command's work is done (its files in
    place, its sample committed). With ``deliver_after`` it is delivered when the block ends,
    for work that more work follows (an upgrade's samples, committed one by one into its new
    store)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []

    def held_off(signum, frame):
        pending.append(signum)

    handler = held_off if deliver_after else signal.SIG_IGN
    held = {sig: signal.signal(sig, handler) for sig in STOPS}
    try:
        yield
    finally:
        for sig, previous in held.items():
            signal.signal(sig, previous)
        if pending:
            signal.raise_signal(pending[0])
