import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from streambhmm.app.cli import main
from streambhmm.distributed.fitdata import load_moments
from streambhmm.io.ingest import ingest
from streambhmm.io.options import ReadOptions
from streambhmm.learn import refine as refine_module
from streambhmm.learn.selection import SweepProcessLost, sweep_fit, sweep_in_processes
from streambhmm.moments.spec import FeatureSpec
from streambhmm.moments.sums import compute_moments
from streambhmm.moments.momentstore import MomentStoreError, load_total, merge_moment_stores
from streambhmm.testing import assert_opens_with_xarray, update_moment_store
from streambhmm.testing import load_counts
from streambhmm.learn.simulate import model, simulate
from streambhmm.io.store import open_store

from ..conftest import STICKY, WELL_SEPARATED

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster



def write_tsv(path, chrom_rows):
    with open(path, "w") as fh:
        fh.write("chrom\tpos\tstrand\tmc\tcov\n")
        for chrom, (meth, cov) in chrom_rows.items():
            for i in np.flatnonzero(cov > 0):
                fh.write(f"{chrom}\t{100 * i + 1}\t+\t{meth[i]}\t{cov[i]}\n")
    return path


def simulated_chroms(four_state_model, lengths, seed, sample=0):
    sim = simulate(four_state_model, lengths, coverage=15, random_state=seed)
    bounds = np.cumsum([0, *lengths])
    return {f"chr{i + 1}": (sim.methylated[a:b, sample], sim.coverage[a:b, sample])
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def from_scratch(store_path, samples=None):
    meth, cov, lengths = load_counts(open_store(store_path), samples)
    return compute_moments(meth, cov, lengths)


def test_incremental_updates_equal_from_scratch(tmp_path, four_state_model, dask_clients):
    client = dask_clients[1]
    chroms = simulated_chroms(four_state_model, [3000, 2000, 1500], seed=1)
    f12 = write_tsv(tmp_path / "a12.tsv", {k: chroms[k] for k in ("chr1", "chr2")})
    f3 = write_tsv(tmp_path / "a3.tsv", {"chr3": chroms["chr3"]})
    store, out = tmp_path / "counts.zarr", tmp_path / "moments.zarr"
    ingest([f12], "A", store, chunk_size=400)
    first = update_moment_store(open_store(store), out, client)
    assert (first.computed, first.reused, first.dropped) == (13, 0, 0)  # 8 + 5 chunks

    # a chromosome is added: only its chunks are computed
    ingest([f12, f3], "A", store)
    second = update_moment_store(open_store(store), out, client)
    assert (second.computed, second.reused, second.dropped) == (4, 13, 0)
    assert load_total(out)[0].allclose(from_scratch(store), rtol=1e-12)

    # files replaced with a change late in chr2: chunks from there on are recomputed
    meth2, cov2 = chroms["chr2"]
    changed = {"chr1": chroms["chr1"], "chr2": (meth2.copy(), cov2.copy()), "chr3": chroms["chr3"]}
    changed["chr2"][1][1500] += 5
    ingest([write_tsv(tmp_path / "changed.tsv", changed)], "A", store)
    third = update_moment_store(open_store(store), out, client)
    assert third.computed in (1, 2) and third.dropped == third.computed
    assert third.computed + third.reused == 17
    total, manifest = load_total(out)
    assert total.allclose(from_scratch(store), rtol=1e-12)
    assert manifest["complete"] and len(manifest["partials"]) == 17

    # nothing changed: nothing computed
    again = update_moment_store(open_store(store), out, client)
    assert (again.computed, again.dropped) == (0, 0)


def test_adding_a_sample_leaves_the_partials_of_other_selections_valid(tmp_path, four_state_model, dask_clients):
    """Partial digests cover only the selected samples' columns of a fixed chunk: a third
    sample (reaching further along chr1) changes nothing for `moments --samples A,B`."""
    client = dask_clients[1]
    store, out = tmp_path / "counts.zarr", tmp_path / "ab.zarr"
    for s, name in enumerate("AB"):
        ingest([write_tsv(tmp_path / f"{name}.tsv", simulated_chroms(four_state_model, [3000, 900], seed=s))],
               name, store, chunk_size=400)
    first = update_moment_store(open_store(store), out, client, ["A", "B"])
    digests = [p["digest"] for p in json.loads((out / "manifest.json").read_text())["partials"]]
    ingest([write_tsv(tmp_path / "C.tsv", simulated_chroms(four_state_model, [5000, 900], seed=7))], "C", store)
    again = update_moment_store(open_store(store), out, client, ["A", "B"])
    assert (again.computed, again.reused, again.dropped) == (0, first.computed, 0)
    assert [p["digest"] for p in json.loads((out / "manifest.json").read_text())["partials"]] == digests
    assert load_total(out)[0].allclose(from_scratch(store, ["A", "B"]), rtol=1e-12)


def test_killed_run_resumes_to_the_same_totals(tmp_path, four_state_model, scheduler):
    store = tmp_path / "counts.zarr"
    for s in (0, 1):  # two samples make each partial slower to compute
        sim_rows = simulated_chroms(four_state_model, [10000, 10000], seed=2, sample=s)
        ingest([write_tsv(tmp_path / f"s{s}.tsv", sim_rows)], f"S{s}", store, chunk_size=500)
    out = tmp_path / "moments.zarr"
    bins = ["--bins", "10"]  # small partials: the test is about resuming, not about their size
    cmd = [sys.executable, "-m", "streambhmm.app.cli", "moments", str(store), "--output", str(out), *bins,
           "--scheduler", scheduler, "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = list((out / "partials").glob("*/0*")) if (out / "partials").exists() else []
        if len(done) >= 10:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_chunks = 40
    manifest = out / "manifest.json"
    killed_midway = not manifest.exists() or not json.loads(manifest.read_text())["complete"]
    assert killed_midway, "the run finished before it could be killed; make it longer"
    with pytest.raises(MomentStoreError, match="is incomplete"):
        load_total(out)
    time.sleep(1.0)  # let tasks of the dead client drain
    r = run("moments", store, "--output", out, *bins, "--scheduler", scheduler, "--quiet")
    assert r.exit_code == 0, r.output
    reused = int(r.output.split("reused ")[1].split(",")[0])
    assert reused >= 10
    resumed, _ = load_total(out)
    uninterrupted = tmp_path / "fresh.zarr"  # in this process: the workers change nothing
    assert run("moments", store, "--output", uninterrupted, *bins, "-q").exit_code == 0
    fresh, manifest = load_total(uninterrupted)
    assert len(manifest["partials"]) == n_chunks
    assert resumed.allclose(fresh, rtol=1e-12)
    np.testing.assert_array_equal(resumed.p123, fresh.p123)  # same partials, same tree: bitwise


@pytest.fixture(scope="module")
def built_moment_store(tmp_path_factory, dask_clients):
    """A counts store and its moment store, built once for the module's tests (most of their
    time went into building them): the tests read the counts store and never change it."""
    root = tmp_path_factory.mktemp("moment_store")
    chroms = simulated_chroms(model(WELL_SEPARATED, STICKY), [4000, 3000], seed=3)
    store = root / "counts.zarr"
    ingest([write_tsv(root / "a.tsv", chroms)], "A", store, chunk_size=1000)
    out = root / "moments.zarr"
    update_moment_store(open_store(store), out, dask_clients[0], block_size=50_000)  # 14 blocks
    return store, out


@pytest.fixture
def moment_store(tmp_path, built_moment_store):
    """The module's counts store, and a copy of its moment store for this test to change."""
    store, built = built_moment_store
    out = tmp_path / "moments.zarr"
    shutil.copytree(built, out, symlinks=True)
    return store, out


def test_a_moment_store_opens_with_xarray(built_moment_store):
    """The standard's "real Zarr stores that open with plain xarray.open_zarr": partials/ and
    partials/<chrom>/ are groups, and every array names its dimensions."""
    assert_opens_with_xarray(built_moment_store[1])


def test_an_update_from_other_counts_is_refused_and_loses_nothing(tmp_path, moment_store, dask_clients):
    """A typo in STORE: updating would drop every partial as stale, and a moment store may be
    the only copy of its moments (a fit needs nothing else)."""
    store, out = moment_store
    elsewhere = tmp_path / "copy.zarr"
    shutil.copytree(store, elsewhere)
    before = (out / "manifest.json").read_text()
    with pytest.raises(MomentStoreError, match=f"was computed from {store} \\(100 bp bins\\), not from {elsewhere} "
                                               f"\\(100 bp bins\\); updating it would drop its partials"):
        update_moment_store(open_store(elsewhere), out, dask_clients[0])
    assert (out / "manifest.json").read_text() == before
    assert update_moment_store(open_store(store), out, dask_clients[0]).computed == 0


def test_finishing_an_interrupted_store_is_not_called_a_no_op(moment_store, scheduler):
    store, out = moment_store
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))  # as a killed run leaves it
    r = run("moments", "compute", store, "-o", out, "--scheduler", scheduler, "-q")
    assert r.exit_code == 0 and "the moment store is complete now" in r.output, r.output
    r = run("moments", "compute", store, "-o", out, "--scheduler", scheduler, "-q")
    assert r.exit_code == 0 and "nothing changed: the moment store was already up to date" in r.output, r.output


def test_fit_from_moment_store_without_counts(tmp_path, moment_store, scheduler):
    shared, out = moment_store
    store = shutil.copytree(shared, tmp_path / "counts.zarr")  # removed below
    assert run("fit", store, "--states", "4", "-o", tmp_path / "from_counts.json", "--scheduler", scheduler,
               "-q").exit_code == 0
    shutil.rmtree(store)
    r = run("fit", out, "--states", "4", "-o", tmp_path / "from_moments.json")
    assert r.exit_code == 0, r.output
    a = json.loads((tmp_path / "from_counts.json").read_text())
    b = json.loads((tmp_path / "from_moments.json").read_text())
    # a moment store records its counts' bin size, not how their samples were read
    assert [k for k in a if k != "sample_settings"] == list(b)
    for key in ("n_triples", "samples", "chromosomes", "feature", "bin_size"):
        assert a[key] == b[key]
    for key in ("methylation", "transmat", "startprob"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-9)


def test_sweep_and_bootstrap(tmp_path, moment_store):
    _, out = moment_store
    r = run("fit", out, "--states", "2-5", "-o", tmp_path / "model.json")
    assert r.exit_code == 0, r.output
    assert "singular values of P13" in r.output and "M = 3:" in r.output
    assert sorted(p.name for p in tmp_path.glob("model.m*.json")) == ["model.m2.json", "model.m3.json",
                                                                      "model.m4.json", "model.m5.json"]
    # the data hold 4 states: the held-out criterion stops improving beyond them
    assert re.search(r"recommended: M = 4: the smallest M whose held-out criterion", r.output), r.output
    # its spectrum supports it, so no word of the spectrum follows (spectrum_note)
    assert re.search(r"^\s+4\s+supported\s", r.output, re.M) and "spectrum is below noise" not in r.output, r.output
    r = run("fit", out, "--states", "4", "--bootstrap", "12", "-o", tmp_path / "boot.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "boot.json").read_text())
    ci, tci = np.array(doc["methylation_ci"]), np.array(doc["transmat_ci"])
    assert ci.shape == (4, 1, 2) and tci.shape == (4, 4, 2)
    assert (ci[..., 0] <= ci[..., 1]).all() and (tci[..., 0] <= tci[..., 1]).all()
    point = np.array(doc["methylation"])
    assert ((ci[..., 0] - 1e-9 <= point) & (point <= ci[..., 1] + 1e-9)).mean() >= 0.75
    assert "95% CI" in r.output and "stay 95% CI" in r.output
    assert "only 14 blocks of 50,000 bp" in r.output  # few blocks: a warning


def test_a_sweep_in_worker_processes_fits_what_one_process_fits(built_moment_store):
    """`fit --states` fits its numbers of states in a process per core, one thread each: the
    same models and held-out criteria, bitwise, as fitting each here in threads."""
    _, out = built_moment_store
    data = load_moments(out, None, FeatureSpec(), None, quiet=True, want_blocks=True)
    states = [2, 3]
    here = [sweep_fit(data.moments, data.blocks, m, 0, False, "betabinomial") for m in states]
    there = list(sweep_in_processes(data.moments, data.blocks, states, 0, False, "betabinomial", processes=2))
    assert [fit.m for fit in there] == states
    for a, b in zip(here, there):
        assert a.estimator is not None and a.held_out is not None
        assert (a.refused, a.warnings, a.held_out) == (b.refused, b.warnings, b.held_out)
        for name in ("methylation_", "transmat_", "startprob_", "dispersion_", "loss_"):
            np.testing.assert_array_equal(getattr(a.estimator, name), getattr(b.estimator, name))
        assert a.estimator.starts_ == b.estimator.starts_


def test_moments_are_loaded_under_the_moment_stores_lock(built_moment_store):
    """An update of the moment store (`moments compute`, its lock exclusive) and a load do not
    overlap: a helper's audit loaded a store half updated (a partial without its manifest
    entry; given more time, moments of a replaced sample passed the check)."""
    import threading

    from streambhmm.io.store import locked

    out = built_moment_store[1]
    loaded = []
    with locked(out):  # an update holds it
        reader = threading.Thread(target=lambda: loaded.append(load_moments(out, None, FeatureSpec(), None, True)))
        reader.start()
        reader.join(2.0)
        assert not loaded and reader.is_alive()  # waits for the update
    reader.join()
    assert len(loaded) == 1 and loaded[0].moments.n_triples > 0


def test_a_reader_that_holds_the_lock_takes_it_again_at_once(built_moment_store, tmp_path):
    """`hmr --moments` holds the moment store's shared lock and loads the moments, which take
    it again. Where the store looks as if it needs recovery that recovery leaves alone (a
    staging folder with a link in it), a second descriptor's lock waited on the first for ever
    (a helper's audit); a lock this process holds is now held already."""
    import threading

    from streambhmm.io.store import locked

    out = tmp_path / "moments.zarr"
    shutil.copytree(built_moment_store[1], out)
    staging = tmp_path / "moments.zarr.ingest-abc000000000"
    staging.mkdir()
    (staging / "COMMIT.json").write_text("{}")
    (staging / "link").symlink_to("/etc/hostname")
    loaded = []

    def load():
        with locked(out, shared=True):
            loaded.append(load_moments(out, None, FeatureSpec(), None, True))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(120)  # a hang's guard, not a time limit: the load takes well under a second
    assert not reader.is_alive() and len(loaded) == 1
    assert (staging / "link").is_symlink()  # recovery left what it does not recognise


def test_a_moment_stores_partials_of_some_chromosomes(built_moment_store):
    """The sums of chromosomes chosen by any iterable (helper 86: a generator was spent on the
    partials, and the FitData named no chromosome); none of them: zero moments, not an error."""
    store, out = built_moment_store
    whole = load_moments(out, None, FeatureSpec(), None, quiet=True)
    chr1 = load_moments(out, None, FeatureSpec(), None, quiet=True, chromosomes=(c for c in ["chr1"]))
    alone = from_scratch(store)
    assert chr1.chromosomes == ["chr1"] and whole.chromosomes == ["chr1", "chr2"]
    assert 0 < chr1.moments.n_triples < whole.moments.n_triples == alone.n_triples
    none = load_moments(out, None, FeatureSpec(), None, quiet=True, chromosomes=iter(["chrX"]))
    assert none.chromosomes == [] and none.moments.n_triples == 0


def test_a_sweep_closed_before_its_last_fit_ends_its_worker_processes_at_once(built_moment_store):
    """Ctrl-C, SIGTERM or an error writing a model close the sweep (its caller's contextlib.closing):
    its workers are terminated then, not left to run their fits (a stop waited 20-25 s for them on
    a genome's moments), nor left waiting for more (the interpreter's exit then hung joining them)."""
    data = load_moments(built_moment_store[1], None, FeatureSpec(), None, quiet=True, want_blocks=True)
    before = set(multiprocessing.active_children())
    sweep = sweep_in_processes(data.moments, data.blocks, [2, 3, 4, 5], 0, False, "betabinomial", processes=2)
    assert next(sweep).m == 2
    workers = set(multiprocessing.active_children()) - before
    assert len(workers) == 2
    sweep.close()
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2
    assert not set(multiprocessing.active_children()) - before


def test_a_sweep_stopped_while_a_model_is_shown_ends_its_worker_processes(built_moment_store, tmp_path,
                                                                          monkeypatch):
    """The command closes its sweep when it stops: before, a Ctrl-C that came while a model was
    being written or shown left the sweep's generator open, and its processes ran on."""
    monkeypatch.setattr(refine_module, "_fit_threads", 2)  # a process per fit even on one core

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules["streambhmm.app.cli.fit"], "show", interrupted)  # (the command shadows it)
    before = set(multiprocessing.active_children())
    r = run("fit", built_moment_store[1], "--states", "2-5", "-o", tmp_path / "model.json")
    assert r.exit_code == 128 + signal.SIGINT and "Aborted!" in r.output, r.output
    assert not set(multiprocessing.active_children()) - before
    assert not list(tmp_path.glob("model*"))


class _EndsTheProcessThatLoadsIt:
    def __reduce__(self):
        return os._exit, (3,)


def test_a_sweep_whose_worker_process_dies_says_so(built_moment_store):
    data = load_moments(built_moment_store[1], None, FeatureSpec(), None, quiet=True)
    with pytest.raises(SweepProcessLost, match="a worker process of the sweep ended before its fit of 2 states "
                                               r"was done \(killed, or out of memory\?\)"):
        list(sweep_in_processes(data.moments, _EndsTheProcessThatLoadsIt(), [2, 3], 0, False, "betabinomial", 2))


def test_a_sweep_hands_its_workers_a_file_not_the_data(built_moment_store, monkeypatch):
    """Spawning writes a worker's arguments into a pipe whose reading end the parent holds
    until the write ends: arguments beyond the pipe's buffer (64 KiB) hung a test run for good
    when the worker died before reading them. The moments go through a file instead, removed
    after the sweep."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    data = load_moments(built_moment_store[1], None, FeatureSpec(), None, quiet=True)
    assert len(pickle.dumps(data.moments)) > 1 << 16  # what would have gone through the pipe
    real_init, seen = ProcessPoolExecutor.__init__, []

    def init(self, *args, initargs=(), **kwargs):
        seen.append(initargs)
        real_init(self, *args, initargs=initargs, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "__init__", init)
    assert len(list(sweep_in_processes(data.moments, None, [2], 0, False, "binomial", 1))) == 1
    assert len(seen) == 1 and len(pickle.dumps(seen[0])) < 1 << 12
    assert not Path(seen[0][0]).exists()


def test_a_sweep_makes_its_pool_again_when_spawning_meets_cpythons_descriptor_race(built_moment_store,
                                                                                   monkeypatch):
    """Spawning a worker failed once in a test run with "bad value(s) in fds_to_keep" (another
    thread closed a descriptor whose number was reused): the pool is made once more, and only
    for that error."""
    from concurrent.futures import ProcessPoolExecutor

    data = load_moments(built_moment_store[1], None, FeatureSpec(), None, quiet=True)
    real_submit, calls = ProcessPoolExecutor.submit, []

    def submit(self, *args, **kwargs):
        calls.append(self)
        if len(set(calls)) == 1:  # the first pool
            raise ValueError("bad value(s) in fds_to_keep")
        return real_submit(self, *args, **kwargs)

    monkeypatch.setattr(ProcessPoolExecutor, "submit", submit)
    fits = list(sweep_in_processes(data.moments, None, [2], 0, False, "binomial", 1))
    assert len(fits) == 1 and len(set(calls)) == 2
    calls.clear()
    monkeypatch.setattr(ProcessPoolExecutor, "submit", lambda self, *a, **k: calls.append(self) or
                        (_ for _ in ()).throw(ValueError("another error")))
    with pytest.raises(ValueError, match="another error"):
        list(sweep_in_processes(data.moments, None, [2], 0, False, "binomial", 1))
    assert len(set(calls)) == 1


def test_a_sweep_on_too_few_blocks_says_why_it_recommends_nothing(tmp_path, four_state_model, dask_clients):
    chroms = simulated_chroms(four_state_model, [4000, 3000], seed=4)
    store = tmp_path / "counts.zarr"
    ingest([write_tsv(tmp_path / "a.tsv", chroms)], "A", store, chunk_size=100_000)
    out = tmp_path / "moments.zarr"
    update_moment_store(open_store(store), out, dask_clients[0], block_size=100_000)
    r = run("fit", out, "--states", "2-3", "-o", tmp_path / "model.json")
    assert r.exit_code == 0, r.output
    assert "no recommendation: no held-out criterion: too few blocks: 7 of 100,000 bp, and 5 held-out folds need " \
           "at least 10 (a smaller --block-size gives more: `fit` of a counts store takes one, a moment store " \
           "has the one `moments compute --block-size` gave it)" in r.output


def test_bootstrap_intervals_have_width_on_a_store_of_one_chunk_per_chromosome(tmp_path, four_state_model,
                                                                               dask_clients):
    chroms = simulated_chroms(four_state_model, [4000, 3000], seed=4)
    store = tmp_path / "counts.zarr"
    ingest([write_tsv(tmp_path / "a.tsv", chroms)], "A", store, chunk_size=100_000)
    out = tmp_path / "moments.zarr"
    update_moment_store(open_store(store), out, dask_clients[0], block_size=25_000)
    assert len(json.loads((out / "manifest.json").read_text())["partials"]) == 2  # one chunk per chromosome
    r = run("fit", out, "--states", "4", "--bootstrap", "20", "-o", tmp_path / "boot.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "boot.json").read_text())
    width = np.diff(np.array(doc["methylation_ci"]), axis=-1)
    assert (width > 1e-4).all()
    assert "20 replicates of 28 blocks of 25,000 bp" in r.output


def test_bootstrap_refuses_too_few_blocks(tmp_path, moment_store, dask_clients):
    store, _ = moment_store
    out = tmp_path / "coarse.zarr"
    update_moment_store(open_store(store), out, dask_clients[0])  # 1 Mb blocks: 2 of them
    r = run("fit", out, "--states", "4", "--bootstrap", "20", "-o", tmp_path / "boot.json")
    assert r.exit_code != 0 and "only 2 block(s) of 1,000,000 bp to resample" in r.output
    assert not (tmp_path / "boot.json").exists()


def first_partial(out):
    return sorted((out / "partials").glob("*/*"))[0]


@pytest.mark.parametrize("damage,message", [
    ("corrupt", "is corrupted: its checksum does not match"),
    ("truncate", "is corrupted|unreadable or truncated"),
    ("remove", "listed in the manifest is missing"),
    ("unlist", "has no manifest entry"),
    ("newer", "newer than this streambhmm supports"),
    ("older", "format version 1 lacks the histograms .* rerun `streambhmm moments`"),
])
def test_integrity_errors_name_the_partial_or_setting(moment_store, damage, message):
    _, out = moment_store
    partial = first_partial(out)
    chunk_file = next(p for p in (partial / "p123").rglob("*") if p.is_file() and p.name != "zarr.json")
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if damage == "corrupt":
        data = bytearray(chunk_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        chunk_file.write_bytes(bytes(data))
    elif damage == "truncate":
        chunk_file.write_bytes(chunk_file.read_bytes()[:10])
    elif damage == "remove":
        shutil.rmtree(partial)
    elif damage == "unlist":
        manifest["partials"] = manifest["partials"][1:]
        manifest_path.write_text(json.dumps(manifest))
    elif damage in ("newer", "older"):
        manifest["format_version"] = 99 if damage == "newer" else 1
        manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(MomentStoreError, match=message) as info:
        load_total(out)
    if damage in ("corrupt", "truncate", "remove", "unlist"):
        assert partial.name in str(info.value) or "chunk 0" in str(info.value)
    r = run("fit", out, "--states", "2", "-o", out.parent / "m.json")
    assert r.exit_code != 0 and r.output.strip()


def test_damaged_partial_is_recomputed_by_the_next_run(moment_store, dask_clients):
    store, out = moment_store
    before, _ = load_total(out)
    chunk_file = next(p for p in (first_partial(out) / "p12").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk_file.write_bytes(b"garbage")
    report = update_moment_store(open_store(store), out, dask_clients[0])
    assert report.computed == 1
    assert load_total(out)[0].allclose(before, rtol=0)


def test_mismatched_settings_are_refused(moment_store, dask_clients, tmp_path):
    store, out = moment_store
    with pytest.raises(MomentStoreError, match=r"mismatched feature settings: the moment store has n_bins 30 \(this run: 20\)"):
        update_moment_store(open_store(store), out, dask_clients[0], n_bins=20)
    r = run("fit", out, "--states", "2", "--bins", "20", "-o", tmp_path / "m.json")
    assert r.exit_code != 0 and "--bins 30" in r.output


def test_merge_equals_single_store_and_refuses_overlaps(tmp_path, four_state_model, dask_clients):
    client = dask_clients[1]
    chroms = simulated_chroms(four_state_model, [2500, 1800], seed=4)
    both = tmp_path / "both.zarr"
    ingest([write_tsv(tmp_path / "all.tsv", chroms)], "A", both, chunk_size=500)
    parts = []
    for name in ("chr1", "chr2"):
        counts = tmp_path / f"{name}.zarr"
        ingest([write_tsv(tmp_path / f"{name}.tsv", {name: chroms[name]})], "A", counts, chunk_size=500)
        update_moment_store(open_store(counts), tmp_path / f"m_{name}.zarr", client)
        parts.append(tmp_path / f"m_{name}.zarr")
    update_moment_store(open_store(both), tmp_path / "m_both.zarr", client)
    result = merge_moment_stores(parts, tmp_path / "merged.zarr")
    assert result["partials"] == 9 and result["duplicates"] == 0
    assert_opens_with_xarray(tmp_path / "merged.zarr")
    merged, _ = load_total(tmp_path / "merged.zarr")
    single, _ = load_total(tmp_path / "m_both.zarr")
    np.testing.assert_array_equal(merged.p123, single.p123)  # same partials in the same order
    # an overlapping copy is counted once
    r = run("moments", "merge", tmp_path / "merged.zarr", parts[0], "--output", tmp_path / "again.zarr")
    assert r.exit_code == 0 and "5 duplicate partial(s) kept once" in r.output
    assert load_total(tmp_path / "again.zarr")[0].allclose(single, rtol=0)
    def moments_of(name, rows, moments=None, **settings):
        """The moment store (m_NAME.zarr, or ``moments``) of a new counts store NAME.zarr of ``rows``."""
        ingest([write_tsv(tmp_path / f"{name}.tsv", rows)], "A", tmp_path / f"{name}.zarr", **settings)
        out = tmp_path / (moments or f"m_{name}.zarr")
        update_moment_store(open_store(tmp_path / f"{name}.zarr"), out, client)
        return out

    # a chromosome from another counts store (another chunking: its chunk indices mean other
    # bins) is refused, as are other bin sizes, other settings and a chunk with other contents
    other = moments_of("other", {"chr1": chroms["chr1"]}, chunk_size=2000)
    with pytest.raises(MomentStoreError, match="both hold moments of chr1, of the counts stores .*chr1.zarr and "
                                               ".*other.zarr: merging would count it twice"):
        merge_moment_stores([parts[0], other], tmp_path / "bad.zarr")
    coarse = moments_of("coarse", {"chr2": chroms["chr2"]}, bin_size=200, chunk_size=500)
    with pytest.raises(MomentStoreError, match="different bin sizes: .*m_chr1.zarr has 100 bp bins, .*has 200"):
        merge_moment_stores([parts[0], coarse], tmp_path / "bad1.zarr")
    update_moment_store(open_store(both), tmp_path / "m_d20.zarr", client, n_bins=20)
    with pytest.raises(MomentStoreError, match="incompatible feature settings"):
        merge_moment_stores([parts[0], tmp_path / "m_d20.zarr"], tmp_path / "bad2.zarr")
    first = tmp_path / "first.zarr"
    shutil.copytree(tmp_path / "m_chr1.zarr", first)
    ingest([write_tsv(tmp_path / "chr1b.tsv", {"chr1": (chroms["chr2"][0][:2500], chroms["chr2"][1][:2500])})],
           "A", tmp_path / "chr1.zarr")  # the same store, other counts
    update_moment_store(open_store(tmp_path / "chr1.zarr"), tmp_path / "m_chr1.zarr", client)
    with pytest.raises(MomentStoreError, match="both hold chr1 chunk 0 with different contents"):
        merge_moment_stores([first, tmp_path / "m_chr1.zarr"], tmp_path / "bad3.zarr")
    # the same store rebuilt with other chunks: its chunk indices mean other bins (the audit of
    # merge: 144 triples where there are 72)
    shutil.rmtree(tmp_path / "chr1.zarr")
    rebuilt = moments_of("chr1", {"chr1": chroms["chr1"]}, "m_chr1_700.zarr", chunk_size=700)
    with pytest.raises(MomentStoreError, match="both hold moments of chr1 of .*chr1.zarr, in chunks of 500 and 700 "
                                               "bins"):
        merge_moment_stores([parts[0], rebuilt], tmp_path / "bad4.zarr")
    # one chromosome spelt two ways, from two counts stores of the same reads
    ensembl = moments_of("ensembl", {"1": chroms["chr1"]}, chunk_size=500)
    with pytest.raises(MomentStoreError, match="has chromosome 1, but .*m_chr1.zarr spells it chr1: .*Merging would "
                                               "count it twice"):
        merge_moment_stores([parts[0], ensembl], tmp_path / "bad5.zarr")
    # another chromosome of the sample, read with another --min-coverage: other reads counted
    filtered = moments_of("filtered", {"chr2": chroms["chr2"]}, chunk_size=500, options=ReadOptions(min_coverage=3))
    with pytest.raises(MomentStoreError, match="m_chr1.zarr and .*m_filtered.zarr hold sample A read with other "
                                               "settings \\(min_coverage 1 against 3\\)"):
        merge_moment_stores([parts[0], filtered], tmp_path / "bad6.zarr")
    with pytest.raises(ValueError, match="m_chr2.zarr/inside.zarr: is inside .*m_chr2.zarr, which this command reads"):
        merge_moment_stores(parts, parts[1] / "inside.zarr")
    assert not any((tmp_path / f"bad{k}.zarr").exists() for k in ("", 1, 2, 3, 4, 5, 6))
    assert not (parts[1] / "inside.zarr").exists()
    source = json.loads((tmp_path / "merged.zarr" / "manifest.json").read_text())["source"]
    assert source["bin_size"] == 100
    # a format without contexts (tsv): --context all reads the rows CG does, so the two merge
    assert source["reading"] == {"A": {"context": None, "merge_strands": False, "min_coverage": 1}}
    every = moments_of("every", {"chr2": chroms["chr2"]}, chunk_size=500, context="all")
    assert load_total(every)[0].allclose(load_total(parts[1])[0], rtol=0)  # the same rows
    assert merge_moment_stores([parts[0], every], tmp_path / "all_and_cg.zarr")["chromosomes"] == ["chr1", "chr2"]


def test_a_partial_swapped_for_another_chunks_is_refused(moment_store, dask_clients):
    """Audit 2: each partial is self-consistent, but not the one the manifest names."""
    store, out = moment_store
    manifest = json.loads((out / "manifest.json").read_text())
    a, b = (out / e["path"] for e in manifest["partials"][:2])
    swap = a.parent / "swap"
    a.rename(swap), b.rename(a), swap.rename(b)
    with pytest.raises(MomentStoreError, match="is not the partial it should be"):
        load_total(out)
    # the next run does not reuse them: it recomputes both and the totals are right again
    report = update_moment_store(open_store(store), out, dask_clients[0])
    assert report.computed == 2
    assert load_total(out)[0].allclose(from_scratch(store), rtol=1e-12)


@pytest.mark.parametrize("edit,message", [
    (lambda m: m["partials"].append(dict(m["partials"][0])), "listed twice"),
    (lambda m: m["partials"][0].update(path="../evil_src/p"), "does not name a partial of this store"),
    (lambda m: m["partials"][0].update(chromosome="..", path="partials/../x"), "does not name a partial"),
    (lambda m: m["partials"][0].pop("sha256"), "partial entry 0 is malformed"),
    (lambda m: m.pop("partials"), "'partials' is missing or not a list"),
    (lambda m: m.update(format_version="3"), "format_version is not an integer"),
])
def test_crafted_manifests_are_refused_before_any_path_is_used(moment_store, tmp_path, edit, message):
    """Audit 2, 9 and 16: duplicates, paths outside the store, malformed entries."""
    _, out = moment_store
    manifest = json.loads((out / "manifest.json").read_text())
    edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(MomentStoreError, match=message):
        load_total(out)
    with pytest.raises(MomentStoreError, match=message):
        merge_moment_stores([out], tmp_path / "merged.zarr")
    assert not (tmp_path / "merged.zarr").exists() and not (tmp_path / "evil_src").exists()


def test_a_manifest_that_is_not_an_object_is_not_a_traceback(moment_store):
    _, out = moment_store
    (out / "manifest.json").write_text("[1, 2, 3]")
    with pytest.raises(MomentStoreError, match="not a streambhmm moment store"):
        load_total(out)


def test_a_partial_that_cannot_be_removed_stops_the_run(moment_store, monkeypatch):
    """Audit 18: a damaged or stale partial left on disk (read-only, say) would be read later."""
    from streambhmm.moments.momentstore import _remove
    from streambhmm.io.storage import Location

    _, out = moment_store
    partial = Location.of(first_partial(out))
    monkeypatch.setattr(Location, "rmtree", lambda self: None)  # as if permission were denied
    with pytest.raises(MomentStoreError, match="could not remove the damaged partial .*check its permissions"):
        _remove(partial, "damaged")


def test_clean_up_follows_no_symbolic_link_and_removes_only_its_partials(tmp_path, moment_store):
    """Issue 25, item 2: `ln -s /some/dir m.zarr/partials/chrX` made `moments` delete the
    directories in /some/dir as stale partials. Clean-up now follows no link, and leaves
    (with a warning) whatever is not one of its partials."""
    store, out = moment_store
    outside = tmp_path / "outside"
    lookalike = outside / ("000000-" + "0" * 32)  # named as a partial, with a zarr.json
    lookalike.mkdir(parents=True)
    (lookalike / "zarr.json").write_text("{}")
    (outside / "keep").mkdir()
    (outside / "keep" / "file").write_text("precious")
    os.symlink(outside, out / "partials" / "chrX")
    os.symlink(lookalike, out / "partials" / "chr1" / ("000099-" + "1" * 32))
    (out / "partials" / "chr1" / "notes.txt").write_text("mine")
    stale = out / "partials" / "chr2" / ("000098-" + "2" * 32)
    shutil.copytree(first_partial(out), stale)  # one of ours, no longer in the plan

    r = run("moments", store, "--output", out)
    assert r.exit_code == 0, r.output
    assert "dropped 1 stale" in r.output and not stale.exists()
    assert (outside / "keep" / "file").read_text() == "precious" and (lookalike / "zarr.json").exists()
    assert (out / "partials" / "chr1" / "notes.txt").read_text() == "mine"
    for entry in ("chrX", "chr1/notes.txt", "chr1/000099-" + "1" * 32):
        assert f"warning: left {out / 'partials' / entry} alone: not a partial of the moment store" in r.output
    assert "zarr.json" not in r.output  # the groups' metadata are the store's own
    assert load_total(out)[0].allclose(from_scratch(store), rtol=1e-12)

    # a chromosome the run writes into, through a link: refused before any task
    shutil.rmtree(out / "partials" / "chr2")
    os.symlink(outside, out / "partials" / "chr2")
    r = run("moments", store, "--output", out)
    assert r.exit_code == 1 and f"Error: {out / 'partials' / 'chr2'} is a symbolic link" in r.output, r.output
    assert sorted(p.name for p in outside.iterdir()) == ["000000-" + "0" * 32, "keep"]


def test_an_output_that_is_a_link_or_another_directory_is_refused_leaving_nothing(moment_store, tmp_path):
    # the audit: a link to an empty directory gave a traceback and left a staging directory
    # beside it; a directory of the user's was refused but got a lock file beside it
    store, _ = moment_store
    tmp_path = tmp_path / "outputs"
    tmp_path.mkdir()
    (tmp_path / "empty").mkdir()
    os.symlink(tmp_path / "empty", tmp_path / "link")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = run("moments", store, "--output", tmp_path / "link", "-q")
    assert r.exit_code == 1 and f"Error: {tmp_path / 'link'} is a symbolic link; give the directory itself" in r.output
    r = run("moments", store, "--output", tmp_path / "mine", "-q")
    assert r.exit_code == 1 and f"Error: {tmp_path / 'mine'} exists and is not a moment store" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "link", "mine"]
    assert not list((tmp_path / "empty").iterdir()) and (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("inside", ["", "chr1/moments.zarr"])
def test_moments_refuses_an_output_overlapping_the_counts_store(moment_store, inside):
    """Issue 25, item 11: `moments c.zarr --output c.zarr` waited forever for its own lock."""
    store, _ = moment_store
    output = store / inside if inside else store
    proc = subprocess.run([sys.executable, "-m", "streambhmm", "moments", str(store), "--output", str(output)],
                          capture_output=True, text=True, timeout=300)
    if inside:  # refused as the options are read: no store is made inside a counts store
        assert proc.returncode == 2 and f"{output}: is inside the counts store {store}" in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"Error: --output {output} and the counts store {store} overlap" in proc.stderr
    assert not (store / "chr1" / "moments.zarr").exists()


@pytest.mark.parametrize("command", ["moments", "fit"])
def test_block_size_has_a_minimum(tmp_path, moment_store, command):
    """Issue 25: --block-size 1 made every bin a block of its own, and the moment store 52x larger."""
    store, _ = moment_store
    output = tmp_path / ("m.zarr" if command == "moments" else "model.json")
    extra = ["--states", "4", "--bootstrap", "5"] if command == "fit" else []
    r = run(command, store, "--output", output, "--block-size", "1", *extra)
    assert r.exit_code == 1
    assert ("Error: --block-size 1 bp is below the minimum of 5,000 bp (50 bins of 100 bp): every block keeps its "
            "own statistics") in r.output
    assert not output.exists()
    assert run("moments", store, "--output", output.with_suffix(".ok"), "--block-size", "5000").exit_code == 0


def test_the_reading_of_a_sample_ingested_with_columns():
    """A store's record of --columns is a mapping of roles: reading it raised "too many values
    to unpack" (found in review); with a context column the context is part of the reading."""
    from streambhmm.moments.momentstore import reading_of

    options = {"merge_strands": False, "min_coverage": 1}
    plain = {"chrom": 1, "pos": 2, "meth": 3, "total": 4}
    assert reading_of({"format": "columns", "context": "CG", "options": {**options, "columns": plain}}) == \
        {"context": None, "merge_strands": False, "min_coverage": 1}
    with_context = {**plain, "context": 5}
    assert reading_of({"format": "columns", "context": "CHG", "options": {**options, "columns": with_context}}) == \
        {"context": "CHG", "merge_strands": False, "min_coverage": 1}


def test_the_partials_hierarchy_is_kept_whole_and_touches_nothing_of_the_users(tmp_path, moment_store):
    """A helper's audit of the groups that make the partials one Zarr hierarchy: a link named
    zarr.json (dangling too) or a user's own file by that name is left alone and said; a killed
    write's temporary is removed; partials written before their arrays named their dimensions
    are named by the next run and by merge."""
    store, out = moment_store
    (out / "partials" / "zarr.json").unlink()
    os.symlink(tmp_path / "nowhere.json", out / "partials" / "zarr.json")
    (out / "partials" / "chr1" / "zarr.json").write_text("my notes")
    leftover = out / "partials" / "chr2" / ".zarr.json.tmp-0123456789ab"
    leftover.write_text("{")
    for array in (out / "partials").glob("*/0*/*/zarr.json"):  # as written before 2026-12-04
        document = json.loads(array.read_text())
        del document["dimension_names"]
        array.write_text(json.dumps(document))
    r = run("moments", store, "--output", out)
    assert r.exit_code == 0, r.output
    for entry in ("zarr.json", "chr1/zarr.json"):
        assert f"warning: left {out / 'partials' / entry} alone: not a partial of the moment store" in r.output
    assert os.readlink(out / "partials" / "zarr.json") == str(tmp_path / "nowhere.json")
    assert not (tmp_path / "nowhere.json").exists() and not leftover.exists()
    assert (out / "partials" / "chr1" / "zarr.json").read_text() == "my notes"
    (out / "partials" / "zarr.json").unlink()
    (out / "partials" / "chr1" / "zarr.json").unlink()
    r = run("moments", store, "--output", out)
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    assert_opens_with_xarray(out)
    assert load_total(out)[0].allclose(from_scratch(store), rtol=1e-12)


def test_a_sample_selection_leaves_no_group_of_chromosomes_it_has_no_partial_of(tmp_path, four_state_model,
                                                                               dask_clients):
    chroms = simulated_chroms(four_state_model, [1500, 1200, 800], seed=5)
    counts = tmp_path / "counts.zarr"
    ingest([write_tsv(tmp_path / "a.tsv", {c: chroms[c] for c in ("chr1", "chr2")})], "A", counts, chunk_size=500)
    ingest([write_tsv(tmp_path / "b.tsv", {"chr3": chroms["chr3"]})], "B", counts, chunk_size=500)
    out = tmp_path / "m.zarr"
    update_moment_store(open_store(counts), out, dask_clients[0], samples=["A"])
    assert sorted(p.name for p in (out / "partials").iterdir()) == ["chr1", "chr2", "zarr.json"]
    assert_opens_with_xarray(out)
    # a chromosome whose partials are all dropped (its counts gone) goes with its group
    old = tmp_path / "old.zarr"
    shutil.copytree(out, old)
    for array in (old / "partials").glob("*/0*/*/zarr.json"):  # as written before 2026-12-04
        document = json.loads(array.read_text())
        del document["dimension_names"]
        array.write_text(json.dumps(document))
    merge_moment_stores([old], tmp_path / "merged.zarr")
    assert_opens_with_xarray(tmp_path / "merged.zarr")
    shutil.rmtree(counts)
    ingest([write_tsv(tmp_path / "a1.tsv", {"chr1": chroms["chr1"]})], "A", counts, chunk_size=500)
    r = run("moments", counts, "--output", out, "--samples", "A")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (out / "partials").iterdir()) == ["chr1", "zarr.json"]
    assert_opens_with_xarray(out)


def strip_dimension_names(root, arrays="*"):
    """Make a moment store's partials as they were written before 2026-12-04 (or as a run killed
    while naming them left them): ``arrays`` without their dimension names."""
    for array in (Path(root) / "partials").glob(f"*/0*/{arrays}/zarr.json"):
        document = json.loads(array.read_text())
        del document["dimension_names"]
        array.write_text(json.dumps(document))


def test_killed_writes_and_read_only_stores_leave_nothing_behind(tmp_path, four_state_model, dask_clients):
    """A helper's hostile audit: a run killed while naming an old store's arrays left it
    unnamed for good (the first array's names stood for all); the temporaries of killed
    writes of the manifest, a group document or an array's document stayed (merge copied them);
    merging read-only old stores copied their modes and could not name their arrays; an old
    store's chromosome that lost its reads left an empty directory."""
    chroms = simulated_chroms(four_state_model, [1500, 1200], seed=7)
    counts = tmp_path / "counts.zarr"
    ingest([write_tsv(tmp_path / "a.tsv", chroms)], "A", counts, chunk_size=500)
    out = tmp_path / "m.zarr"
    update_moment_store(open_store(counts), out, dask_clients[0])
    strip_dimension_names(out, "p1[23]")  # killed while naming: p12 (named last now) and p13 not yet
    for partial in (out / "partials").glob("*/0*"):
        (partial / "p13" / ".zarr.json.tmp-0123456789ab").write_text("{")
    (out / ".manifest.json.tmp-0123456789ab").write_text("{")
    r = run("moments", counts, "--output", out)
    assert r.exit_code == 0 and "computed 0 partial(s)" in r.output, r.output
    assert_opens_with_xarray(out)
    assert not list(out.glob("**/.*.tmp-*"))
    # read-only stores of before the names, merged: the copy is the merge's own
    old = [tmp_path / "old1.zarr", tmp_path / "old2.zarr"]
    for copy in old:
        shutil.copytree(out, copy)
        strip_dimension_names(copy)
        (next((copy / "partials").glob("*/0*")) / "p13" / ".zarr.json.tmp-0123456789ab").write_text("{")
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
    try:
        merge_moment_stores(old, tmp_path / "merged.zarr")
    finally:
        for copy in old:
            for path in [copy, *copy.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
    merged = tmp_path / "merged.zarr"
    assert_opens_with_xarray(merged)
    assert all(path.stat().st_mode & 0o200 for path in merged.rglob("*")) and not list(merged.glob("**/.*.tmp-*"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("merged")) == ["merged.zarr"]
    # an old store (no groups) whose chr2 loses its reads, a killed group write's temporary there too
    for path in (out / "partials").rglob("zarr.json"):
        if path.parent.parent == out / "partials" or path.parent == out / "partials":
            path.unlink()  # the groups' documents
    (out / "partials" / "chr2" / ".zarr.json.tmp-0123456789ab").write_text("{")
    shutil.rmtree(counts)
    ingest([write_tsv(tmp_path / "a1.tsv", {"chr1": chroms["chr1"]})], "A", counts, chunk_size=500)
    r = run("moments", counts, "--output", out)
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    assert sorted(p.name for p in (out / "partials").iterdir()) == ["chr1", "zarr.json"]
    assert_opens_with_xarray(out)


def test_two_updates_never_share_a_task(built_moment_store):
    """A chunk task reads and writes the moment store: with the keys of a pure task a second
    update on the same client was handed the first one's results while the scheduler still
    held them (test_memory_store_matches_local_store failed now and then: 4 computed, 0
    reused). Each update's tasks have keys of their own."""
    from streambhmm.moments.momentstore import partial_tasks

    store, out = built_moment_store
    spec = FeatureSpec().resolve(1)
    first, second = (partial_tasks(open_store(store), spec, ["A"], {}, str(out)) for _ in range(2))
    assert len(first) == len(second) > 1
    assert not {t.key for t in first} & {t.key for t in second}
