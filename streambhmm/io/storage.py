"""Where stores live: a local directory, or any fsspec URL (``s3://``, ``gs://``, ``memory://``...).

Zarr and xarray open both through the same string (:attr:`Location.url`). The few file
operations the stores need besides Zarr (listing, renaming, removing, small JSON files) go
through ``os``/``shutil`` locally and through fsspec otherwise. ``file://`` and ``local://``
URLs are local paths. Renames are atomic locally; on object stores a rename is a copy and a
delete, so readers rely on the checksums and manifests (written last) instead.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shutil
import signal
import stat
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .outputs import replacing, sync_directory, sync_tree

# a killed write's temporary inside a store: outputs.temporary_path's files (.NAME.tmp-<hex>) and
# a moment store's partials being written (.tmp-<hex>)
TEMPORARY_NAME = re.compile(r"\.(?:.+\.)?tmp-[0-9a-f]{12}")


def _glob_escaped(path: str) -> str:
    """``path`` as a glob pattern that matches it alone: fsspec's rm globs the path it is given,
    and a chromosome may be named with '*' (HLA-A*01:01), which would match others' names."""
    return re.sub(r"([*?\[])", r"[\1]", path)


@dataclass(frozen=True)
class Location:
    url: str  # a plain path when local

    @classmethod
    def of(cls, where) -> "Location":
        if isinstance(where, Location):
            return where
        text = os.fspath(where)
        for local in ("file://", "local://"):  # fsspec's names of the local filesystem
            if text.startswith(local):
                text = text[len(local):] or "/"
        return cls(text.rstrip("/") if "://" in text else text)

    @property
    def is_local(self) -> bool:
        return "://" not in self.url

    @property
    def in_process_memory(self) -> bool:
        """fsspec's memory filesystem: each process has its own, which no other one reaches."""
        return self.url.startswith("memory://")

    @cached_property
    def _fs(self):
        import fsspec  # lazy: it imports isal, which a command not reading URLs does without

        fs, path = fsspec.core.url_to_fs(self.url)
        return fs, path

    @property
    def fs(self):
        return self._fs[0]

    @property
    def fs_path(self) -> str:
        return self._fs[1]

    def __str__(self) -> str:
        return self.url

    def __fspath__(self) -> str:
        if not self.is_local:
            raise TypeError(f"{self.url} is not a local path")
        return self.url

    def __truediv__(self, part: str) -> "Location":
        if self.is_local:
            if self._plain and part and "/" not in part and part != ".":  # what Path gives, without its cost
                child = Location(f"{self.url}/{part}")
                child.__dict__["_plain"] = True  # a plain path and a name: plain too
                return child
            return Location(str(Path(self.url) / part))
        return Location(f"{self.url}/{part}")

    @cached_property
    def _plain(self) -> bool:
        """A local path as Path spells it (and not "."): a name joins it with one "/"."""
        return self.url != "." and str(Path(self.url)) == self.url and not self.url.endswith("/")

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> "Location":
        if self.is_local:
            return Location(str(Path(self.url).parent))
        return Location(self.url.rstrip("/").rsplit("/", 1)[0])

    def resolve(self) -> str:
        return str(Path(self.url).resolve()) if self.is_local else self.url

    def real(self) -> "Location":
        """The same place with every symbolic link resolved (locally): one name for one place,
        however the user spelled it."""
        return Location(self.resolve()) if self.is_local else self

    def absolute(self) -> "Location":
        """A local path made absolute (URLs as they are): what a task sent to a worker needs,
        whose working directory is its own."""
        return Location(os.path.abspath(self.url)) if self.is_local else self

    def exists(self) -> bool:
        return Path(self.url).exists() if self.is_local else self.fs.exists(self.fs_path)

    def children(self, prefix: str = "") -> list["Location"]:
        """The entries in this directory whose names begin with ``prefix``, sorted by name
        (none when it is no directory). Names are matched before Locations are made: beside a
        batch's hundreds of staged samples, making them all took half of each commit."""
        if self.is_local:
            if not os.path.isdir(self.url):
                return []
            return [self / name for name in sorted(os.listdir(self.url)) if name.startswith(prefix)]
        if not self.fs.isdir(self.fs_path):
            return []
        names = sorted(Path(p).name for p in self.fs.ls(self.fs_path, detail=False))
        return [self / name for name in names if name.startswith(prefix)]

    def glob(self, pattern: str) -> list["Location"]:
        """Entries matching ``pattern``, a '/'-separated sequence of fnmatch parts."""
        found = [self]
        for part in pattern.split("/"):
            found = [c for loc in found for c in loc.children() if fnmatch.fnmatchcase(c.name, part)]
        return found

    def file_in_the_way(self) -> Path | None:
        """Locally, the nearest existing ancestor when it is a file (making this directory would
        fail there); else None."""
        if not self.is_local:
            return None
        above = next((p for p in Path(self.url).parents if p.exists()), None)
        return above if above is not None and not above.is_dir() else None

    def mkdir(self) -> None:
        if self.is_local:
            blocker = self.file_in_the_way()
            if blocker is not None:
                raise ValueError(f"cannot make {self.url}: {blocker} is a file, not a directory")
            Path(self.url).mkdir(parents=True, exist_ok=True)
        # object stores have no directories; memory:// and others create them implicitly

    def rename(self, target: "Location") -> None:
        """Move this entry to ``target`` (which must not exist): atomic locally."""
        if self.is_local:
            os.rename(self.url, target.url)
        elif target.exists():
            raise FileExistsError(target.url)
        else:  # the files listed, then copied path by path: fsspec's mv would glob a name
            root = self.fs_path.rstrip("/")
            sources = sorted(self.fs.find(root))
            self.fs.copy(sources, [target.fs_path.rstrip("/") + path[len(root):] for path in sources])
            self.rmtree()

    def rmtree(self) -> None:
        if self.is_local:
            shutil.rmtree(self.url, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(_glob_escaped(self.fs_path), recursive=True)

    def unlink(self) -> None:
        """Remove a file, if it exists."""
        if self.is_local:
            Path(self.url).unlink(missing_ok=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self.fs_path)

    def copytree(self, target: "Location") -> None:
        """Copy a directory's files but the temporaries killed writes left (``.NAME.tmp-<hex>``);
        the copy is the caller's own, with the umask's permissions (a read-only source gives a
        copy that can be changed and removed)."""
        if self.is_local and target.is_local:
            shutil.copytree(self.url, target.url, copy_function=shutil.copyfile,
                            ignore=lambda _, names: [n for n in names if TEMPORARY_NAME.fullmatch(n)])
            for directory, _, _ in os.walk(target.url):  # copytree gives each directory its source's mode
                os.chmod(directory, os.stat(directory).st_mode | stat.S_IRWXU)
            return
        root = self.fs_path.rstrip("/")
        for path in self.fs.find(root):
            if not any(TEMPORARY_NAME.fullmatch(part) for part in path[len(root) + 1:].split("/")):
                (target / path[len(root) + 1:]).write_bytes(self.fs.cat_file(path))

    def read_text(self) -> str:
        if self.is_local:
            return Path(self.url).read_text()
        with self.fs.open(self.fs_path, "r") as fh:
            return fh.read()

    def read_bytes(self) -> bytes:
        if self.is_local:
            return Path(self.url).read_bytes()
        return self.fs.cat_file(self.fs_path)

    def write_bytes(self, data: bytes) -> None:
        """Write a file whole: locally through a temporary file beside it and a rename (so it
        is never seen half written); on fsspec filesystems by a single put of the object."""
        if not self.is_local:
            self.fs.pipe_file(self.fs_path, data)
            return
        Path(self.url).parent.mkdir(parents=True, exist_ok=True)
        with replacing(self.url, "wb") as fh:  # with the umask's permissions, as any file of the user's
            fh.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())


def write_json(path, document: dict) -> None:
    """Write JSON whole (locally: to a temporary file beside ``path``, renamed into place)."""
    Location.of(path).write_text(json.dumps(document, indent=2) + "\n")


# -- directories written whole ------------------------------------------------------------------
BESIDE_DIGITS = 12  # the hex digits that end a name beside(): recovery knows our leftovers by them


def beside(target, kind: str = "tmp") -> Location:
    """A new name ``NAME.<kind>-<12 hex digits>`` beside ``target`` (in the same directory, so
    a rename moves it into place): "tmp" for a staged directory, "old" for one set aside,
    "ingest" for a sample's staged counts."""
    target = Location.of(target)
    return target.parent / f"{target.name}.{kind}-{uuid.uuid4().hex[:BESIDE_DIGITS]}"


@contextlib.contextmanager
def replacing_dir(target, replace: bool = False, staged=None):
    """A directory written whole: yields a new staging directory beside ``target`` (``staged``,
    default :func:`beside` ``target``), put in place by :func:`put_in_place` when the block
    ends without an exception. When the block raises, only the staging directory is removed."""
    target = Location.of(target)
    staged = beside(target) if staged is None else Location.of(staged)
    staged.mkdir()
    try:
        yield staged
        put_in_place(staged, target, replace)
    finally:
        staged.rmtree()  # gone already when it was put in place


def put_in_place(staged, target, replace: bool = False, aside=None, remove_aside=None) -> None:
    """Rename the complete directory ``staged`` to ``target``, flushed to disk first when local.
    An existing ``target`` is set aside (``NAME.old-*``) and removed afterwards when ``replace``
    says it may be replaced (it is put back if the rename fails); otherwise the rename fails on
    it, unless it is an empty local directory; ``aside`` names the set-aside (default
    :func:`beside` ``target``, "old"). A symbolic link at ``target`` is replaced, not
    followed: pass the real path to replace what a link points to. Removal is recursive and
    never follows symbolic links, unless ``remove_aside(aside)`` removes the set-aside
    (a caller that deletes only what it wrote)."""
    staged, target = Location.of(staged), Location.of(target)
    if staged.is_local:
        sync_tree(staged.url)
    if replace and target.exists():
        aside = beside(target, "old") if aside is None else Location.of(aside)
        target.rename(aside)
        try:
            staged.rename(target)
        except BaseException:
            aside.rename(target)
            raise
        (remove_aside or Location.rmtree)(aside)
    else:
        staged.rename(target)
    if target.is_local:
        sync_directory(target.parent.url)


FAULT_ENV = "STREAMBHMM_FAULT"
_faults_passed: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A named point of a writing command where tests and scripts/fault_campaign.py stop or
    kill the process, deterministically: ``STREAMBHMM_FAULT=NAME[@N]:kill`` (or ``:stop``,
    ``:term``) sends the process SIGKILL (SIGSTOP, SIGTERM) the N-th time (default: the first)
    it passes NAME."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    where, _, action = spec.partition(":")
    point, _, nth = where.partition("@")
    if point != name:
        return
    _faults_passed[name] = _faults_passed.get(name, 0) + 1
    if _faults_passed[name] == int(nth or 1):
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "term": signal.SIGTERM}[action])
