"""Recovery: what killed writers left beside a store, finished (a commit past its commit
point, a swap between its renames) or removed (stagings whose writer is gone)."""

from __future__ import annotations

import fcntl
import os
import re
import stat

from ..storage import BESIDE_DIGITS, Location
from .commit import complete_commit
from .schema import COMMIT, OWNER_LOCK


LEFTOVER_SUFFIX = re.compile(f"[0-9a-f]{{{BESIDE_DIGITS}}}")


def _leftovers(path: Location, kind: str) -> list[Location]:
    """This user's ``kind`` (ingest, old, tmp) entries beside the store. Another user's, in a
    shared directory, are theirs to finish or remove: completing a staging planted there
    would put its counts into this store."""
    prefix = f"{path.name}.{kind}-"  # matched literally: a store may be named x[1].zarr, a pattern of x1.zarr
    # and then only the names our writers give (storage.beside): an audit's
    # counts.zarr.old-mine, a folder of the user's, went with a batch's recovery
    return [entry for entry in path.parent.children(prefix)
            if LEFTOVER_SUFFIX.fullmatch(entry.name[len(prefix):]) and _ours(entry)]


def _ours(entry: Location, every_file: bool = False) -> bool:
    """Whether this user made ``entry`` (and, with ``every_file``, every file under it, none
    a symbolic link); entries at URLs have no owner and are taken as made."""
    if not entry.is_local:
        return True
    uid = os.geteuid()
    try:
        if os.lstat(entry.url).st_uid != uid:
            return False
        for root, directories, files in os.walk(entry.url) if every_file else ():
            for name in directories + files:
                status = os.lstat(os.path.join(root, name))
                if status.st_uid != uid or stat.S_ISLNK(status.st_mode):
                    return False
    except FileNotFoundError:
        return False
    return True


def needs_recovery(path) -> bool:
    """Whether a killed writer of this user left work to finish: a store moved aside
    mid-swap, or a committed sample not yet in place."""
    path = Location.of(path).real()
    if not path.exists() and _leftovers(path, "old"):
        return True
    return any((s / COMMIT).exists() for s in _leftovers(path, "ingest"))


def recover(path) -> None:
    """Under the store's exclusive lock: finish or undo what this user's killed writers left.
    A swap killed between its renames gets the old store back; a committed sample is put in
    place (when every file of its staging is this user's, no link among them); a staging
    directory whose writer is gone (its owner lock is free) is removed; leftovers of swaps
    are removed."""
    path = Location.of(path).real()
    old = _leftovers(path, "old")
    if not path.exists() and old:
        old[-1].rename(path)  # killed between the two renames: keep the old store
        old = old[:-1]
    for leftover in old + _leftovers(path, "tmp"):
        leftover.rmtree()
    for staging in _leftovers(path, "ingest"):
        if (staging / COMMIT).exists():
            if not _ours(staging, every_file=True):
                continue  # a link or another user's file inside: not this user's commit to complete
            complete_commit(path, staging, f"{path}: a commit stopped after its commit point ({staging.name}) could "
                                           f"not be completed", "it")
        elif not _owned(staging):
            staging.rmtree()


def _owned(staging: Location) -> bool:
    """Whether a live writer holds the staging directory (always assumed on URLs)."""
    if not staging.is_local:
        return True
    try:
        fd = os.open((staging / OWNER_LOCK).url, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no owner lock: an incomplete leftover
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
