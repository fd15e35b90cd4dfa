"""io.outputs: files written through a locked temporary with the umask's permissions, and
only abandoned temporaries of the same output removed."""

import contextlib
import errno
import fcntl
import os
import signal
import time

import pytest

from streambhmm.io.outputs import (SCRATCH_MARK, check_distinct, check_output_file, check_replaceable_file,
                                   directory_lock_now, held_temporary,
                                   is_temporary_of, remove_leftovers, replacing, scratch_directory, temporary_path,
                                   written_together)
from streambhmm.io.storage import write_json


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_file_appears_whole_with_the_umasks_permissions(tmp_path, umask_022):
    target = tmp_path / "out.bed"
    with replacing(target) as fh:
        fh.write("line\n")
        assert not target.exists()  # only the temporary so far
    assert target.read_text() == "line\n" and target.stat().st_mode & 0o777 == 0o644
    write_json(tmp_path / "m.json", {"a": 1})  # model files, manifests, tables and summaries go this way
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o644
    with pytest.raises(RuntimeError):
        with replacing(target) as fh:
            fh.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "line\n" and sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "out.bed"]


@pytest.mark.parametrize("stopped", [False, True])
def test_files_written_together_appear_together_or_not_at_all(tmp_path, stopped):
    # a command's BED, table, bigWig or models: a run stopped before its end replaces none of a
    # previous run's (the audit's interrupted dmr left a new BED beside the old domains)
    paths = [tmp_path / name for name in ("r.bed", "r.tsv", "d.bed", "m.json")]
    for path in paths:
        path.write_text("old\n")
    with pytest.raises(KeyboardInterrupt) if stopped else contextlib.nullcontext():
        with written_together():
            for path in paths[:3]:
                with replacing(path) as fh:
                    fh.write("new\n")
            with written_together():  # nested: the outer block renames
                write_json(paths[3], {"new": 1})
            assert all(path.read_text() == "old\n" for path in paths)  # complete, not yet in place
            if stopped:
                raise KeyboardInterrupt
    expected = ["old\n"] * 4 if stopped else ["new\n"] * 3 + ['{\n  "new": 1\n}\n']
    assert [path.read_text() for path in paths] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(path.name for path in paths)  # no temporary


@pytest.mark.parametrize("before", [None, "our earlier output\n"])
def test_a_file_put_at_an_output_while_the_command_runs_is_kept(tmp_path, before):
    # outputs are checked before any work: a file the user put there during a long run was
    # replaced by its output, and so was one changed since the check
    paths = [tmp_path / "r.bed", tmp_path / "r.tsv"]
    for path in paths:
        if before is not None:
            path.write_text(before)
        check_replaceable_file(path, b"our ")  # as commands check theirs: what their output begins with
    paths[1].unlink(missing_ok=True)
    paths[1].write_text("the user's notes\n")
    with pytest.raises(ValueError, match="r.tsv: was (made|changed or replaced) while this command ran"):
        with written_together():
            for path in paths:
                with replacing(path) as fh:
                    fh.write("new\n")
    assert paths[1].read_text() == "the user's notes\n"
    assert paths[0].read_text() == before if before is not None else not paths[0].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.bed", "r.tsv"][before is None:]  # no temporary
    with pytest.raises(ValueError, match="was made while this command ran"):  # one file on its own too
        check_output_file(tmp_path / "alone.bed")
        (tmp_path / "alone.bed").write_text("theirs\n")
        with replacing(tmp_path / "alone.bed") as fh:
            fh.write("new\n")
    assert (tmp_path / "alone.bed").read_text() == "theirs\n"
    check_output_file(paths[1])  # a new check takes what is there now; the command's own file it may replace again
    for _ in range(2):
        with replacing(paths[1]) as fh:
            fh.write("new\n")
    assert paths[1].read_text() == "new\n"


def test_an_output_moved_touched_or_made_writable_while_the_command_runs_is_still_written(tmp_path):
    """The same file, or none, is no one else's (a helper's audit: a rerun whose old output was
    moved away, as the refusal asks, or touched, or chmod'ed, was refused and lost its work);
    and one entry spelled two ways through a linked directory is one entry."""
    for change in ("move", "touch", "chmod", "rerun"):
        path = tmp_path / f"{change}.bed"
        path.write_text("our old\n")
        check_replaceable_file(path, b"our ")
        if change == "move":
            path.rename(tmp_path / f"{change}.prev.bed")
        elif change == "rerun":  # another run of the command wrote it meanwhile
            path.unlink()
            path.write_text("our other run's\n")
        else:
            os.utime(path, (1, 1)) if change == "touch" else path.chmod(0o664)
        with replacing(path) as fh:
            fh.write("new\n")
        assert path.read_text() == "new\n"
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "dl").symlink_to(tmp_path / "a" / "b")
    check_output_file(tmp_path / "dl" / ".." / "h.bed")  # a/h.bed: the link is followed, then ..
    check_output_file(tmp_path / "h.bed")  # another entry, spelled alike but for the link
    with replacing(tmp_path / "dl" / ".." / "h.bed") as fh:
        fh.write("new\n")
    assert (tmp_path / "a" / "h.bed").read_text() == "new\n" and not (tmp_path / "h.bed").exists()


def test_a_set_whose_rename_fails_half_way_is_put_back(tmp_path, monkeypatch):
    # the review: the files renamed before a failing one stayed new, beside old ones
    paths = [tmp_path / name for name in ("a.bed", "b.bed", "c.tsv")]
    for path in paths[:2]:
        path.write_text("old\n")  # c.tsv is new
    real = os.replace

    def refuse_b(src, dst):
        if os.fspath(dst) == os.fspath(paths[1]):
            raise PermissionError(1, "Operation not permitted")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_b)
    with pytest.raises(ValueError, match=r"b.bed: cannot be replaced \(Operation not permitted\); it is left as it "
                                         r"was, as are the 2 other files of this run"):
        with written_together():
            for path in paths:
                with replacing(path) as fh:
                    fh.write("new\n")
    assert [p.read_text() for p in paths[:2]] == ["old\n", "old\n"] and not paths[2].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bed", "b.bed"]  # no temporary, nothing set aside


def test_a_failure_named_to_commit_on_puts_the_finished_files_in_place(tmp_path):
    # a sweep whose worker process is lost keeps the models finished before it, as it says
    with pytest.raises(RuntimeError):
        with written_together(commit_on=(RuntimeError,)):
            with replacing(tmp_path / "m.m2.json") as fh:
                fh.write("{}")
            raise RuntimeError("the worker of M = 3 is gone")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.m2.json"]


def test_two_outputs_at_one_path_are_refused(tmp_path):
    check_distinct([(tmp_path / "t.a_b.bw", "A"), (tmp_path / "t.c.bw", "C")])
    with pytest.raises(ValueError, match=r"t.a_b.bw: both the methylation of a'b and the methylation of a;b would be "
                                         r"written there"):
        check_distinct([(tmp_path / "t.a_b.bw", "the methylation of a'b"),
                        (tmp_path / "." / "t.a_b.bw", "the methylation of a;b")])


def test_only_abandoned_temporaries_of_the_same_output_are_removed(tmp_path):
    target = tmp_path / "out.bed"
    abandoned = temporary_path(target)
    abandoned.write_text("left by a killed run")
    other_output = temporary_path(tmp_path / "other.bed")
    other_output.write_text("another output's")
    directory = temporary_path(target)
    directory.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("not ours")
    link = temporary_path(target)
    link.symlink_to(outside)
    with held_temporary(target) as (live, fd):  # a running writer's
        assert remove_leftovers(target) == [abandoned]
        assert live.exists()
    assert not live.exists()  # its writer removes it when it does not rename it
    assert other_output.exists() and directory.is_dir() and link.is_symlink() and outside.read_text() == "not ours"
    assert is_temporary_of(target, abandoned) and not is_temporary_of(target, tmp_path / ".out.bed.tmp-x")


def test_a_temporary_taken_for_a_leftover_before_its_lock_is_replaced(tmp_path, monkeypatch):
    """The instant between creating a temporary and locking it: a cleaner that removes it
    then makes the writer start again under a new name."""
    import streambhmm.io.outputs as outputs

    target = tmp_path / "out.bed"
    real_flock, calls = fcntl.flock, []

    def flock_after_a_cleaner(fd, operation):
        if not calls:  # the first temporary is removed by "another run" before it is locked
            calls.append(fd)
            remove_leftovers(target)
        return real_flock(fd, operation)

    monkeypatch.setattr(outputs.fcntl, "flock", flock_after_a_cleaner)
    with held_temporary(target) as (tmp, fd):
        assert tmp.exists() and os.path.samestat(os.fstat(fd), os.lstat(tmp))


def test_an_output_that_cannot_be_written_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    for path, message in ((tmp_path / "nope" / "x.bed", f"{tmp_path / 'nope' / 'x.bed'}: the directory "
                                                         f"{tmp_path / 'nope'} does not exist"),
                          (tmp_path / "file" / "x.bed", f"the directory {tmp_path / 'file'} is not a directory"),
                          (tmp_path, f"{tmp_path}: is a directory"),
                          (f"{tmp_path / 'x.bed'}/", "x.bed/: names a directory")):
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            check_output_file(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_scratch_directory_goes_and_takes_only_abandoned_ones_with_it(tmp_path):
    """pmd's coarse store lives in a scratch directory beside its output: removed after the
    call, and a killed call's is removed by the next one; a live call's, a link of that name,
    a directory of that name without our mark (a user's: a helper's audit) and anything not
    named so stay."""
    out = tmp_path / "calls.bed"
    abandoned = temporary_path(out, "scratch")
    (abandoned / "coarse.zarr").mkdir(parents=True)
    (abandoned / "coarse.zarr" / "zarr.json").write_text("{}")
    (abandoned / SCRATCH_MARK).touch()
    users = tmp_path / ".calls.bed.scratch-000000000000"
    users.mkdir()
    (users / "notes.txt").write_text("important")
    live = temporary_path(out, "scratch")
    live.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    link = temporary_path(out, "scratch")
    link.symlink_to(elsewhere)
    other = tmp_path / ".calls.bed.scratch-notours"
    other.mkdir()
    with directory_lock_now(live), scratch_directory(out) as scratch:
        assert scratch.is_dir() and is_temporary_of(out, scratch, "scratch")
        (scratch / "coarse.zarr").mkdir()
    assert not scratch.exists() and not abandoned.exists()
    assert live.is_dir() and link.is_symlink() and (elsewhere / "keep").exists() and other.is_dir()
    assert (users / "notes.txt").read_text() == "important"


def test_a_scratch_directory_waits_for_the_zarr_writes_a_stop_left_running(tmp_path):
    """A stop interrupts a zarr call's wait, not its writes: zarr's I/O thread created the
    staging store's zarr.json after pmd's scratch directory had been removed (5 of 120 runs
    stopped as it began), and left the directory behind."""
    import asyncio

    from zarr.core.sync import _get_loop

    out = tmp_path / "calls.bed"

    async def late_write(directory):
        await asyncio.sleep(0.5)
        (directory / "coarse.zarr.ingest-0").mkdir(parents=True)  # as zarr's LocalStore makes parents
        (directory / "coarse.zarr.ingest-0" / "zarr.json").write_text("{}")

    with scratch_directory(out) as scratch:
        asyncio.run_coroutine_threadsafe(late_write(scratch), _get_loop())  # left running by a stop
    assert list(tmp_path.iterdir()) == []
    time.sleep(0.6)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_appears_whole_and_replaces_only_what_it_may(tmp_path):
    from streambhmm.io.storage import replacing_dir

    target = tmp_path / "out.zarr"
    with replacing_dir(target) as staged:
        write_json(staged / "a.json", {"a": 1})
        assert not target.exists()
    assert (target / "a.json").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("not ours")
    (target / "link").symlink_to(outside)
    with pytest.raises(OSError):
        with replacing_dir(target) as staged:  # not to be replaced: the rename fails on it
            write_json(staged / "b.json", {"b": 1})
    with pytest.raises(RuntimeError):
        with replacing_dir(target, replace=True) as staged:
            write_json(staged / "b.json", {"b": 1})
            raise RuntimeError("failed")
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "link"]
    with replacing_dir(target, replace=True) as staged:
        write_json(staged / "b.json", {"b": 1})
    assert sorted(p.name for p in target.iterdir()) == ["b.json"]
    assert (outside / "kept").read_text() == "not ours"  # the link was removed, not followed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "outside"]


def test_a_file_that_cannot_be_replaced_is_named_and_left_with_no_temporary(tmp_path, monkeypatch):
    """An immutable file (or another user's in a sticky directory): the rename fails. The pair
    of a BED and its table is renamed BED first, so the table is not replaced either."""
    import numpy as np

    from streambhmm.distributed.regions import RegionRule, Regions, write_regions

    bed, table = tmp_path / "r.bed", tmp_path / "r.tsv"
    bed.write_text("old bed\n")
    table.write_text("old table\n")
    real = os.replace

    def refuse_the_bed(src, dst):
        if os.fspath(dst) == os.fspath(bed):
            raise PermissionError(1, "Operation not permitted")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", refuse_the_bed)
    one = np.ones(1, np.int64)
    found = {"chr1": Regions(one * 100, one * 500, one * 4, np.ones(1), one[:, None] * 2, one[:, None] * 8,
                             np.ones(1), False, False)}
    rule = RegionRule((0,), name="HMR")
    with pytest.raises(ValueError, match=r"r.bed: cannot be replaced \(Operation not permitted\)"):
        write_regions(found, rule, np.array([[0.1], [0.9]]), ["S"], bed, "t")
    assert bed.read_text() == "old bed\n" and table.read_text() == "old table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.bed", "r.tsv"]


def test_interruptions_are_ignored_while_temporaries_go():
    from streambhmm.io.outputs import interruptions_held

    received = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        with interruptions_held():
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while the temporaries go: ignored
            time.sleep(0.05)
        assert received == []
        os.kill(os.getpid(), signal.SIGINT)  # the handler is back
        time.sleep(0.05)
        assert received == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("together", [False, True])
def test_a_full_disk_is_a_refusal_naming_the_output_which_is_left_as_it_was(tmp_path, together, monkeypatch):
    """A helper's audit: `hmr` on a full disk ended with OSError [Errno 28] and a traceback."""
    from streambhmm.io import outputs

    monkeypatch.setattr(outputs, "ROOM_LEFT", 1 << 62)  # tmp_path's disk taken for full
    kept, new = tmp_path / "kept.bed", tmp_path / "new.bed"
    kept.write_text("our earlier output\n")
    for path in (kept, new):
        with pytest.raises(ValueError, match=rf"{path}: cannot be written in {tmp_path} \(no space left on device\); "
                                             rf"(it is left as it was|nothing was written)\. Free space there"):
            with written_together() if together else contextlib.nullcontext(), replacing(path) as fh:
                fh.write("new\n")
                raise OSError(errno.ENOSPC, "No space left on device")  # as a write to the full disk raises it
    assert kept.read_text() == "our earlier output\n" and sorted(tmp_path.iterdir()) == [kept]  # no temporary
    with pytest.raises(OSError, match="another file"):  # another file's error is not said as the output's
        with replacing(new):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "another file"))
    monkeypatch.setattr(outputs, "ROOM_LEFT", 0)  # a disk with room: another disk filled (decode's store)
    with pytest.raises(ValueError, match=rf"{new}: not written \(no space left on device on another disk the "
                                         rf"command writes, as {tmp_path} has .* MiB free: the store's\?\); nothing"):
        with replacing(new):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_no_room_for_a_scratch_directory_is_a_refusal_naming_the_output(tmp_path, monkeypatch):
    """A helper's audit: a disk without inodes gave `pmd` and `tracks` a traceback."""
    from pathlib import Path

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "mkdir", full)
    with pytest.raises(ValueError, match=rf"{tmp_path / 'p.bed'}: no room in {tmp_path} for a scratch directory beside "
                                         rf"it \(no space left on device\); nothing was written"):
        with scratch_directory(tmp_path / "p.bed"):
            pass
    assert list(tmp_path.iterdir()) == []
