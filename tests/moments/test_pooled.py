"""Pooled models: one set of states shared by the samples, each sample its own sequence."""

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambhmm.moments.blocks import BlockTable
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.moments.sums import compute_moments
from streambhmm.moments.momentstore import MomentStoreError, load_partials, load_total
from streambhmm.testing import update_moment_store
from streambhmm.moments.pipeline import moments_graph
from streambhmm.testing import load_counts
from streambhmm.learn.simulate import model, simulate
from streambhmm.io.store import open_store
from streambhmm.testing import write_store
from streambhmm.distributed.em import fit_store_em, score_store

from ..conftest import STICKY
from ..app.test_cli import run
from .test_pipeline import synthetic_store

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster

SHARED_LEVELS = [0.05, 0.35, 0.65, 0.95]


def per_sample_sum(store, samples=("A", "B")):
    """The reference: each sample's moments (its covered bins, per chromosome), summed."""
    return sum(compute_moments(*load_counts(store, [s])) for s in samples)


def replicate_store(path, n_samples: int, n_bins: int, chunk_size: int, seed: int = 0):
    """Replicates of one 4-state methylome: the same states and levels, each sample its own
    state path, coverage and missing bins."""
    rng = np.random.default_rng(seed)
    mdl = model(SHARED_LEVELS, STICKY)
    meth, cov = [], []
    for _ in range(n_samples):
        sim = simulate(mdl, [n_bins], coverage=float(rng.integers(8, 20)), random_state=rng)
        gone = rng.random(n_bins) < 0.2
        meth.append(np.where(gone, 0, sim.methylated[:, 0]))
        cov.append(np.where(gone, 0, sim.coverage[:, 0]))
    meth, cov = np.stack(meth, axis=1), np.stack(cov, axis=1)
    names = [f"S{i}" for i in range(n_samples)]
    return write_store(path, {"chr1": (np.arange(n_bins), meth, cov)}, names, chunk_size=chunk_size)


@pytest.mark.parametrize("chunk_size", [1, 3, 64, 10_000])
def test_pooled_moments_are_the_sum_of_each_samples_moments(tmp_path, four_state_model, dask_clients, chunk_size):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [40, 2, 1, 25, 3], chunk_size, gap_fraction=0.4)
    expected = per_sample_sum(store)
    got = dask_clients[1].compute(moments_graph(store, pooled=True).total).result()
    assert got.n_samples == 1 and got.n_triples == expected.n_triples
    assert got.allclose(expected, rtol=1e-10)
    # a pool of one sample is that sample's joint moments
    alone = dask_clients[0].compute(moments_graph(store, ["B"], pooled=True).total).result()
    assert alone.allclose(compute_moments(*load_counts(store, ["B"])), rtol=1e-10)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=4), chunk_size=st.integers(2, 25),
       split_every=st.integers(2, 5), seed=st.integers(0, 1000))
def test_pooled_moments_do_not_depend_on_chunks_or_reduction(tmp_path_factory, four_state_model, dask_clients,
                                                             lengths, chunk_size, split_every, seed):
    store = synthetic_store(tmp_path_factory.mktemp("p") / "s.zarr", four_state_model, lengths, chunk_size, seed,
                            gap_fraction=0.4)
    graph = moments_graph(store, split_every=split_every, pooled=True)
    assert dask_clients[seed % 2].compute(graph.total).result().allclose(per_sample_sum(store), rtol=1e-10)


def test_pooled_moment_store_resumes_and_keeps_its_kind(tmp_path, four_state_model, dask_clients):
    client = dask_clients[1]
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [300, 200], chunk_size=90, gap_fraction=0.4)
    out = tmp_path / "pooled.zarr"
    first = update_moment_store(store, out, client, pooled=True, block_size=5_000)
    total, manifest = load_total(out)
    assert manifest["feature"]["pooled"] is True and total.allclose(per_sample_sum(store), rtol=1e-10)
    # the blocks (bootstrap, held-out folds) hold the samples' triples summed, one row per block
    blocks = BlockTable([p.blocks for p in load_partials(out)[0]])
    whole = blocks.moments(np.ones(len(blocks)), total)
    assert len(blocks) == len(set(blocks.keys)) and whole.n_triples == total.n_triples
    np.testing.assert_allclose(whole.p12, total.p12, rtol=1e-5)
    again = update_moment_store(store, out, client, pooled=True)
    assert again.computed == 0 and again.reused == first.computed
    with pytest.raises(MomentStoreError, match="pooled on \\(this run: off\\)"):
        update_moment_store(store, out, client)
    # a joint store's settings, and so its partials' digests, do not mention pooling
    update_moment_store(store, tmp_path / "joint.zarr", client)
    assert "pooled" not in load_total(tmp_path / "joint.zarr")[1]["feature"]


def test_pooled_score_and_em_sum_over_samples(tmp_path, dask_clients):
    client = dask_clients[1]
    store = replicate_store(tmp_path / "r.zarr", 3, 1500, chunk_size=400)
    hmm = BinomialHMM(4).start_from(np.full(4, 0.25), STICKY, np.array(SHARED_LEVELS)[:, None] + 0.02)
    sequences = [load_counts(store, [s]) for s in store.samples]
    per_chrom = score_store(store, hmm, client, pooled=True)
    assert per_chrom["chr1"] == pytest.approx(sum(hmm.score(*seq) for seq in sequences), rel=1e-10)
    # EM on the pooled store: the in-memory EM of the samples as separate sequences
    meth = np.concatenate([seq[0] for seq in sequences])
    cov = np.concatenate([seq[1] for seq in sequences])
    lengths = np.concatenate([seq[2] for seq in sequences])
    start = (np.full(4, 0.25), STICKY, np.array(SHARED_LEVELS)[:, None] + 0.02)
    result = fit_store_em(store, BinomialHMM(4).start_from(*start), client, n_iter=3, rel_tol=0.0, pooled=True)
    reference = BinomialHMM(4).start_from(*start)
    for _ in range(3):
        reference.m_step(reference.e_step(meth, cov, lengths))
    np.testing.assert_allclose(result.hmm.methylation_, reference.methylation_, rtol=1e-8)
    np.testing.assert_allclose(result.hmm.transmat_, reference.transmat_, rtol=1e-8)


def test_pooled_cli_fits_shared_states_and_decodes_each_sample(tmp_path, dask_clients):
    scheduler = dask_clients[1].scheduler.address
    store = replicate_store(tmp_path / "r.zarr", 4, 40_000, chunk_size=15_000)
    moments = tmp_path / "m.zarr"
    r = run("moments", store.path, "-o", moments, "--pooled", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    model = tmp_path / "pooled.json"
    r = run("fit", moments, "-m", "4", "-o", model, "-q")
    assert r.exit_code == 0, r.output
    assert "pooled over 4 sample(s): S0, S1, S2, S3" in r.output
    doc = json.loads(model.read_text())
    assert doc["pooled"] is True and doc["samples"] == ["S0", "S1", "S2", "S3"]
    levels = np.sort(np.array(doc["methylation"])[:, 0])
    np.testing.assert_allclose(levels, SHARED_LEVELS, atol=0.02)

    r = run("decode", store.path, "--model", model, "-o", tmp_path / "seg.bed", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    for sample in doc["samples"]:
        bed = (tmp_path / f"seg.{sample}.bed").read_text().splitlines()
        assert bed[0].startswith('track name="') and f"({sample})" in bed[0] and len(bed) > 100
        assert {line.split("\t")[3] for line in bed[1:]} <= set(doc["labels"])
        n_bins = int(re.search(rf"seg.{sample}.bed: [0-9,]+ segments over ([0-9,]+) covered bins",
                               r.output).group(1).replace(",", ""))
        assert n_bins == load_counts(store, [sample])[0].shape[0]
    assert not (tmp_path / "seg.bed").exists()
    r = run("score", store.path, "--model", model, "--scheduler", scheduler)
    assert r.exit_code == 0 and re.search(r"^total\s+-\d", r.output, re.M), r.output

    # EM on the counts store, pooled, from the refined start
    r = run("fit", store.path, "-m", "4", "--pooled", "--method", "refined-em", "--em-iter", "5", "-o",
            tmp_path / "em.json", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    em = json.loads((tmp_path / "em.json").read_text())
    assert em["pooled"] is True and np.array(em["methylation"]).shape == (4, 1)


def test_pooled_refusals(tmp_path, dask_clients):
    scheduler = dask_clients[0].scheduler.address
    store = replicate_store(tmp_path / "r.zarr", 2, 3000, chunk_size=1000)
    joint = tmp_path / "joint.zarr"
    assert run("moments", store.path, "-o", joint, "--scheduler", scheduler, "-q").exit_code == 0
    r = run("fit", joint, "-m", "4", "--pooled", "-o", tmp_path / "x.json")
    assert r.exit_code != 0 and "--pooled needs `streambhmm moments --pooled`" in r.output
    model = tmp_path / "pooled.json"
    r = run("fit", store.path, "-m", "4", "--pooled", "-o", model, "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    r = run("decode", store.path, "--model", model, "-o", tmp_path / "s.bed", "--posteriors",
            "--scheduler", scheduler)
    assert r.exit_code != 0 and "pooled model; --posteriors" in r.output
    doc = json.loads(model.read_text())
    doc["pooled"] = "yes"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    r = run("score", store.path, "--model", tmp_path / "bad.json", "--scheduler", scheduler)
    assert r.exit_code != 0 and "pooled must be true or false" in r.output


def test_batch_pooled_writes_a_pooled_moment_store(tmp_path, dask_clients):
    from ..distributed.test_batch import GOOD, write_manifest

    client = dask_clients[1]
    manifest = write_manifest(tmp_path / "m.tsv", {s: GOOD[s] for s in ("H1", "IMR90")})
    r = run("batch", manifest, "--workdir", tmp_path / "work", "--bins", "8", "--pooled",
            "--scheduler", client.scheduler.address)
    assert r.exit_code == 0, r.output
    total, manifest = load_total(tmp_path / "work" / "lister" / "moments.zarr")
    assert manifest["feature"]["pooled"] is True and total.n_samples == 1
    counts = open_store(tmp_path / "work" / "lister" / "counts.zarr")
    assert total.allclose(client.compute(moments_graph(counts, n_bins=8, pooled=True).total).result(), rtol=1e-10)
