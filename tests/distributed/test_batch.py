"""`streambhmm batch`: many samples in groups, one moment store per group."""

import signal
import threading
import time

import numpy as np
import pytest

from streambhmm.distributed.batch import ManifestError, read_batch_manifest
from streambhmm.moments.momentstore import load_total
from streambhmm.io.store import open_store

from ..app.test_cli import DATA, run

HEADER = "sample\tgroup\tformat\tfiles\n"
GOOD = {
    "H1": ("lister", "tsv", "dmrseq_H1_r1.chr21.tsv.gz,dmrseq_H1_r2.chr21.tsv.gz"),
    "IMR90": ("lister", "auto", "dmrseq_IMR90_r1.chr21.tsv.gz"),
    "HG002": ("nanopore", "modkit", "bsseq_modkit_HG002.bed.gz"),
    "ctr1": ("nanopore", "bedmethyl", "bsseq_modbam2bed_ctr1.encode11.bed"),
    "ok": ("third", "bismark-cov", "bsseq_bismark.cov.gz"),
}


def write_manifest(path, rows):
    """Rows name files in tests/data, or absolute paths."""
    lines = [f"{s}\t{g}\t{f}\t{','.join(str(DATA / x) for x in files.split(','))}\n"
             for s, (g, f, files) in rows.items()]
    path.write_text(HEADER + "".join(lines))
    return path


@pytest.mark.parametrize("text, message", [
    ("sample\tgroup\tfiles\n", "the header lacks column(s) format"),
    (HEADER + "A\tg\tcram\tx.gz\n", "unknown format 'cram'"),
    (HEADER + "A\tg/h\ttsv\tx.gz\n", "group 'g/h' is not a valid directory name"),
    (HEADER + "A\tg\ttsv\n", "expected 4 non-empty fields, as the header's"),
    (HEADER + "A\tg\ttsv\tx.gz\n# comment\nA\tg\ttsv\ty.gz\n", "listed again (first on line 2)"),
    ("# only a comment\n" + HEADER, "no samples"),
    (HEADER + "A\tbatch-summary.tsv\ttsv\tx.gz\n", "the summary file is named so"),  # audit 17
])
def test_manifest_errors_name_file_line_and_text(tmp_path, text, message):
    path = tmp_path / "manifest.tsv"
    path.write_text(text)
    with pytest.raises(ManifestError) as err:
        read_batch_manifest(path)
    assert message in str(err.value) and str(path) in str(err.value)
    if "line" in str(err.value) and "no samples" not in message:
        bad_line = text.splitlines()[int(str(err.value).split("line ")[1].split(":")[0]) - 1]
        assert repr(bad_line) in str(err.value)


def test_a_manifest_that_is_not_a_file_is_refused_unread(tmp_path):
    """An audit: a FIFO manifest waited forever for a second writer (the command reads it, then
    the run again), and <(...) ended in a traceback (Illegal seek). Refused before it is opened,
    in a process of its own, so a regression fails here rather than hanging the suite."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "manifest.fifo"
    os.mkfifo(fifo)  # no writer: opening it would block
    code = ("from streambhmm.distributed.batch import read_batch_manifest, ManifestError\n"
            f"try:\n    read_batch_manifest({str(fifo)!r})\nexcept ManifestError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "is not a regular file (a pipe or FIFO?)" in done.stdout and str(fifo) in done.stdout, done


def test_a_manifest_lined_up_with_blanks_reads_as_one_with_tabs(tmp_path):
    """docs/guide/batch.md's example, copied from the page: columns lined up with spaces."""
    lined = tmp_path / "lined.tsv"
    lined.write_text("sample  group     format       files\nH1      lister    tsv          H1_r1.tsv.gz,H1_r2.tsv.gz\n")
    tabbed = tmp_path / "tabbed.tsv"
    tabbed.write_text("sample\tgroup\tformat\tfiles\nH1\tlister\ttsv\tH1_r1.tsv.gz,H1_r2.tsv.gz\n")
    assert read_batch_manifest(lined) == read_batch_manifest(tabbed)
    excel = tmp_path / "excel.tsv"  # a byte-order mark and CRLF line ends, as Excel writes them
    excel.write_bytes(b"\xef\xbb\xbf" + tabbed.read_bytes().replace(b"\n", b"\r\n"))
    assert [(r.sample, r.group, r.format) for r in read_batch_manifest(excel)] == [("H1", "lister", "tsv")]


def test_manifest_columns_in_any_order_and_relative_paths(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("files\tsample\tformat\tgroup\na.gz, b.gz\tS\tauto\tg\n")
    (row,) = read_batch_manifest(path)
    assert (row.sample, row.group, row.format, row.files) == ("S", "g", "auto", (str(tmp_path / "a.gz"),
                                                                               str(tmp_path / "b.gz")))


@pytest.mark.slow
def test_batch_failure_loses_nothing_and_rerun_resumes(tmp_path, dask_clients):
    scheduler = dask_clients[1].scheduler.address
    (tmp_path / "bad.tsv").write_text("chr1\t100\t+\t3\t5\nchr1\t2x0\t+\t1\t2\n")
    rows = {**GOOD, "broken": ("third", "tsv", str(tmp_path / "bad.tsv"))}
    manifest = write_manifest(tmp_path / "manifest.tsv", rows)
    work = tmp_path / "work"
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler)
    assert r.exit_code == 1, r.output
    assert f"{tmp_path / 'bad.tsv'}:2" in r.output and "'chr1\\t2x0\\t+\\t1\\t2'" in r.output  # cause: file, line, text
    assert "FormatError" not in r.output  # said as `ingest` says it
    assert "1 failure(s): sample broken" in r.output
    summary = (work / "batch-summary.tsv").read_text()
    assert "broken\tthird\tfailed" in summary and "third\tok,broken\tskipped" in summary
    assert open_store(work / "third" / "counts.zarr").samples == ["ok"]  # the good sample of the group is kept
    assert not (work / "third" / "moments.zarr").exists()

    for group, samples in (("lister", ["H1", "IMR90"]), ("nanopore", ["HG002", "ctr1"])):
        # the same samples ingested and summed one command at a time
        store = tmp_path / f"{group}.zarr"
        for sample in samples:
            g, fmt, files = GOOD[sample]
            assert run("ingest", *(DATA / f for f in files.split(",")), "--sample", sample, "--format", fmt,
                       "--store", store).exit_code == 0
        assert run("moments", "compute", store, "-o", tmp_path / f"{group}_m.zarr", "--bins", "8",
                   "--scheduler", scheduler, "-q").exit_code == 0
        expected = load_total(tmp_path / f"{group}_m.zarr")[0]
        got, manifest_doc = load_total(work / group / "moments.zarr")
        assert manifest_doc["samples"] == samples
        np.testing.assert_array_equal(got.p123, expected.p123)
        np.testing.assert_array_equal(got.p12, expected.p12)

    rows["broken"] = ("third", "bismark-report", "bsseq_CpG_report.txt.gz")  # fixed
    write_manifest(manifest, rows)
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    summary = (work / "batch-summary.tsv").read_text()
    for sample in GOOD:
        assert f"{sample}\t{GOOD[sample][0]}\tunchanged" in summary
    # an unchanged sample shows the bins it was stored with (it said 0)
    samples = summary.split("\n\n")[0].splitlines()[1:]
    bins = {row[0]: int(row[4]) for row in (line.split("\t") for line in samples) if row[2] == "unchanged"}
    assert set(bins) == set(GOOD) and all(bins.values()), summary
    assert "lister\tH1,IMR90\tunchanged\t0\t1" in summary and "nanopore\tHG002,ctr1\tunchanged\t0\t4" in summary
    assert "broken\tthird\tingested" in summary and "third\tok,broken\tupdated" in summary
    assert open_store(work / "third" / "counts.zarr").samples == ["ok", "broken"]
    assert "--bins 8" in run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler).output
    r = run("fit", work / "lister" / "moments.zarr", "-m", "2", "--bins", "8", "-o", tmp_path / "model.json", "-q")
    assert r.exit_code == 0, r.output

    # the repaired sample went last: listed first, its group's store is in another order, said
    write_manifest(manifest, {"broken": rows.pop("broken"), **rows})
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    assert "group third: its counts store holds its samples in an order other than the manifest's (its sample 1 " \
           "is ok, where the manifest lists broken)" in " ".join(r.output.split())
    assert "group lister: its counts store" not in r.output


def test_a_group_whose_samples_changed_gets_its_moments_again(tmp_path, dask_clients):
    """A sample added to a group: its moment store (the workdir's, batch's own) no longer fits
    the group's samples, and is computed again, where the rerun used to fail every time."""
    scheduler = dask_clients[1].scheduler.address
    rows = {"H1": GOOD["H1"]}
    manifest = write_manifest(tmp_path / "manifest.tsv", rows)
    work = tmp_path / "work"
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler, "-q")
    # ingest's notes reach the batch's user, --quiet or not: H1's files list methylated cytosines only
    assert r.exit_code == 0 and "note: no row of H1's files" in r.output, r.output
    write_manifest(manifest, {**rows, "IMR90": GOOD["IMR90"]})
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler)
    assert r.exit_code == 0 and "group lister: its samples or settings changed" in r.output, r.output
    assert load_total(work / "lister" / "moments.zarr")[1]["samples"] == ["H1", "IMR90"]
    # and taken out again: its counts stay in the group's store, and the rerun says so (a helper's
    # trial: `fit` on that store still read it, unsaid)
    write_manifest(manifest, rows)
    r = run("batch", manifest, "--workdir", work, "--bins", "8", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    assert f"warning: group lister: its counts store {work / 'lister' / 'counts.zarr'} also holds IMR90, which " \
           f"the manifest does not list in it" in r.output
    assert load_total(work / "lister" / "moments.zarr")[1]["samples"] == ["H1"]
    # a workdir moved: its moment stores name the counts stores where they were, and are made again
    # in place (every rerun failed, advising an --output that batch does not have; then the whole
    # store was removed, a user's file in it too, and every partial computed again)
    moved = tmp_path / "moved"
    work.rename(moved)
    mine = moved / "lister" / "moments.zarr" / "partials" / "NOTES.txt"
    mine.write_text("my notes\n")
    r = run("batch", manifest, "--workdir", moved, "--bins", "8", "--scheduler", scheduler)
    assert r.exit_code == 0 and "group lister: its moment store was computed from a counts store elsewhere (the " \
                                "workdir moved?); made again, 1 of its partials reused (those of unchanged " \
                                "counts)" in r.output, r.output
    assert "group lister: moments unchanged, 0 partial(s) computed, 1 reused" in r.output, r.output
    assert load_total(moved / "lister" / "moments.zarr")[1]["source"]["counts_store"] == \
        str((moved / "lister" / "counts.zarr").resolve())
    assert mine.read_text() == "my notes\n"
    # moved again, and a sample added: the message names both (it named the move only)
    again = tmp_path / "again"
    moved.rename(again)
    write_manifest(manifest, {**rows, "IMR90": GOOD["IMR90"]})
    r = run("batch", manifest, "--workdir", again, "--bins", "8", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0 and "group lister: its moment store was computed from a counts store elsewhere (the " \
                                "workdir moved?) and its samples or settings changed since its moment store was " \
                                "made; made again" in r.output, r.output
    assert load_total(again / "lister" / "moments.zarr")[1]["samples"] == ["H1", "IMR90"]
    # a group the manifest no longer lists keeps its stores, and the rerun says so
    write_manifest(manifest, {"ok": GOOD["ok"]})
    r = run("batch", manifest, "--workdir", again, "--bins", "8", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0 and "holds the stores of group(s) lister of an earlier run, which the manifest no " \
                                "longer lists" in r.output, r.output
    assert (again / "lister" / "moments.zarr" / "manifest.json").exists()


def test_a_note_of_several_samples_is_said_in_full_once(tmp_path, dask_clients):
    """A helper's cohort: --exclude-chromosomes MT (the files say chrM) was warned of in full
    for each of 5 samples, chrM hidden in "and 30 more"."""
    rows = {"H1": GOOD["H1"], "IMR90": GOOD["IMR90"]}
    manifest = write_manifest(tmp_path / "manifest.tsv", rows)
    r = run("batch", manifest, "--workdir", tmp_path, "--bins", "8", "--exclude-chromosomes", "MT", "-q",
            "--scheduler", dask_clients[1].scheduler.address)
    assert r.exit_code == 0, r.output
    full = [line for line in r.output.splitlines() if "--exclude-chromosomes MT matched no chromosome" in line]
    short = [line for line in r.output.splitlines() if line.endswith(("as for sample H1", "as for sample IMR90"))]
    assert len(full) == 1 and len(short) == 1 and short[0].startswith("warning: sample "), r.output


@pytest.mark.slow
def test_a_batch_in_which_every_sample_fails_still_writes_its_summary(tmp_path, dask_clients):
    """Audit 17: the work directory did not exist yet, so the summary was never written."""
    (tmp_path / "bad.tsv").write_text("chr1\t100\t+\t3\t5\nchr1\t2x0\t+\t1\t2\n")
    manifest = write_manifest(tmp_path / "manifest.tsv", {"broken": ("g", "tsv", str(tmp_path / "bad.tsv"))})
    work = tmp_path / "work"  # new (its directory must exist: no command makes a missing one)
    r = run("batch", manifest, "--workdir", work, "--scheduler", dask_clients[0].scheduler.address, "-q")
    assert r.exit_code == 1, r.output
    assert "broken\tg\tfailed" in (work / "batch-summary.tsv").read_text()


def test_the_summary_never_replaces_the_manifest_or_a_users_file(tmp_path):
    """The summary is written at the end: a manifest named like it, or a file of the user's by
    its name in the work directory, is refused before any work, and kept."""
    manifest = write_manifest(tmp_path / "batch-summary.tsv", {"ok": GOOD["ok"]})
    before = manifest.read_text()
    r = run("batch", manifest, "--workdir", tmp_path, "-q")
    assert r.exit_code == 1 and "batch-summary.tsv, which this command reads" in r.output, r.output
    mine = tmp_path / "work" / "batch-summary.tsv"
    mine.parent.mkdir()
    mine.write_text("my notes\n")
    r = run("batch", manifest, "--workdir", mine.parent, "-q")
    assert r.exit_code == 1 and "exists and does not begin as this command's output does" in r.output, r.output
    assert manifest.read_text() == before and mine.read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-summary.tsv", "work"]


@pytest.mark.slow
def test_a_workdir_that_is_a_store_is_refused_before_any_work(tmp_path):
    # an audit's batch wrote its lock, its summary and a group's directory into a counts store
    store = tmp_path / "s.zarr"
    assert run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", store, "-q").exit_code == 0
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    manifest = write_manifest(tmp_path / "manifest.tsv", {"IMR90": GOOD["IMR90"]})
    r = run("batch", manifest, "--workdir", store, "-q")
    assert r.exit_code == 1 and f"{store} is a Zarr store; batch's --workdir is a directory of its own" in r.output
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before


@pytest.mark.slow
def test_a_second_batch_on_one_workdir_is_refused_naming_the_first(tmp_path):
    """Issue 25, item 15: two `batch` runs on one working directory gave tracebacks. The
    running batch holds WORKDIR/.batch.lock; another is refused at once, naming it."""
    import os
    import socket

    from streambhmm.distributed.batch import workdir_lock
    from streambhmm.io.storage import Location

    manifest = write_manifest(tmp_path / "manifest.tsv", {"ok": GOOD["ok"]})
    workdir = tmp_path / "work"
    workdir.mkdir()
    with workdir_lock(Location.of(workdir)):  # as a first batch run holds it
        r = run("batch", manifest, "--workdir", workdir, "-q")
    assert r.exit_code == 1, r.output
    assert (f"Error: {workdir} is in use by another batch run (pid {os.getpid()} on {socket.gethostname()}, "
            f"started ") in r.output
    assert "Traceback" not in r.output and sorted(p.name for p in workdir.iterdir()) == [".batch.lock"]
    r = run("batch", manifest, "--workdir", workdir, "-q")  # the first has ended
    assert r.exit_code == 0, r.output


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_batch_ends_its_ingests_before_they_store_a_sample(tmp_path, monkeypatch, stop_signal):
    """A batch stopped while a sample was being ingested went on to store it after "Aborted!":
    the ingest tasks run on the workers, where a stop of the command does not reach. The batch
    now has them stop before their commit points, and waits for them."""
    from distributed import Client, LocalCluster

    import streambhmm.distributed.batch as batch
    from streambhmm.app.console import _terminated

    started, ended = threading.Event(), threading.Event()
    real_ingest = batch.ingest

    def slow_ingest(*args, stop_check=lambda: None, **kwargs):
        def progress(*_):  # reads for up to 30 s, checking for a stop as ingest does at each block
            started.set()
            for _ in range(600):
                stop_check()
                time.sleep(0.05)
        try:
            return real_ingest(*args, stop_check=stop_check, progress=progress, **kwargs)
        finally:
            ended.set()

    def stop_when_started():
        if started.wait(60):
            signal.pthread_kill(threading.main_thread().ident, stop_signal)

    monkeypatch.setattr(batch, "ingest", slow_ingest)  # the workers are threads of this process
    manifest = write_manifest(tmp_path / "manifest.tsv", {"ok": GOOD["ok"]})
    workdir = tmp_path / "work"
    said = []
    handlers = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.default_int_handler),
                                                    (signal.SIGTERM, _terminated))}
    try:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            threading.Thread(target=stop_when_started, daemon=True).start()
            with pytest.raises(KeyboardInterrupt if stop_signal == signal.SIGINT else SystemExit):
                batch.run_batch(manifest, workdir, client, n_bins=8, echo=said.append)
            assert ended.is_set()  # the ingest task ended before the command did
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert said == ["stopping 1 ingest task(s) before their commits"]
    assert list((workdir / "third").iterdir()) == []  # no store, and no staged sample beside it


@pytest.mark.slow
def test_a_stop_names_the_samples_stored_that_the_run_had_not_reported(tmp_path):
    """Found by an audit: a sample whose ingest finished just before the stop, and which the
    run had not reported yet, was stored without a word. The stop now names each such
    sample, and waits for the tasks still running to end at the stop."""
    from distributed import Client, LocalCluster

    import streambhmm.distributed.batch as batch
    from streambhmm.io.storage import Location
    from streambhmm.moments.spec import FeatureSpec

    def waits_for_the_stop(stop):
        check = batch.stop_check(stop)
        while True:
            try:
                check()
            except batch.BatchStopped:
                return batch.SampleResult("B", "g", "stopped")
            time.sleep(0.02)

    rows = [batch.ManifestRow(s, "g", "tsv", ("x.tsv",), line) for line, s in enumerate("AB", 2)]
    said = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        run = batch._BatchRun(rows, Location.of(tmp_path), client, FeatureSpec(), 100, "CG", None, said.append,
                              said.append, lambda *_: None, None)
        stored = client.submit(batch.SampleResult, "A", "g", "replaced", pure=False)
        running = client.submit(waits_for_the_stop, run.stop, pure=False)
        stored.result()
        run.stop_ingests({stored: (run.summary.groups[0], rows[:1]), running: (run.summary.groups[0], rows[1:])})
        assert running.done() and running.result().status == "stopped"
    assert said == ["stopping 1 ingest task(s) before their commits",
                    "sample A (g): replaced before the stop; its group's moments are not updated "
                    "(rerun to update them)",
                    "batch stopped: the 1 sample(s) this run stored are kept; rerun the command to ingest the "
                    "others and to update the moments"]


def test_a_rows_turn_comes_once_every_row_before_it_in_its_group_is_over(tmp_path):
    """A commit waits on one Event, its predecessor's, which the command sets once that row
    and all before it in the group are over (a wait on every earlier row's made large groups
    ingest 4x slower); a stop sets them all, waking every waiting commit to stop."""
    from distributed import Client, Event, LocalCluster

    import streambhmm.distributed.batch as batch
    from streambhmm.io.storage import Location
    from streambhmm.moments.spec import FeatureSpec

    rows = [batch.ManifestRow(s, g, "tsv", ("x.tsv",), line) for line, (s, g) in
            enumerate([("a", "g"), ("b", "h"), ("c", "g"), ("d", "g")], 2)]
    events = (lambda dask_scheduler: len([e for e in dask_scheduler.extensions["events"]._events
                                          if "-done-" in e or "-stop-" in e]))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        def new_run():
            return batch._BatchRun(rows, Location.of(tmp_path), client, FeatureSpec(), 100, "CG", None, print, print,
                                   lambda *_: None, None)

        run = new_run()
        turns = (lambda: [Event(batch.done_event(run.run_id, i), client=client).is_set() for i in range(4)])
        run.ingest_over(rows[3:])
        assert turns() == [False, False, False, False]
        run.ingest_over(rows[:1])
        assert turns() == [True, False, False, False]
        run.ingest_over(rows[2:3])
        assert turns() == [True, False, True, True]
        run.ingest_over(rows[1:2])
        assert turns() == [True, True, True, True]
        run.forget_turns()
        assert client.run_on_scheduler(events) == 0

        run = new_run()  # a run that ends before it records a row whose task set its Event
        run.ingest_over(rows[:1])
        Event(batch.done_event(run.run_id, 2), client=client).set()
        run.forget_turns()
        assert client.run_on_scheduler(events) == 0

        run = new_run()
        run.ingest_over(rows[2:3])
        run.stop_ingests({})
        assert turns() == [True, True, True, True]
        run.forget_turns()  # the stop's Event too: no task is left to hear it
        assert client.run_on_scheduler(events) == 0

        # a task that ends after the stop sets no Event: the command has set them all, and
        # may have cleared them already (a helper's audit found them left on the scheduler)
        def stopped():
            raise batch.BatchStopped("the batch was stopped")

        turn = batch.CommitTurn(None, batch.done_event(run.run_id, 0), stopped)
        turn()
        turn.over()
        assert client.run_on_scheduler(events) == 0


def test_a_sample_whose_worker_died_while_an_earlier_one_ran_is_said_to_have_waited(tmp_path):
    """A helper's audit killed the worker of a large sample four times: the samples waiting
    behind it on that worker died with it, and each failed "most likely out of memory". A
    failed sample whose group had an earlier sample not yet over, or dead too, now says it may
    only have waited, and that a rerun ingests it, in whatever order the deaths are reported
    (a second audit's first waiting sample, reported after the large one, named none); the
    sample whose turn it was is told as before."""
    from types import SimpleNamespace

    from distributed import KilledWorker

    import streambhmm.distributed.batch as batch
    from streambhmm.io.storage import Location
    from streambhmm.moments.spec import FeatureSpec

    rows = [batch.ManifestRow(s, "g", "tsv", ("x.tsv",), line) for line, s in enumerate(["HUGE", "S1", "S2"], 2)]
    run = batch._BatchRun(rows, Location.of(tmp_path), None, FeatureSpec(), 100, "CG", None, print, print,
                          lambda *_: None, None)
    died = KilledWorker("ingest_sample-1", SimpleNamespace(address="tcp://127.0.0.1:1"), 3)
    assert run._waited(ValueError("bad row"), rows[1]) == ""
    assert run._waited(died, rows[1]).startswith(". Sample HUGE, listed before it in group g, was not yet over")
    assert run._waited(died, rows[0]) == ""  # the first of its group: nothing to wait for
    run.over.update(rows[:2])
    # reported after the samples before it, in any order: the first death before it is named
    assert run._waited(died, rows[2]).startswith(". Sample HUGE, listed before it in group g, died with its worker")

    run = batch._BatchRun(rows, Location.of(tmp_path), None, FeatureSpec(), 100, "CG", None, print, print,
                          lambda *_: None, None)
    run.over.add(rows[0])  # HUGE stored: S1's turn had come
    assert run._waited(died, rows[1]) == ""
    assert run._waited(died, rows[2]).startswith(". Sample S1, listed before it in group g, was not yet over")


def test_a_groups_ingests_over_what_their_dead_workers_staged_goes(tmp_path):
    """A helper's audit killed workers mid-ingest: their staged counts stayed beside the
    group's store after the command ended, removed only by a later writer. Once a group's
    ingests are over they go; a staging whose writer lives, and the user's files, stay, and a
    store another command holds is not waited for (its next writer recovers it)."""
    import fcntl

    import streambhmm.distributed.batch as batch
    from streambhmm.io.store.schema import OWNER_LOCK
    from streambhmm.io.storage import Location
    from streambhmm.moments.spec import FeatureSpec

    rows = [batch.ManifestRow("S", "g", "tsv", ("x.tsv",), 2)]
    run = batch._BatchRun(rows, Location.of(tmp_path), None, FeatureSpec(), 100, "CG", None, print, print,
                          lambda *_: None, None)
    group = tmp_path / "g"
    dead, live = group / "counts.zarr.ingest-dead00000000", group / "counts.zarr.ingest-11fe00000000"
    for staging in (dead, live):
        staging.mkdir(parents=True)
        (staging / "zarr.json").write_text("{}")
    (group / "notes.txt").write_text("mine")
    (dead / OWNER_LOCK).write_text("")
    with open(live / OWNER_LOCK, "w") as owner:
        fcntl.flock(owner, fcntl.LOCK_EX)  # a writer still at work
        run.sweep(run.summary.groups[0])
    assert not dead.exists() and live.exists() and (group / "notes.txt").read_text() == "mine"
    dead.mkdir()
    with open(group / ".counts.zarr.lock") as reader:  # another command reads the store: not waited for
        fcntl.flock(reader, fcntl.LOCK_SH)
        run.sweep(run.summary.groups[0])
    assert dead.exists()
    other = tmp_path / "h"
    other.mkdir()
    (other / ".counts.zarr.lock").symlink_to(tmp_path / "elsewhere")  # refused by the lock: the run goes on
    run.sweep(batch.GroupResult("h", ["T"]))
    assert not (tmp_path / "elsewhere").exists()
    run.sweep(batch.GroupResult("absent", ["T"]))  # a group whose directory was never made: nothing made
    assert not (tmp_path / "absent").exists()


def test_at_its_commit_point_a_task_asks_the_scheduler_whether_it_is_still_wanted(monkeypatch):
    """A helper's audit killed the command (kill -9) and saw one sample more than the commit
    under way go in: the task's predecessor set its Event, and the task checked its worker's
    copy of its state before the scheduler's release had reached it. At the commit point the
    check now asks the scheduler, whose answer for a running task is "processing"; any other
    stops the commit, and a scheduler that does not answer lets it go on."""
    from distributed import Client, LocalCluster

    import streambhmm.distributed.batch as batch

    def states_in_a_task():
        task = batch._RunningTask.here()
        return task.scheduler_state(), task.gone(), task.gone(ask_scheduler=True)

    def checks_in_a_task(answer):
        def scheduler_state(self):
            if isinstance(answer, BaseException):
                raise answer
            return answer

        monkeypatch.setattr(batch._RunningTask, "scheduler_state", scheduler_state)  # the workers are threads here
        check = batch.stop_check(None)
        check()  # the worker's copy: still wanted
        try:
            check(at_commit=True)
        except batch.BatchStopped:
            return "stopped"
        return "commits"

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        assert client.submit(states_in_a_task, pure=False).result() == ("processing", False, False)
        outcomes = {answer: client.submit(checks_in_a_task, answer, pure=False).result()
                    for answer in (None, "released", "processing")}
        assert outcomes == {None: "stopped", "released": "stopped", "processing": "commits"}
        assert client.submit(checks_in_a_task, TimeoutError("no answer"), pure=False).result() == "commits"
    assert batch._RunningTask.here() is None and batch.stop_check(None)(at_commit=True) is None  # outside a worker


@pytest.mark.slow
def test_a_scheduler_out_of_reach_for_a_moment_does_not_fail_an_ingest(monkeypatch):
    """Each ingest task asks the scheduler whether the batch was stopped (a call at every
    block it reads). A scheduler out of reach at that moment lets the ingest go on, as it
    did before the check, where the error would have failed the sample."""
    from distributed import Client, Event, LocalCluster
    from distributed.comm.core import CommClosedError

    import streambhmm.distributed.batch as batch

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        check = batch.stop_check("streambhmm-test-stop")

        def out_of_reach(self):
            raise CommClosedError("in <TCP (closed)>: Stream is closed")

        with monkeypatch.context() as patch:
            patch.setattr(Event, "is_set", out_of_reach)
            check()  # no error
        Event("streambhmm-test-stop").set()
        with pytest.raises(batch.BatchStopped):
            check()


def test_a_task_run_again_after_its_worker_was_lost_says_ingested(tmp_path):
    """A helper killed a worker during a batch on a new workdir: Dask ran the ingest again,
    which found the sample its first try had stored and said "unchanged" with 0 rows. The
    sample now records the run that stored it; only another run's sample is unchanged, and
    an unchanged sample shows the rows it was stored with."""
    from streambhmm.distributed.batch import ManifestRow, ingest_sample

    row = ManifestRow("ok", "third", "bismark-cov", (str(DATA / "bsseq_bismark.cov.gz"),), 2)
    store = str(tmp_path / "counts.zarr")
    first = ingest_sample(row, store, 100, "CG", None, run="run-1")
    again = ingest_sample(row, store, 100, "CG", None, run="run-1")  # the same task, tried again
    later = ingest_sample(row, store, 100, "CG", None, run="run-2")
    assert (first.status, again.status, later.status) == ("ingested", "ingested", "unchanged")
    assert first.n_rows > 0 and again.n_rows == later.n_rows == first.n_rows
    assert first.n_bins > 0 and again.n_bins == later.n_bins == first.n_bins  # (an unchanged one said 0)
    assert again.notes == ("sample ok: stored by this run's first try of its task, whose worker was lost before it "
                           "reported",) and later.notes == ()


@pytest.mark.slow
def test_a_groups_samples_take_their_columns_in_the_manifests_order(tmp_path, monkeypatch):
    """Found by an audit: a group's samples took their columns in the order their ingests
    ended, so three runs of one manifest gave three stores, and `fit` or `hmr` on the store
    without --samples three results. A commit now waits for those listed before it."""
    from distributed import Client, LocalCluster

    import streambhmm.distributed.batch as batch

    real_ingest = batch.ingest

    def first_is_slowest(files, sample, *args, **kwargs):
        time.sleep({"H1": 3.0, "IMR90": 1.5}.get(sample, 0.0))
        return real_ingest(files, sample, *args, **kwargs)

    monkeypatch.setattr(batch, "ingest", first_is_slowest)  # the workers are threads of this process
    rows = {name: ("g", *GOOD[name][1:]) for name in ("H1", "IMR90", "ok")}
    manifest = write_manifest(tmp_path / "manifest.tsv", rows)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        summary = batch.run_batch(manifest, tmp_path / "work", client, n_bins=8)
        assert not summary.failed
        assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.extensions["events"]._events)) == 0
    assert open_store(tmp_path / "work" / "g" / "counts.zarr").samples == ["H1", "IMR90", "ok"]



@pytest.mark.slow
def test_ingests_end_when_the_command_is_gone(tmp_path):
    """A task outlives a command killed with -9 on a scheduler of its own: one waiting for the
    Events that only the command sets would wait forever on its worker, and one still reading
    its files went on to store its sample. Both end, storing nothing."""
    from distributed import Client, LocalCluster

    import streambhmm.distributed.batch as batch

    row = batch.ManifestRow("B", "g", "auto", (str(DATA / "bsseq_bismark.cov.gz"),), 2)
    store = tmp_path / "g" / "counts.zarr"
    store.parent.mkdir()
    staged = (lambda: [p for p in store.parent.iterdir() if p.name.startswith("counts.zarr.")])
    busy = (lambda dask_worker: dask_worker.state.executing_count + len(dask_worker.state.long_running))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        client = Client(cluster)
        waiting = client.submit(batch.ingest_sample, row, str(store), 100, "CG", None, None, None, "run", True,
                                "an Event nobody sets", None, pure=False)

        def reads_until_stopped():  # as ingest checks at each block it reads
            check = batch.stop_check(None)
            while True:
                check()
                time.sleep(0.05)

        reading = client.submit(reads_until_stopped, pure=False)
        deadline = time.monotonic() + 60
        while not staged() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        assert staged() and not store.exists() and not waiting.done()  # staged, waiting for its turn
        assert not reading.done()
        client.close()  # as the command's death closes its connection
        with Client(cluster) as other:  # (a waiting commit looks every TURN_POLL_SECONDS)
            deadline = time.monotonic() + 20 + batch.TURN_POLL_SECONDS
            while sum(other.run(busy).values()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert sum(other.run(busy).values()) == 0
    assert not store.exists() and staged() == []
