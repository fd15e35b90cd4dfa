"""The counts store under faults, with real processes and real filesystems: a writer killed at
each point of a commit (the first one included), disks that fill while staging and around the
commit point, read-only media, a store on another filesystem or mount, a store reached through
two spellings of its path.

Kills and stops are deterministic: STREAMBHMM_FAULT makes the process SIGKILL or SIGSTOP
itself at a named point (storage.fault_point). Full disks, read-only mounts and mount points
are real: a user and mount namespace (``unshare``) holds a small tmpfs or a read-only bind
mount that only the commands run in it see."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from streambhmm.io.ingest import ingest
from streambhmm.io.storage import FAULT_ENV
from streambhmm.io.store import COMMIT, SampleWriter, consolidate, open_store
from streambhmm.testing import load_counts

from ..app.test_cli import run
from .test_store import HEADER, by_sample, column_files, write_sample

pytestmark = pytest.mark.slow  # faults injected into subprocesses and filesystems

CHUNK = "100"


def streambhmm(*args, fault=None, prefix=(), wait=True):
    """A streambhmm command in a process of its own (finished, or started when not ``wait``),
    with an optional fault; ``prefix``: the command that runs it (nsenter, setpriv)."""
    env = dict(os.environ, **({FAULT_ENV: fault} if fault else {}))
    argv = [*prefix, sys.executable, "-m", "streambhmm", *map(str, args)]
    if wait:
        return subprocess.run(argv, capture_output=True, text=True, env=env)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def ingest_args(data, sample, store):
    return ("ingest", data, "--sample", sample, "--store", store, "--chunk-size", CHUNK, "-q")


def wait_stopped(proc):
    """Until ``proc`` stops itself at its fault point."""
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"the process ended (status {status}) before its fault point"


def finish(proc):
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def refused(result, *phrases):
    """A one-line message (no traceback), exit code 1, saying each of ``phrases``."""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(p in result.stderr for p in phrases), result.stderr


def leftovers(store: Path) -> list[Path]:
    return sorted(store.parent.glob(f"{store.name}.*"))


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    root = tmp_path_factory.mktemp("samples")
    return [write_sample(root / f"s{i}.tsv", seed=i) for i in range(2)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, samples):
    """By sample: the store of sample A, and of samples A and B, each ingested undisturbed."""
    root = tmp_path_factory.mktemp("reference")
    ingest([samples[0]], "A", root / "a.zarr", chunk_size=int(CHUNK))
    ab = root / "ab.zarr"
    for data, name in zip(samples, "AB"):
        ingest([data], name, ab, chunk_size=int(CHUNK))
    return {"A": by_sample(root / "a.zarr"), "AB": by_sample(ab)}


# -- kills ----------------------------------------------------------------------------------
@pytest.mark.parametrize("point", ["commit", "root", "moved@4", "chromosome@2", "visible"])
def test_a_first_commit_killed_anywhere_is_completed_by_the_next_command(tmp_path, samples, reference, point):
    store = tmp_path / "s.zarr"
    r = streambhmm(*ingest_args(samples[0], "A", store), fault=f"{point}:kill")
    assert r.returncode == -signal.SIGKILL, r.stderr
    if (store / "zarr.json").exists():  # an outside reader (no lock) sees no sample, or all of it
        assert open_store(store).samples == [] or by_sample(store) == reference["A"]
    r = streambhmm("info", store)
    assert r.returncode == 0 and "sample A:" in r.stdout, r.stderr
    assert by_sample(store) == reference["A"] and leftovers(store) == []


@pytest.mark.parametrize("point", ["commit", "moved@4", "visible"])
def test_a_commit_stopped_past_its_commit_point_completes(tmp_path, samples, reference, point):
    # the audit: SIGTERM past the commit point exited 143 ("Aborted!") with the sample stored
    store = tmp_path / "s.zarr"
    r = streambhmm(*ingest_args(samples[0], "A", store), fault=f"{point}:term")
    assert r.returncode == 0, r.stderr
    assert by_sample(store) == reference["A"] and leftovers(store) == []


@pytest.mark.parametrize("point", ["moved@5", "visible"])
def test_a_later_commit_killed_half_way_is_completed_by_the_next_reader(tmp_path, samples, reference, point):
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))
    kept = column_files(store, 0)
    r = streambhmm(*ingest_args(samples[1], "B", store), fault=f"{point}:kill")
    assert r.returncode == -signal.SIGKILL, r.stderr
    staging = [p for p in leftovers(store) if ".ingest-" in p.name]
    assert len(staging) == 1 and (staging[0] / COMMIT).exists()
    assert column_files(store, 0) == kept
    if point != "visible":
        assert open_store(store).samples == ["A"]  # past the commit point, not yet visible
    load_counts(open_store(store), ["A"])  # sample A reads whole meanwhile (its checksums hold)
    r = streambhmm("info", store)
    assert r.returncode == 0 and "sample B:" in r.stdout, r.stderr
    assert by_sample(store) == reference["AB"] and leftovers(store) == []


# -- positions ------------------------------------------------------------------------------
def test_a_position_beyond_any_chromosome_is_refused_naming_file_and_line(tmp_path):
    data = tmp_path / "far.tsv"
    data.write_text(HEADER + "chr1\t100\t+\t1\t2\nchr1\t900000000000\t+\t1\t1\n")
    r = run("ingest", data, "--sample", "A", "--store", tmp_path / "s.zarr")
    assert r.exit_code == 1 and f"{data}:3: position 900000000000 too large" in r.output, r.output
    assert leftovers(tmp_path / "s.zarr") == [] and not (tmp_path / "s.zarr").exists()
    with SampleWriter(tmp_path / "w.zarr", 100, 1000) as writer:  # any writer: before any allocation
        with pytest.raises(ValueError, match="position 900,000,000,000 is beyond"):
            writer.add("chr1", np.array([9_000_000_000]), np.array([1]), np.array([1]))


def test_a_write_that_lands_while_the_staging_is_removed_is_removed_too(tmp_path, monkeypatch):
    """A stop that interrupts a chunk's write does not cancel it: zarr's I/O thread can still
    create files in the staging directory while close() removes it (1 of 45 stopped ingests
    left it). The removal is tried again while the directory comes back."""
    from streambhmm.io.storage import Location

    writer = SampleWriter(tmp_path / "s.zarr", 100, 1000)
    writer.add("chr1", np.array([3]), np.array([1]), np.array([2]))
    real_rmtree, removals = Location.rmtree, []

    def rmtree_then_a_late_write(location):
        real_rmtree(location)
        removals.append(location.url)
        if len(removals) == 1:  # the write the stop did not cancel lands after the first removal
            Path(location.url, "chr1", "c", "0").mkdir(parents=True)

    monkeypatch.setattr(Location, "rmtree", rmtree_then_a_late_write)
    writer.close()
    assert len(removals) == 2 and not Path(removals[0]).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_stop_during_a_scratch_stores_commit_is_not_held_off(tmp_path, monkeypatch):
    """A commit holds Ctrl-C off and delivers it once the sample is in place; pmd's summed
    store is scratch, removed whatever happens, and its commit (seconds on an assembly of
    hundreds of contigs) lets the stop through at once."""
    import streambhmm.io.store.writer as writer_module

    real, completed = writer_module.complete_commit, []

    def stopped_meanwhile(*args):
        signal.raise_signal(signal.SIGINT)
        real(*args)
        completed.append(True)

    monkeypatch.setattr(writer_module, "complete_commit", stopped_meanwhile)
    for scratch in (False, True):
        completed.clear()
        with pytest.raises(KeyboardInterrupt), SampleWriter(tmp_path / f"{scratch}.zarr", 100, 1000) as writer:
            writer.add("chr1", np.array([3]), np.array([1]), np.array([2]))
            writer.commit("A", {}, scratch=scratch)
        assert completed == ([] if scratch else [True])


# -- a replaced sample ------------------------------------------------------------------------
def test_a_replaced_sample_keeps_no_chunk_of_its_old_counts(tmp_path):
    """A new sample's chunk whose methylated counts are all zero has no methylated file:
    the old one must go."""
    store = tmp_path / "s.zarr"
    rows = [f"chr1\t{p}\t+\t{m}\t4\n" for p, m in ((150, 3), (250, 2), (1_550, 1))]
    (tmp_path / "old.tsv").write_text(HEADER + "".join(rows))
    (tmp_path / "new.tsv").write_text(HEADER + "".join(r.replace("\t+\t3\t", "\t+\t0\t").replace("\t+\t2\t", "\t+\t0\t")
                                                       for r in rows))
    ingest([tmp_path / "old.tsv"], "A", store, chunk_size=10)
    ingest([tmp_path / "new.tsv"], "A", store)
    meth, cov, _ = load_counts(open_store(store))  # checks every chunk against its checksum
    assert meth[:, 0].tolist() == [0, 0, 1] and cov[:, 0].tolist() == [4, 4, 4]


# -- what a commit touches ----------------------------------------------------------------------
def snapshot(store: Path, chromosomes) -> dict:
    """Every file of those chromosomes: its inode and modification time."""
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for c in chromosomes for p in (store / c).rglob("*")
            if p.is_file()}


def test_a_commit_touches_only_what_its_sample_holds(tmp_path):
    store = tmp_path / "s.zarr"
    contigs = [f"ctg{i}" for i in range(40)]
    (tmp_path / "many.tsv").write_text(HEADER + "".join(
        f"{c}\t{p}\t+\t1\t3\n" for c in contigs for p in (10, 700, 2_900)))  # chunks 0 and 2 of 10 bins
    (tmp_path / "one.tsv").write_text(HEADER + "ctg7\t120\t+\t1\t2\n")
    ingest([tmp_path / "many.tsv"], "A", store, chunk_size=10)
    others = [c for c in contigs if c != "ctg7"]
    before = snapshot(store, others)
    ingest([tmp_path / "one.tsv"], "B", store)  # a new sample: the others get its column's metadata
    changed = {str(p.relative_to(store / p.relative_to(store).parts[0])) for p, v in snapshot(store, others).items()
               if before.get(p) != v}
    assert changed == {"methylated/zarr.json", "coverage/zarr.json", "index/summary/zarr.json", "sample/zarr.json",
                       "sample/c/0"}
    ingest([tmp_path / "many.tsv"], "B", store)  # B replaced by counts everywhere...
    before = snapshot(store, others)
    ingest([tmp_path / "one.tsv"], "B", store)  # ...and back: B's chunks elsewhere go, nothing else changes
    after = snapshot(store, others)
    assert {p: v for p, v in after.items() if before[p] != v} == {}
    removed = {str(p.relative_to(store / p.relative_to(store).parts[0])) for p in set(before) - set(after)}
    assert removed == {f"{array}/c/{i}/1" for array in ("methylated", "coverage") for i in (0, 2)} | \
        {"index/summary/c/0/1/0"}
    # the consolidated metadata, kept up to date commit by commit, is what zarr would write
    kept = json.loads((store / "zarr.json").read_text())["consolidated_metadata"]
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    consolidate(copy)
    assert json.loads((copy / "zarr.json").read_text())["consolidated_metadata"] == kept
    view = open_store(store).overview()
    assert view.chromosomes["ctg7"][1].tolist() == [3, 1] and view.chromosomes["ctg8"][1].tolist() == [3, 0]


# -- filesystems of the test's own: a full disk, a read-only mount, a mount point -----------------
class Namespace:
    """A user and mount namespace (``unshare``), held open by a process that waits on its
    stdin: what is mounted in it only the commands run in it (``prefix``) see; the test
    reaches its files from outside through /proc/PID/root."""

    def __init__(self):
        try:
            self.holder = subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                                            "echo ready && exec cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, text=True)
        except FileNotFoundError:
            pytest.skip("no unshare command")
        if self.holder.stdout.readline().strip() != "ready":
            pytest.skip("user namespaces are not available")
        self.prefix = ("nsenter", "-t", str(self.holder.pid), "-U", "-m", "--preserve-credentials", "--")

    def run(self, *argv):
        subprocess.run([*self.prefix, *map(str, argv)], check=True)

    def outside(self, path: Path) -> Path:
        return Path(f"/proc/{self.holder.pid}/root{path}")

    def mount_tmpfs(self, path: Path, size: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)

    def fill(self, directory: Path, leave: int = 0) -> Path:
        """Fill the (small) filesystem of ``directory`` until at most ``leave`` bytes are free."""
        where = self.outside(directory)
        fs = os.statvfs(where)
        assert fs.f_blocks * fs.f_frsize <= 64 << 20, "not the test's small tmpfs"
        fill = where / "fill"
        fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while (free := os.statvfs(where).f_bavail * fs.f_frsize) > leave:
                try:
                    os.write(fd, b"\0" * min(free - leave, 1 << 16))
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
        finally:
            os.close(fd)
        return fill

    def close(self) -> None:
        self.holder.stdin.close()
        self.holder.wait()
        self.holder.stdout.close()


@pytest.fixture
def namespace():
    ns = Namespace()
    yield ns
    ns.close()


def test_a_full_disk_while_staging_is_a_message_and_changes_nothing(tmp_path, namespace, samples):
    disk = tmp_path / "disk"
    namespace.mount_tmpfs(disk, "4m")
    store = disk / "s.zarr"
    r = streambhmm(*ingest_args(samples[0], "A", store), prefix=namespace.prefix)
    assert r.returncode == 0, r.stderr
    kept = {p: p.read_bytes() for p in namespace.outside(store).rglob("*") if p.is_file()}
    big = write_sample(tmp_path / "big.tsv", seed=9, chroms=[f"chr{i}" for i in range(1, 23)], n_rows=8_000)
    r = streambhmm(*ingest_args(big, "B", store), prefix=namespace.prefix)
    refused(r, "cannot stage counts for", "no space left on device", "the store is unchanged")
    assert {p: p.read_bytes() for p in namespace.outside(store).rglob("*") if p.is_file()} == kept
    assert leftovers(namespace.outside(store)) == []  # the staging directory is gone, its space free again


def test_a_commit_the_disk_has_no_room_for_is_refused_before_its_commit_point(tmp_path, namespace, samples):
    disk = tmp_path / "disk"
    namespace.mount_tmpfs(disk, "8m")
    store = disk / "s.zarr"
    assert streambhmm(*ingest_args(samples[0], "A", store), prefix=namespace.prefix).returncode == 0
    kept = {p: p.read_bytes() for p in namespace.outside(store).rglob("*") if p.is_file()}
    proc = streambhmm(*ingest_args(samples[1], "B", store), fault="staged:stop", prefix=namespace.prefix, wait=False)
    wait_stopped(proc)  # staged, about to commit
    namespace.fill(disk, leave=50_000)
    refused(finish(proc), "not enough free space to commit sample B", "the store is unchanged")
    assert {p: p.read_bytes() for p in namespace.outside(store).rglob("*") if p.is_file()} == kept
    assert leftovers(namespace.outside(store)) == []


def test_a_full_disk_after_the_commit_point_keeps_the_commit_for_the_next_command(tmp_path, namespace, samples,
                                                                                  reference):
    disk = tmp_path / "disk"
    namespace.mount_tmpfs(disk, "8m")
    store = disk / "s.zarr"
    assert streambhmm(*ingest_args(samples[0], "A", store), prefix=namespace.prefix).returncode == 0
    proc = streambhmm(*ingest_args(samples[1], "B", store), fault="commit:stop", prefix=namespace.prefix, wait=False)
    wait_stopped(proc)  # COMMIT.json written
    fill = namespace.fill(disk)
    refused(finish(proc), "sample B was committed into", "but is not yet in place: no space left on device",
            "any command on the store completes the commit")
    staging = [p for p in leftovers(namespace.outside(store)) if ".ingest-" in p.name]
    assert len(staging) == 1 and (staging[0] / COMMIT).exists()
    r = streambhmm("info", store, prefix=namespace.prefix)  # still full: it says so
    refused(r, "could not be completed: no space left on device")
    fill.unlink()
    r = streambhmm("info", store, prefix=namespace.prefix)
    assert r.returncode == 0 and "sample B:" in r.stdout, r.stderr
    assert by_sample(namespace.outside(store)) == reference["AB"] and leftovers(namespace.outside(store)) == []


def test_a_store_linked_onto_another_filesystem_takes_commits(tmp_path, namespace, samples, reference):
    disk = tmp_path / "disk"
    namespace.mount_tmpfs(disk, "8m")
    link = tmp_path / "s.zarr"
    link.symlink_to(disk / "s.zarr")  # staged beside the store itself, on the tmpfs
    for data, name in zip(samples, "AB"):
        r = streambhmm(*ingest_args(data, name, link), prefix=namespace.prefix)
        assert r.returncode == 0, r.stderr
    assert by_sample(namespace.outside(disk / "s.zarr")) == reference["AB"]
    assert leftovers(link) == [] and leftovers(namespace.outside(disk / "s.zarr")) == []


def test_a_store_that_is_a_mount_point_is_refused_before_staging(tmp_path, namespace, samples):
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))
    kept = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    namespace.run("mount", "--bind", store, store)  # a volume mounted at the store: renames into it fail
    r = streambhmm(*ingest_args(samples[1], "B", store), prefix=namespace.prefix)
    refused(r, f"{store} is on another filesystem or mount", "the store is unchanged")
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == kept and leftovers(store) == []


# -- read-only media ------------------------------------------------------------------------------
@pytest.mark.parametrize("lock_file", [True, False])
def test_a_store_on_a_read_only_filesystem_is_read(tmp_path, namespace, samples, lock_file):
    source, media = tmp_path / "source", tmp_path / "media"
    ingest([samples[0]], "A", source / "s.zarr", chunk_size=int(CHUNK))
    if not lock_file:  # copied without it
        (source / ".s.zarr.lock").unlink()
    media.mkdir()
    namespace.run("mount", "--bind", source, media)
    namespace.run("mount", "-o", "remount,bind,ro", media)
    r = streambhmm("info", media / "s.zarr", prefix=namespace.prefix)
    assert r.returncode == 0 and "sample A:" in r.stdout, r.stderr
    if lock_file:  # decoding (without posteriors) reads the store: the same segments as from writable media
        fit = streambhmm("fit", source / "s.zarr", "--states", "2", "--output", tmp_path / "m.json", "-q")
        assert fit.returncode == 0, fit.stderr
        for where, bed in ((source, "writable.bed"), (media, "read-only.bed")):
            r = streambhmm("decode", where / "s.zarr", "--model", tmp_path / "m.json", "--output", tmp_path / bed,
                           "-q", prefix=namespace.prefix)
            assert r.returncode == 0, r.stderr
        assert (tmp_path / "read-only.bed").read_text() == (tmp_path / "writable.bed").read_text()
    r = streambhmm(*ingest_args(samples[1], "B", media / "s.zarr"), prefix=namespace.prefix)
    refused(r, f"cannot stage counts for {media / 's.zarr'} in {media}: read-only file system; the store is "
               f"unchanged")


# -- one store, one lock ----------------------------------------------------------------------------
READER = ("import sys; from streambhmm.io.store import locked, open_store\n"
          "with locked(sys.argv[1], shared=True): print(*open_store(sys.argv[1]).samples)")


def waits_for_a_lock(proc) -> bool:
    """Whether ``proc`` comes to wait for a lock (a request marked '->' in Linux's
    /proc/locks) rather than end."""
    while proc.poll() is None:
        with open("/proc/locks") as fh:
            if any(f[1] == "->" and f[5] == str(proc.pid) for f in (line.split() for line in fh) if len(f) > 5):
                return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("spelling", ["a link to its directory", "a link to the store"])
def test_a_store_reached_through_a_link_is_locked_as_one(tmp_path, samples, spelling):
    real = tmp_path / "real"
    store = real / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))
    if spelling == "a link to its directory":
        (tmp_path / "link").symlink_to(real)
        other = tmp_path / "link" / "s.zarr"
    else:
        other = tmp_path / "other.zarr"
        other.symlink_to(store)
    writer = streambhmm(*ingest_args(samples[1], "B", store), fault="commit:stop", wait=False)
    wait_stopped(writer)  # holding the store's exclusive lock, past its commit point
    reader = subprocess.Popen([sys.executable, "-c", READER, str(other)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert waits_for_a_lock(reader), reader.communicate()
    r = finish(writer)
    assert r.returncode == 0, r.stderr
    out, err = reader.communicate()
    assert reader.returncode == 0 and out.split() == ["A", "B"], err
    assert f"waiting for the lock of {store.resolve()}: another streambhmm command is writing it" in err


def test_a_lock_another_program_holds_is_waited_for_within_the_time_limit_and_named(tmp_path, samples):
    """A helper's audit: a store's lock held by `flock` (not a streambhmm command) was waited
    for without end, the message saying that another streambhmm command held it."""
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))
    if shutil.which("flock") is None:
        pytest.skip("util-linux's flock is not installed")
    lock = tmp_path / ".s.zarr.lock"
    with subprocess.Popen(["flock", "--close", lock, "sh", "-c", "echo held; sleep 60"], stdout=subprocess.PIPE,
                          text=True, start_new_session=True) as holder:
        try:
            assert holder.stdout.readline() == "held\n"
            r = run("hmr", store, "-o", tmp_path / "h.bed", "-q", env={"STREAMBHMM_WAIT_TIMEOUT": "1"})
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
    assert r.exit_code == 1 and f"waiting for the lock of {store}: process {holder.pid} (flock --close {lock} sh -c " \
        in r.output and "holds it, not a streambhmm command" in r.output, r.output
    assert f"its lock ({tmp_path / '.s.zarr.lock'}) has been held for 1 s by process {holder.pid}" in r.output \
        and "which is not a streambhmm command; end it, or wait longer with $STREAMBHMM_WAIT_TIMEOUT" in r.output
    assert not (tmp_path / "h.bed").exists()


@pytest.mark.parametrize("quiet", [False, True])
def test_a_batch_ingest_waiting_for_its_groups_store_says_who_it_may_wait_for(tmp_path, capsys, monkeypatch, quiet):
    """batch ingests a group's samples side by side into one store, so they wait for each
    other's commits: the message said "another streambhmm command", when none ran, named no
    sample, and was said with batch -q too."""
    import fcntl
    import threading

    from streambhmm.distributed import batch
    from streambhmm.io.storage import Location
    from streambhmm.io.store.locking import LOCK_WAIT, _take_lock

    path = tmp_path / ".s.zarr.lock"
    path.touch()
    holder = os.open(path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    waiting = threading.Event()

    def ingest(*args, **kwargs):  # the sample's ingest, as batch runs it: its store's lock taken
        fd = os.open(path, os.O_RDONLY)
        waiting.set()
        _take_lock(fd, fcntl.LOCK_SH, Location.of(tmp_path / "s.zarr"))
        os.close(fd)
        raise RuntimeError("stored nothing")

    monkeypatch.setattr(batch, "ingest", ingest)
    row = batch.ManifestRow("A", "g", "auto", ("a.cov",), 2)
    thread = threading.Thread(target=batch.ingest_sample, args=(row, "s.zarr", 100, "CG", None),
                              kwargs={"quiet": quiet})
    thread.start()
    waiting.wait()
    err = ""
    for _ in range(50):  # the lock is released once the waiter has said so (or, quiet, a while after)
        time.sleep(0.01)
        err += capsys.readouterr().err
        if "waiting" in err:
            break
    os.close(holder)
    thread.join()
    err += capsys.readouterr().err
    if quiet:
        assert "waiting" not in err, err
    else:
        assert (f"batch: sample A: waiting for the lock of {Location.of(tmp_path / 's.zarr')}: another sample of "
                f"this batch's group g (or another streambhmm command) is writing it") in err, err

    def says(*args, **kwargs):
        raise RuntimeError(LOCK_WAIT.get().waiter)

    monkeypatch.setattr(batch, "ingest", says)
    result = batch.ingest_sample(row, "s.zarr", 100, "CG", None)
    assert "batch: sample A" in result.error and result.status == "failed"
    assert LOCK_WAIT.get() == batch.LockWait()  # set for the ingest only


# -- a store others may not write ------------------------------------------------------------------
@pytest.fixture
def shared_directory():
    """A directory every user may enter, and the command prefix that runs as nobody."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a command as another user")
    root = Path(tempfile.mkdtemp(prefix="streambhmm-shared-"))
    root.chmod(0o755)
    yield root, ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--")
    root.chmod(0o755)
    shutil.rmtree(root)


def test_a_store_the_reader_may_not_write_is_read(shared_directory, samples):
    root, as_nobody = shared_directory
    store = root / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))  # its lock file: root's, others may read it
    r = streambhmm("info", store, prefix=as_nobody)
    assert r.returncode == 0 and "sample A:" in r.stdout, r.stderr
    data = Path(shutil.copy(samples[1], root))  # one nobody may read
    r = streambhmm(*ingest_args(data, "B", store), prefix=as_nobody)
    refused(r, f"cannot stage counts for {store} in {root}: permission denied; the store is unchanged")
    (root / ".s.zarr.lock").unlink()  # copied without its lock file, where others may write
    r = streambhmm("info", store, prefix=as_nobody)
    refused(r, f"cannot create the lock file {root / '.s.zarr.lock'} (permission denied)",
            "or make the directory read-only")
    root.chmod(0o555)  # nobody may write: nothing to lock against
    r = streambhmm("info", store, prefix=as_nobody)
    assert r.returncode == 0 and "sample A:" in r.stdout, r.stderr


def test_a_committed_staging_of_another_user_is_left_to_them(tmp_path, samples, reference):
    """A shared directory: another user's staging past its commit point (or one planted
    there) is not completed into this user's store, nor removed; its owner's next command
    completes it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the staging to another user")
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=int(CHUNK))
    r = streambhmm(*ingest_args(samples[1], "B", store), fault="moved@5:kill")
    assert r.returncode == -signal.SIGKILL, r.stderr
    (staging,) = [p for p in leftovers(store) if ".ingest-" in p.name]
    for path in [staging, *staging.rglob("*")]:
        os.lchown(path, 65534, 65534)
    r = streambhmm("info", store)
    assert r.returncode == 0 and "sample B:" not in r.stdout, r.stdout + r.stderr
    assert open_store(store).samples == ["A"] and staging.exists()
    for path in [staging, *staging.rglob("*")]:  # its owner's again: the next command completes it
        os.lchown(path, 0, 0)
    r = streambhmm("info", store)
    assert r.returncode == 0 and "sample B:" in r.stdout, r.stderr
    assert by_sample(store) == reference["AB"] and leftovers(store) == []


@pytest.mark.parametrize("linked, sample", [("chr2/sample/c/0", "B"), ("chr1/coverage/c", "B"),
                                            ("chr2/coverage/c", "A")])
def test_a_link_inside_the_store_is_refused_before_the_commit_point(tmp_path, linked, sample):
    """A commit writes, renames and removes files in the store: a link inside it (a store copied
    from elsewhere) is refused before the commit point, the store unchanged, and nothing is
    written or removed where it points: a file (a sample's names, written in place) or a
    directory (chunks renamed into it, or removed from it when a sample is replaced)."""
    store = tmp_path / "s.zarr"
    (tmp_path / "two.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\nchr2\t10\t+\t1\t3\n")
    (tmp_path / "one.tsv").write_text(HEADER + "chr1\t20\t+\t1\t2\n")
    ingest([tmp_path / "two.tsv"], "A", store)
    link = store / linked
    precious = tmp_path / "precious"
    link.rename(precious)
    link.symlink_to(precious)
    kept = {p: p.read_bytes() for p in [*store.rglob("*"), *precious.rglob("*"), precious] if p.is_file()}
    r = streambhmm("ingest", tmp_path / "one.tsv", "--sample", sample, "--store", store, "-q")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{link} is a symbolic link inside the store" in r.stderr and "the store is unchanged" in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in [*store.rglob("*"), *precious.rglob("*"), precious] if p.is_file()} == kept
    assert leftovers(store) == []


DAMAGES = {"garbage": lambda f: f.write_text("garb"), "empty": lambda f: f.write_text(""),
           "missing": lambda f: f.unlink()}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("node", ["", "methylated", "coverage", "position", "sample", "index/summary"])
def test_a_damaged_chromosome_document_is_mended_by_the_next_commit(tmp_path, node, damage):
    """A chromosome's zarr.json garbled, emptied or removed (readers go by the root's
    consolidated metadata, so they never see it): the next commit builds on the consolidated
    metadata, not on the file, so it neither stops half way with a JSON error nor shrinks the
    chromosome to a shorter sample's extent (hiding the other samples' bins past it), and it
    writes the file again."""
    store = tmp_path / "s.zarr"
    (tmp_path / "long.tsv").write_text(HEADER + "".join(f"chr1\t{p}\t+\t1\t3\n" for p in range(10, 5000, 90)))
    (tmp_path / "short.tsv").write_text(HEADER + "chr1\t20\t+\t1\t2\n")
    ingest([tmp_path / "long.tsv"], "A", store, chunk_size=7)
    before = by_sample(store)
    DAMAGES[damage](store / "chr1" / node / "zarr.json")
    r = streambhmm("ingest", tmp_path / "short.tsv", "--sample", "B", "--store", store, "-q")
    assert r.returncode == 0, r.stderr
    after = by_sample(store)
    assert {key: value for key, value in after.items() if key[0] == "A"} == before
    assert after["B", "chr1"][:3] == ([0], [1], [2])
    listed = json.loads((store / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    on_disk = json.loads((store / "chr1" / node / "zarr.json").read_text())
    assert on_disk == {k: v for k, v in listed["chr1/" + node if node else "chr1"].items()
                       if k != "consolidated_metadata"}
    assert leftovers(store) == []


@pytest.mark.parametrize("removed", ["chr2", "chr2/index"])
def test_a_chromosome_directory_removed_by_hand_is_refused_not_read_as_empty(tmp_path, removed):
    """A helper's audit: with chr2's directory gone, zarr read it through the root's metadata
    as a chromosome without reads, and `hmr` called half the HMRs with exit 0."""
    store = tmp_path / "s.zarr"
    (tmp_path / "two.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\nchr2\t10\t+\t1\t3\n")
    ingest([tmp_path / "two.tsv"], "A", store)
    shutil.rmtree(store / removed)
    with pytest.raises(ValueError, match=f"chromosome chr2 is listed in the store's metadata, but the directory "
                                         f"{store / removed}.* is missing: the store is damaged"):
        open_store(store)
    r = run("hmr", store, "-o", tmp_path / "h.bed", "-q")
    assert r.exit_code == 1 and "the store is damaged" in r.output and not (tmp_path / "h.bed").exists(), r.output


def test_a_chromosomes_chunk_files_removed_by_hand_are_refused_not_read_as_empty(tmp_path):
    """Two audits: with chr2's chunk directories (coverage/c, methylated/c, index/summary/c)
    removed, chr2 read as one without reads, exit 0. Each sample's ingest now records its
    bins with reads per chromosome, which its index must hold."""
    store = tmp_path / "s.zarr"
    (tmp_path / "two.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\nchr2\t10\t+\t1\t3\nchr2\t990\t+\t0\t2\n")
    (tmp_path / "one.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\n")
    ingest([tmp_path / "two.tsv"], "A", store)
    ingest([tmp_path / "one.tsv"], "B", store)  # none on chr2: recorded as none
    assert open_store(store).meta.samples["A"]["covered_bins"] == {"chr1": 1, "chr2": 2}
    assert open_store(store).meta.samples["B"]["covered_bins"] == {"chr1": 1}
    assert open_store(store).totals(["A", "B"])["chr2"] == [[1, 5], [0, 0]]
    for node in ("coverage/c", "methylated/c", "index/summary/c"):
        shutil.rmtree(store / "chr2" / node)
    with pytest.raises(ValueError, match="the index of sample A on chr2 counts 0 bins with reads, where it was "
                                         "stored with 2: the store is damaged"):
        open_store(store).totals(["A"])
    r = run("hmr", store, "-o", tmp_path / "h.bed", "-q")
    assert r.exit_code == 1 and "the store is damaged" in r.output and not (tmp_path / "h.bed").exists(), r.output


@pytest.mark.parametrize("change, told", [({"compressors": "zstd"}, "codecs"), ({"chunks": (1_000_000, 2)}, "chunks"),
                                          ({"dtype": "int64"}, "data_type")])
def test_counts_another_tool_rewrote_are_refused_before_the_commit_point(tmp_path, change, told):
    """Counts arrays rewritten with other codecs, chunks or data type (a store changed with
    another tool) cannot take the staged chunk files, which are renamed into them: refused,
    the array and what differs named, the store unchanged."""
    import zarr

    store = tmp_path / "s.zarr"
    (tmp_path / "one.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\n")
    ingest([tmp_path / "one.tsv"], "A", store)
    group = zarr.open_group(store / "chr1", mode="r+")
    values = group["methylated"][:]
    del group["methylated"]
    settings = {"chunks": (1_000_000, 1), "dtype": values.dtype, "compressors": "blosc", **change}
    settings["compressors"] = zarr.codecs.ZstdCodec() if settings["compressors"] == "zstd" else \
        zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")
    group.create_array("methylated", shape=values.shape, fill_value=0, dimension_names=("position", "sample"),
                       **settings)[:] = values
    consolidate(store)
    kept = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    r = streambhmm("ingest", tmp_path / "one.tsv", "--sample", "B", "--store", store, "-q")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{store / 'chr1' / 'methylated'} was changed by another tool: {told}" in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == kept
    assert leftovers(store) == []


def test_a_commit_is_completed_in_its_own_store_whatever_the_names(tmp_path):
    """A store's staging directories are found by its name taken literally: x[1].zarr, as a
    pattern, matches x1.zarr, whose commit stopped past its commit point was completed into
    x[1].zarr (and x[1].zarr's own never was)."""
    (tmp_path / "a.tsv").write_text(HEADER + "chr1\t10\t+\t1\t3\n")
    (tmp_path / "b.tsv").write_text(HEADER + "chr1\t20\t+\t2\t3\n")
    pattern, literal = tmp_path / "x[1].zarr", tmp_path / "x1.zarr"
    for store in (pattern, literal):
        ingest([tmp_path / "a.tsv"], "A", store)
    r = streambhmm("ingest", tmp_path / "b.tsv", "--sample", "B", "--store", literal, "-q", fault="commit:kill")
    assert r.returncode != 0
    for store in (pattern, literal):  # a command on each store completes that store's pending commits
        assert streambhmm("info", store).returncode == 0
    assert open_store(pattern).samples == ["A"] and leftovers(pattern) == []
    assert open_store(literal).samples == ["A", "B"] and leftovers(literal) == []


def test_a_node_missing_from_file_and_metadata_is_made_again(tmp_path):
    """A node's file removed, then the metadata consolidated from the files (decode
    --posteriors does): the node is missing from both, and the next commit makes it again
    (not a KeyError past its commit point), every sample's counts as they were."""
    store = tmp_path / "s.zarr"
    (tmp_path / "long.tsv").write_text(HEADER + "".join(f"chr1\t{p}\t+\t1\t3\n" for p in range(10, 5000, 90)))
    (tmp_path / "short.tsv").write_text(HEADER + "chr1\t20\t+\t1\t2\n")
    ingest([tmp_path / "long.tsv"], "A", store, chunk_size=7)
    before = by_sample(store)
    for node in ("position", "sample"):
        (store / "chr1" / node / "zarr.json").unlink()
    consolidate(store)
    r = streambhmm("ingest", tmp_path / "short.tsv", "--sample", "B", "--store", store, "-q")
    assert r.returncode == 0, r.stderr
    after = by_sample(store)
    assert {key: value for key, value in after.items() if key[0] == "A"} == before
    assert after["B", "chr1"][:3] == ([0], [1], [2]) and leftovers(store) == []
