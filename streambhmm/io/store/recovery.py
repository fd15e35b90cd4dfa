"""Recovery: what killed writers left beside a store, finished (a commit past its commit
point, a swap between its renames) or removed (stagings whose writer is gone)."""

from __future__ import annotations

import fcntl
import os

from ..storage import Location
from .commit import complete_commit
from .schema import COMMIT, OWNER_LOCK


def _stagings(path: Location) -> list[Location]:
    return path.parent.glob(f"{path.name}.ingest-*")


def needs_recovery(path) -> bool:
    """Whether a killed writer left work to finish: a store moved aside mid-swap, or a
    committed sample not yet in place."""
    path = Location.of(path).real()
    if not path.exists() and path.parent.glob(f"{path.name}.old-*"):
        return True
    return any((s / COMMIT).exists() for s in _stagings(path))


def recover(path) -> None:
    """Under the store's exclusive lock: finish or undo what killed writers left. A swap
    killed between its renames gets the old store back; a committed sample is put in place;
    a staging directory whose writer is gone (its owner lock is free) is removed;
    leftovers of swaps are removed."""
    path = Location.of(path).real()
    old = path.parent.glob(f"{path.name}.old-*")
    if not path.exists() and old:
        old[-1].rename(path)  # killed between the two renames: keep the old store
        old = old[:-1]
    for leftover in old + path.parent.glob(f"{path.name}.tmp-*"):
        leftover.rmtree()
    for staging in _stagings(path):
        if (staging / COMMIT).exists():
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
