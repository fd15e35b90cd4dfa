"""What the commands write (audit 2, issue 25): outputs checked before any work, a report
never deleting what it did not write, models recording what they depend on, tracks refusing
chrom.sizes shorter than the data, the umask's permissions and the leftovers of killed runs."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streambhmm.app.modelio import read_model

from .test_cli import DATA, run

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster

TSV = DATA / "dmrseq_H1_r1.chr21.tsv.gz"
REPORT_MARKER = "streambhmm-report.json"  # in every report directory (README)


def snapshot(root: Path) -> list:
    """Every entry under ``root`` with its size (directories: -1)."""
    return sorted((str(p.relative_to(root)), -1 if p.is_dir() else p.stat().st_size) for p in root.rglob("*"))


def cli(*args, cwd=None):
    """The command in its own process: a crash shows as a signal, not as a dead test run."""
    return subprocess.run([sys.executable, "-m", "streambhmm", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """proj/c.zarr (100 bp bins) with its model m.json, and a 5 kb store and model."""
    proj = tmp_path_factory.mktemp("proj")
    for name, bin_size in (("c", 100), ("c5k", 5000)):
        r = run("ingest", TSV, "--sample", "H1", "--store", proj / f"{name}.zarr", "--bin-size", bin_size, "-q")
        assert r.exit_code == 0, r.output
        r = run("fit", proj / f"{name}.zarr", "-m", "2", "-o", proj / f"{name}.json", "-q")
        assert r.exit_code == 0, r.output
    return proj


# -- item 1: a report replaces only a previous report, file by file ---------------------------
@pytest.mark.parametrize("where,message", [
    ("{proj}", "holds the counts store"),
    ("{proj}/c.zarr", "is the counts store"),
    ("{proj}/c.zarr/chr21", "is inside the counts store"),
    (".", "holds the counts store"),  # run in proj: also audit 15's traceback
    ("{proj}/notes", "is not a streambhmm report"),
])
def test_report_refuses_an_output_it_would_delete_and_touches_nothing(project, where, message, monkeypatch):
    notes = project / "notes"
    notes.mkdir(exist_ok=True)
    (notes / "mine.txt").write_text("not the report's")
    before = snapshot(project)
    monkeypatch.chdir(project)
    r = run("report", project / "c.zarr", "--model", project / "c.json", "-o", where.format(proj=project), "-q")
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, r.output
    assert snapshot(project) == before


def test_a_previous_report_is_replaced_and_only_its_own_files_removed(project, tmp_path):
    out = tmp_path / "report"
    args = ("report", project / "c.zarr", "--model", project / "c.json", "-o", out, "-q")
    assert run(*args).exit_code == 0
    marker = json.loads((out / REPORT_MARKER).read_text())
    assert set(marker["files"]) == {p.name for p in out.iterdir()} - {REPORT_MARKER}
    # a figure an earlier report drew (and listed) goes with it; the new report has none
    (out / "loglik.png").write_bytes(b"old figure")
    (out / REPORT_MARKER).write_text(json.dumps({**marker, "files": [*marker["files"], "loglik.png"]}))
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert not (out / "loglik.png").exists() and (out / "index.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # nothing set aside or staged is left
    # its own segments.bed given as --regions: an input the report would replace, refused
    before = snapshot(out)
    r = run(*args, "--regions", out / "segments.bed")
    assert r.exit_code == 1 and f"holds the --regions file {out / 'segments.bed'}" in r.output, r.output
    assert snapshot(out) == before
    # a file of the user's in it: refused, and kept
    (out / "mine.txt").write_text("keep")
    before = snapshot(out)
    r = run(*args)
    assert r.exit_code == 1 and "also holds what the report did not write (mine.txt)" in r.output
    assert snapshot(out) == before
    # an empty directory may be the output
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run("report", project / "c.zarr", "--model", project / "c.json", "-o", empty, "-q").exit_code == 0
    assert (empty / "index.html").exists()


# -- item 7: a model records its bin size and how its samples were read ----------------------
def test_a_model_is_refused_on_a_store_of_another_bin_size(project, tmp_path):
    document = json.loads((project / "c5k.json").read_text())
    assert document["bin_size"] == 5000 and document["sample_settings"] == {"H1": {"context": "CG",
                                                                                    "merge_strands": False}}
    store, model = project / "c.zarr", project / "c5k.json"
    for args in (("score", store), ("decode", store, "-o", tmp_path / "s.bed"),
                 ("regions", store, "--targets", "0", "-o", tmp_path / "r.bed"), ("tracks", store, "-o", tmp_path / "t"),
                 ("report", store, "-o", tmp_path / "rep")):
        r = run(*args, "--model", model, "-q")
        assert r.exit_code == 1, (args, r.output)
        assert f"{model} was fitted to 5,000 bp bins, but {store} has 100 bp bins" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a model written before the bin size was recorded still works
    del document["bin_size"], document["sample_settings"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(document))
    assert run("score", project / "c5k.zarr", "--model", older, "-q").exit_code == 0


def test_a_model_is_refused_on_a_sample_read_another_way(project, tmp_path):
    merged = tmp_path / "merged.zarr"
    assert run("ingest", TSV, "--sample", "H1", "--store", merged, "--merge-strands", "-q").exit_code == 0
    r = run("score", merged, "--model", project / "c.json")
    assert r.exit_code == 1 and "was fitted to sample H1 read with merge_strands False (in" in r.output, r.output


# -- item 9 and 15: chrom.sizes against the data -------------------------------------------------
@pytest.mark.parametrize("sizes,message", [
    ("chr21\t1000\n", "gives chr21 1,000 bp, but {store} has data on chr21 up to its bin 10,027,200-10,027,300"),
    ("chr21\t100000000000000\n", "line 1: chr21 is 100,000,000,000,000 bp long; a bigWig holds chromosomes of at "
                                 "most 4,294,967,295 bp"),
])
def test_tracks_refuse_chrom_sizes_that_do_not_hold_the_data(project, tmp_path, sizes, message):
    path = tmp_path / "chrom.sizes"
    path.write_text(sizes)
    r = run("tracks", project / "c.zarr", "--chrom-sizes", path, "-o", tmp_path / "t", "-q")
    assert r.exit_code == 1 and message.format(store=project / "c.zarr") in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chrom.sizes"]


# -- item 10 and 16: every output location checked before any work --------------------------
def test_tracks_refuse_an_output_they_cannot_write_instead_of_crashing(project, tmp_path):
    r = cli("tracks", project / "c.zarr", "-o", tmp_path / "missing" / "t", "-q")
    assert r.returncode == 2 and f"{tmp_path / 'missing' / 't'}: the directory {tmp_path / 'missing'} does not " \
                                  f"exist" in r.stderr, (r.returncode, r.stderr[-500:])
    long_prefix = tmp_path / ("t" * 240)  # PREFIX.H1.methylation.bw is over 255 bytes
    r = cli("tracks", project / "c.zarr", "-o", long_prefix, "-q")
    assert r.returncode == 1 and "the file name is 258 bytes; at most 233 fit" in r.stderr, r.stderr[-500:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_tracks_refuse_a_read_only_directory(project, tmp_path):
    locked_dir = tmp_path / "ro"
    locked_dir.mkdir(mode=0o555)
    r = cli("tracks", project / "c.zarr", "-o", locked_dir / "t", "-q")
    assert r.returncode == 2 and f"{locked_dir / 't'}: cannot write in {locked_dir}" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("command", ["ingest", "batch"])
def test_a_store_or_work_directory_in_a_missing_directory_is_refused_not_made(tmp_path, command):
    # a typo in the path must not make a new tree of directories (the docs' rule for every output)
    out = tmp_path / "missing" / "c.zarr"
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text(f"A\t{TSV}\n")
    args = ("ingest", TSV, "--sample", "A", "--store") if command == "ingest" else ("batch", manifest, "--workdir")
    r = run(*args, out, "-q")
    assert r.exit_code == 2, r.output
    assert f"{out}: the directory {out.parent} does not exist (create it first)" in r.output
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["report", "moments", "fit", "decode", "regions", "tracks", "hmr", "pmd"])
def test_every_command_refuses_a_missing_output_directory_before_any_work(project, tmp_path, command):
    store, model = project / "c.zarr", project / "c.json"
    out = tmp_path / "missing" / "out"
    args = {"report": ("--model", model), "decode": ("--model", model), "fit": ("-m", "2"),
            "regions": ("--model", model, "--targets", "0")}.get(command, ())
    r = run(command, store, *args, "-o", out, "-q")
    assert r.exit_code == 2, r.output
    assert f"{out}: the directory {out.parent} does not exist (create it first)" in r.output
    assert list(tmp_path.iterdir()) == []


def test_a_new_store_under_a_file_is_refused_by_name(tmp_path):
    blocker = tmp_path / "notes"
    blocker.write_text("a file, not a directory\n")
    r = run("ingest", TSV, "--sample", "S", "--store", blocker / "sub" / "c.zarr", "-q")
    assert r.exit_code == 2 and f"{blocker / 'sub' / 'c.zarr'}: {blocker} is a file, not a directory" in r.output
    assert blocker.read_text() == "a file, not a directory\n" and sorted(tmp_path.iterdir()) == [blocker]


def test_derived_names_are_checked_before_any_work(project, tmp_path):
    # a sweep writes NAME.m2.json and NAME.m3.json: too long although NAME.json fits
    name = tmp_path / ("m" * 228 + ".json")
    r = run("fit", project / "c.zarr", "-m", "2-3", "-o", name, "-q")
    assert r.exit_code == 1 and "the file name is 236 bytes; at most 233 fit" in r.output, r.output
    # the regions' table beside the BED cannot be written: a directory has its name
    (tmp_path / "r.tsv").mkdir()
    r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
            tmp_path / "r.bed", "-q")
    assert r.exit_code == 1 and f"{tmp_path / 'r.tsv'}: is a directory" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.tsv"]


def test_outputs_never_replace_what_the_command_did_not_write(project, tmp_path):
    """The table named after --output, a device or FIFO named by it, and files inside the
    store the command reads are refused before any work, and left as they were."""
    other = tmp_path / "calls.tsv"
    other.write_text("chrom\tpos\tmc\tcov\nchr21\t10\t1\t2\n")  # say, the input the store was made from
    r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
            tmp_path / "calls.bed", "-q")
    assert r.exit_code == 1 and "exists and does not begin as this command's output does" in r.output, r.output
    assert other.read_text().startswith("chrom\tpos") and not (tmp_path / "calls.bed").exists()
    os.mkfifo(tmp_path / "pipe.bed")
    r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
            tmp_path / "pipe.bed", "-q")
    assert r.exit_code != 0 and "is not a regular file" in r.output, r.output
    # nor a link to one (/dev/stdout: a helper's audit found it replaced by a file)
    (tmp_path / "out.bed").symlink_to(tmp_path / "pipe.bed")
    r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
            tmp_path / "out.bed", "-q")
    assert r.exit_code != 0 and f"is a link to {tmp_path / 'pipe.bed'}, not to a regular file" in r.output, r.output
    assert (tmp_path / "out.bed").is_symlink()
    before = snapshot(project / "c.zarr")
    r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
            project / "c.zarr" / "zarr.json", "-q")
    assert r.exit_code == 1 and "which this command reads" in r.output, r.output
    assert snapshot(project / "c.zarr") == before
    # what the command wrote itself it replaces when run again
    for _ in range(2):
        r = run("regions", project / "c.zarr", "--model", project / "c.json", "--targets", "0", "-o",
                tmp_path / "mine.bed", "-q")
        assert r.exit_code == 0, r.output


def test_a_named_output_replaces_only_what_the_command_wrote(project, tmp_path):
    """A file of the user's, or a link, at the output's name is refused and left as it was
    (a helper's audit: `fit -o notes.json` replaced the notes); a rerun replaces its own output."""
    notes = tmp_path / "notes.json"
    notes.write_text("my notes\n")
    theirs = tmp_path / "dnmtools.bed"
    theirs.write_text("chr21\t100\t200\tHYPO0\t5\t+\n")
    (tmp_path / "link.bed").symlink_to(theirs)
    peaks = tmp_path / "peaks.bed"  # a UCSC track of the user's: it begins as ours do (a helper's audit)
    peaks.write_text('track name="My peaks" description="peaks, the only copy" itemRgb="On"\nchr21\t100\t200\tp1\n')
    model = project / "c.json"
    refused = [("fit", project / "c.zarr", "-m", "2", "-o", notes),
               ("regions", project / "c.zarr", "--model", model, "--targets", "0", "-o", peaks),
               ("regions", project / "c.zarr", "--model", model, "--targets", "0", "-o", theirs),
               ("regions", project / "c.zarr", "--model", model, "--targets", "0", "-o", tmp_path / "link.bed"),
               ("decode", project / "c.zarr", "--model", model, "-o", theirs)]
    before = snapshot(tmp_path)
    for args in refused:
        r = run(*args, "-q")
        assert r.exit_code == 1 and ("exists and does not begin as this command's output does" in r.output
                                     or "is a link" in r.output) and "Move it" in r.output, (args, r.output)
    assert snapshot(tmp_path) == before and (tmp_path / "link.bed").is_symlink()
    (tmp_path / "mine.json").touch()  # an empty file (mktemp's) holds nothing to lose
    for _ in range(2):  # then its own model, replaced
        r = run("fit", project / "c.zarr", "-m", "2", "-o", tmp_path / "mine.json", "-q")
        assert r.exit_code == 0 and read_model(tmp_path / "mine.json").n_states == 2, r.output


def test_one_commands_output_is_not_anothers_to_replace(project, tmp_path):
    """A helper's audit: `pmd -o results.bed` then `hmr -o results.bed` replaced the PMDs, as
    any file whose track line looked like ours; nor are a read-only file or the lock file of a
    moment store the command reads replaced."""
    store, model = project / "c.zarr", project / "c.json"
    r = run("pmd", store, "-o", tmp_path / "results.bed", "-q")
    assert r.exit_code == 0, r.output
    r = run("regions", store, "--model", model, "--targets", "0", "-o", tmp_path / "regions.bed", "-q")
    assert r.exit_code == 0, r.output
    before = snapshot(tmp_path)
    refused = [("hmr", store, "-o", tmp_path / "results.bed"),
               ("regions", store, "--model", model, "--preset", "pmd", "-o", tmp_path / "results.bed"),
               ("decode", store, "--model", model, "-o", tmp_path / "regions.bed"),
               ("pmd", store, "-o", tmp_path / "regions.bed")]
    for args in refused:
        r = run(*args, "-q")
        assert r.exit_code == 1 and "exists and does not begin as this command's output does" in r.output, \
            (args, r.output)
    assert snapshot(tmp_path) == before
    (tmp_path / "results.tsv").unlink()  # the table alone, named after hmr's output
    r = run("hmr", store, "-o", tmp_path / "results.bed", "-q")
    assert r.exit_code == 1 and "results.tsv: exists and does not begin" not in r.output, r.output
    r = run("pmd", store, "-o", tmp_path / "results.bed", "-q")  # its own rerun
    assert r.exit_code == 0, r.output
    (tmp_path / "results.bed").unlink()
    r = run("hmr", store, "-o", tmp_path / "results.bed", "-q")
    assert r.exit_code == 1 and "results.tsv: exists and does not begin" in r.output, r.output
    # nor a model: `fit`'s is not `pmd --save-model`'s to replace, nor the other way round
    assert run("fit", store, "-m", "2", "-o", tmp_path / "fitted.json", "-q").exit_code == 0
    assert run("pmd", store, "-o", tmp_path / "p.bed", "--save-model", tmp_path / "saved.json", "-q").exit_code == 0
    before = snapshot(tmp_path)
    for args in (("pmd", store, "-o", tmp_path / "p.bed", "--save-model", tmp_path / "fitted.json"),
                 ("fit", store, "-m", "2", "-o", tmp_path / "saved.json"),
                 ("hmr", store, "-o", tmp_path / "h.bed", "--save-model", tmp_path / "saved.json")):
        r = run(*args, "-q")
        whose = "`fit`" if "fitted.json" in str(args[-1]) else "`pmd`"  # the refusal says whose model it is
        assert r.exit_code == 1 and "exists and does not begin as this command's output does" in r.output \
            and f"(a model written by {whose})" in r.output, (args, r.output)
    assert snapshot(tmp_path) == before
    r = run("pmd", store, "-o", tmp_path / "p.bed", "--save-model", tmp_path / "saved.json", "-q")  # its own
    assert r.exit_code == 0, r.output
    (tmp_path / "regions.bed").chmod(0o444)
    r = run("regions", store, "--model", model, "--targets", "0", "-o", tmp_path / "regions.bed", "-q")
    assert r.exit_code == 1 and "is read-only (mode 444)" in r.output, r.output
    r = run("moments", "compute", store, "-o", tmp_path / "m.zarr", "-q")
    assert r.exit_code == 0, r.output
    (tmp_path / ".m.zarr.lock").touch()
    r = run("pmd", store, "--moments", tmp_path / "m.zarr", "-o", tmp_path / ".m.zarr.lock", "-q")
    assert r.exit_code == 1 and f"is the lock file of {tmp_path / 'm.zarr'}" in r.output, r.output
    assert (tmp_path / ".m.zarr.lock").stat().st_size == 0


def test_an_output_inside_the_store_is_refused_without_writing_there(project, tmp_path):
    """The writable-directory check makes no probe file: one made inside the store, before the
    output was found to lie there, changed the store (a helper's audit)."""
    store = project / "c.zarr"
    before = (snapshot(store), os.stat(store).st_mtime_ns)
    r = run("fit", store, "-m", "2", "-o", store / "m.json", "-q")
    assert r.exit_code == 1 and "is inside" in r.output, r.output
    assert (snapshot(store), os.stat(store).st_mtime_ns) == before


def test_moments_of_other_counts_are_refused(project, tmp_path):
    moments = tmp_path / "m.zarr"
    assert run("moments", project / "c.zarr", "-o", moments, "-q").exit_code == 0
    assert run("hmr", project / "c.zarr", "--moments", moments, "-o", tmp_path / "a.bed", "-q").exit_code in (0, 1)
    other = tmp_path / "other.zarr"
    r = run("ingest", DATA / "dmrseq_H1_r2.chr21.tsv.gz", "--sample", "H1", "--store", other, "-q")
    assert r.exit_code == 0, r.output
    r = run("hmr", other, "--moments", moments, "-o", tmp_path / "b.bed", "-q")
    assert r.exit_code == 1 and "does not hold the moments of" in r.output and "other counts, or" in r.output, r.output
    assert not (tmp_path / "b.bed").exists()
    # the advice is one `moments compute` takes: a moment store of other counts is never updated
    assert f"compute {other}'s with `streambhmm moments compute {other} -o NEW_MOMENTS` and give that" in r.output
    assert run("moments", other, "-o", moments, "-q").exit_code == 1
    assert run("moments", other, "-o", tmp_path / "new.zarr", "-q").exit_code == 0
    r = run("hmr", other, "--moments", tmp_path / "new.zarr", "-o", tmp_path / "b.bed", "-q")
    assert r.exit_code in (0, 1) and "does not hold the moments" not in r.output, r.output



def test_stale_moments_of_some_samples_say_how_to_update_them(tmp_path):
    """A moment store of some of the store's samples, made stale by an ingest: the call's advice
    and `moments` itself name its samples (following the advice without them was refused as
    other settings, "use another --output": a helper's trial)."""
    store, moments = tmp_path / "s.zarr", tmp_path / "m.zarr"
    for sample, path in (("H1", DATA / "dmrseq_H1_r2.chr21.tsv.gz"), ("IMR90", DATA / "dmrseq_IMR90_r1.chr21.tsv.gz")):
        assert run("ingest", path, "--sample", sample, "--store", store, "-q").exit_code == 0
    assert run("moments", store, "-o", moments, "--samples", "H1", "-q").exit_code == 0
    r = run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", store, "-q")
    assert r.exit_code == 0, r.output
    r = run("info", moments)  # `info` says so too (it said "complete")
    assert r.exit_code == 0 and "complete but stale: " in r.output and f"differ from its partials; `streambhmm " \
        f"moments compute {store} -o {moments} --samples H1` updates it" in r.output, r.output
    r = run("hmr", store, "--samples", "H1", "--moments", moments, "-o", tmp_path / "h.bed", "-q")
    advice = f"streambhmm moments compute {store} -o {moments} --samples H1`"
    assert r.exit_code == 1 and advice in r.output, r.output
    r = run("moments", store, "-o", moments, "-q")
    assert r.exit_code == 1 and "To update it, give its samples: --samples H1; for the moments of H1,IMR90, use " \
        "another --output." in r.output, r.output
    r = run("moments", store, "-o", moments, "--samples", "H1", "-q")
    assert r.exit_code == 0 and "dropped" in r.output, r.output
    r = run("info", moments)
    assert r.exit_code == 0 and "complete, written by" in r.output and "but stale" not in r.output, r.output


# -- item 15: model files with fields of the wrong type -----------------------------------------
@pytest.mark.parametrize("change,message", [
    ({"n_triples": "12"}, "n_triples must be a non-negative integer, got '12'"),
    ({"chromosomes": "chr21"}, "chromosomes must be a list of chromosome names, got 'chr21'"),
    ({"method": 3}, "method must be a string, got 3"),
    ({"startprob": ["0.5", "0.5"]}, "startprob must be a list of numbers (in lists), got ['0.5', '0.5']"),
    ({"loglik": "high"}, "loglik must be a number, got 'high'"),
    ({"bin_size": 0}, "bin_size must be a positive integer (bp), got 0"),
    ({"methylation_ci": [[0.1, 0.2]]}, "methylation_ci must be 2 x 1 x 2 numbers, got (1, 2)"),
])
def test_a_model_field_of_the_wrong_type_is_named(project, tmp_path, change, message):
    document = {**json.loads((project / "c.json").read_text()), **change}
    model = tmp_path / "bad.json"
    model.write_text(json.dumps(document))
    r = run("score", project / "c.zarr", "--model", model)
    assert r.exit_code == 1 and f"{model}: {message}" in r.output, r.output


def test_a_deeply_nested_model_file_is_refused_with_a_message(project, tmp_path):
    model = tmp_path / "deep.json"
    model.write_text("[" * 100_000 + "]" * 100_000)
    r = run("score", project / "c.zarr", "--model", model)
    assert r.exit_code == 1 and f"{model}: not a valid model file: JSON nested too deeply" in r.output, r.output


# -- minor: the umask's permissions; the leftovers of killed runs --------------------------------
def test_outputs_get_the_umasks_permissions(project, tmp_path):
    previous = os.umask(0o022)
    try:
        assert run("fit", project / "c.zarr", "-m", "2", "-o", tmp_path / "m.json", "-q").exit_code == 0
        assert run("decode", project / "c.zarr", "--model", tmp_path / "m.json", "-o", tmp_path / "s.bed",
                   "-q").exit_code == 0
        assert run("moments", project / "c.zarr", "-o", tmp_path / "m.zarr", "-q").exit_code == 0
    finally:
        os.umask(previous)
    for path in (tmp_path / "m.json", tmp_path / "s.states.tsv", tmp_path / "s.bed",
                 tmp_path / "m.zarr" / "manifest.json"):
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_decode_removes_the_temporaries_a_killed_decode_left_and_nothing_else(project, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    left = [tmp_path / ".s.bed.tmp-0123456789ab", tmp_path / ".s.states.tsv.tmp-ba9876543210"]
    for path in left:
        path.write_text("partial")
    kept = [tmp_path / ".s.bed.tmp-aaaaaaaaaaaa", tmp_path / ".s.bed.tmp-notours", tmp_path / ".s.bed.tmp-bbbbbbbbbbbb",
            tmp_path / ".other.bed.tmp-cccccccccccc"]
    kept[0].symlink_to(outside)  # a link is not followed, nor taken for ours
    for path in kept[1:]:
        path.write_text("kept")
    with open(kept[2]) as live:  # a running decode holds its temporary's lock
        fcntl.flock(live, fcntl.LOCK_EX)
        r = run("decode", project / "c.zarr", "--model", project / "c.json", "-o", tmp_path / "s.bed", "-q")
    assert r.exit_code == 0, r.output
    assert not any(p.exists() for p in left)
    assert all(p.is_symlink() or p.exists() for p in kept) and outside.read_text() == "not ours"


def test_report_removes_what_a_killed_report_left_and_nothing_else(project, tmp_path):
    out = tmp_path / "rep"
    args = ("report", project / "c.zarr", "--model", project / "c.json", "-o", out, "-q")
    assert run(*args).exit_code == 0
    stage = tmp_path / ".rep.tmp-0123456789ab"  # killed while drawing
    stage.mkdir()
    (stage / "methylation.png").write_bytes(b"png")
    (stage / ".segments.bed.tmp-0123456789ab").write_text("partial")
    aside = tmp_path / ".rep.old-0123456789ab"  # killed after setting the previous report aside
    aside.mkdir()
    for name in json.loads((out / REPORT_MARKER).read_text())["files"] + [REPORT_MARKER]:
        (aside / name).write_bytes((out / name).read_bytes())
    foreign = tmp_path / ".rep.tmp-aaaaaaaaaaaa"  # holds a file no report writes: left as it is
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep")
    (foreign / "index.html").write_text("page")
    r = run(*args)
    assert r.exit_code == 0, r.output
    assert not stage.exists() and not aside.exists()
    assert sorted(p.name for p in foreign.iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rep.tmp-aaaaaaaaaaaa", "rep"]


def test_no_command_writes_over_its_inputs_or_files_it_did_not_write(project, tmp_path):
    """Audit 3 (decode, fit, tracks): the model read, the stores read, a table or a track named
    after the output that another wrote, a sweep's model name holding a file of another's."""
    model = tmp_path / "m.json"
    model.write_text((project / "c.json").read_text())
    before = snapshot(project / "c.zarr")
    mine = {tmp_path / "s.states.tsv": "my table\n", tmp_path / "t.H1.methylation.bw": "my notes\n",
            tmp_path / "sweep.m2.json": "my model\n"}
    for path, text in mine.items():
        path.write_text(text)
    refused = [
        (("decode", project / "c.zarr", "--model", model, "-o", model), f"{model}: is {model}, which this command reads"),
        (("regions", project / "c.zarr", "--model", model, "--targets", "0", "-o", model),
         f"{model}: is {model}, which this command reads"),
        (("decode", project / "c.zarr", "--model", model, "-o", tmp_path / "s.bed"),
         "s.states.tsv: exists and does not begin"),
        (("decode", project / "c.zarr", "--model", model, "-o", project / "c.zarr" / "x.bed"), "is inside"),
        (("fit", project / "c.zarr", "-m", "2", "-o", project / "c.zarr" / "zarr.json"), "is inside"),
        (("fit", project / "c.zarr", "-m", "2,3", "-o", tmp_path / "sweep.json"),
         "sweep.m2.json: exists and does not begin"),
        (("tracks", project / "c.zarr", "-o", tmp_path / "t"), "t.H1.methylation.bw: exists and does not"),
        (("decode", project / "c.zarr", "--model", model, "-o", project / ".c.zarr.lock"),  # the helper's audit
         "the store's lock file, which commands on it share"),
    ]
    for args, message in refused:
        r = run(*args, "-q")
        assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, (args, r.output)
    assert model.read_text() == (project / "c.json").read_text() and snapshot(project / "c.zarr") == before
    assert all(path.read_text() == text for path, text in mine.items())
    assert not (tmp_path / "s.bed").exists() and not (tmp_path / "sweep.m3.json").exists()


@pytest.mark.parametrize("region, message", [
    ("chr21:100,000,000-100,050,000", "starts after the last bin of chr21"),
    ("chr21:1-1,000", "no bin of chr21 there has reads of H1"),
])
def test_a_report_of_a_view_without_data_is_refused_before_any_work(project, tmp_path, region, message):
    r = run("report", project / "c.zarr", "--model", project / "c.json", "-o", tmp_path / "r", "--region", region,
            "-q")
    assert r.exit_code == 1 and message in r.output, r.output
    assert not (tmp_path / "r").exists()


def test_two_outputs_named_alike_are_refused_before_any_work(tmp_path):
    # tracks names files after samples, keeping letters, digits and . _ - +: a'b and a;b met
    # at t.a_b.methylation.bw (the audit's run crashed half way, one sample's data under the
    # other's name); a pooled decode's BED of a sample named states.tsv was its states' table
    store = tmp_path / "c.zarr"
    for sample in ("a'b", "a;b", "states.tsv"):
        assert run("ingest", TSV, "--sample", sample, "--store", store, "-q").exit_code == 0
    r = run("tracks", store, "-o", tmp_path / "t", "--samples", "a'b,a;b", "-q")
    assert r.exit_code == 1, r.output
    assert "t.a_b.methylation.bw: both the methylation of a'b and the methylation of a;b would be written" in r.output
    r = run("fit", store, "-m", "2", "--pooled", "--samples", "a'b,states.tsv", "-o", tmp_path / "p.json", "-q")
    assert r.exit_code == 0, r.output
    r = run("decode", store, "--model", tmp_path / "p.json", "-o", tmp_path / "seg", "-q")
    assert r.exit_code == 1, r.output
    assert "seg.states.tsv: both the segments of states.tsv and the states' table would be written" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [".c.zarr.lock", "c.zarr", "p.json"]


def test_a_model_is_told_by_its_command_whatever_its_size(tmp_path):
    """`hmr --save-model` and `fit -o` replace only their own models; "call", the command's
    record, is the model's last key, past the first MiB of a model of 45,000 contigs (a
    helper's audit: the rerun was refused, and `fit` replaced hmr's model)."""
    from streambhmm.app.modelio import MODEL_FORMAT, model_head
    from streambhmm.io.outputs import HEAD_BYTES, _replaceable
    from streambhmm.io.storage import write_json

    contigs = [f"scaffold_{k:06d}_of_a_draft_assembly" for k in range(HEAD_BYTES // 30)]
    for name, call in (("hmr.json", {"command": "hmr", "target_states": [0]}), ("fit.json", None)):
        write_json(tmp_path / name, {"format": MODEL_FORMAT, "version": 1, "chromosomes": contigs,
                                     **({"call": call} if call else {})})
    assert (tmp_path / "hmr.json").stat().st_size > HEAD_BYTES
    assert _replaceable(tmp_path / "hmr.json", model_head("hmr")) and not _replaceable(tmp_path / "hmr.json", model_head())
    assert _replaceable(tmp_path / "fit.json", model_head()) and not _replaceable(tmp_path / "fit.json", model_head("pmd"))
    (tmp_path / "cut.json").write_bytes((tmp_path / "hmr.json").read_bytes()[:-10])  # not JSON: no one's
    assert not _replaceable(tmp_path / "cut.json", model_head("hmr"))
