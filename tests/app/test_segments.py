"""The jobs behind decode, regions and tracks (app/segments.py): what they name, choose
and refuse before any work. The commands themselves are run in tests/distributed."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from streambhmm.app.segments import ModelOnStore, decode_outputs, region_rule

LEVELS = np.array([[0.05, 0.10], [0.55, 0.60], [0.90, 0.85]])


def model_on_store(pooled: bool = False, samples=("H1", "IMR90"), records=None) -> ModelOnStore:
    """``records``: the samples' records in the store (default: a store ingested before rows were counted)."""
    document = {"samples": list(samples), "pooled": pooled}
    hmm = SimpleNamespace(methylation_=LEVELS[:, :1] if pooled else LEVELS, dispersion=None)  # a binomial model
    counts = SimpleNamespace(bin_size=100, meta=SimpleNamespace(samples=records or {s: {} for s in samples}))
    return ModelOnStore("counts.zarr", "dir/m3.json", counts, document, hmm, ["unmethylated", "intermediate", "high"])


def test_a_joint_model_writes_one_bed_and_a_pooled_model_one_per_sample():
    joint = decode_outputs(model_on_store(), "out/seg.bed", posteriors=True)
    assert joint.beds == [(Path("out/seg.bed"), ["H1", "IMR90"])]
    assert joint.table == Path("out/seg.states.tsv")
    pooled = decode_outputs(model_on_store(pooled=True), "out/seg.bed")
    assert pooled.beds == [(Path("out/seg.H1.bed"), ["H1"]), (Path("out/seg.IMR90.bed"), ["IMR90"])]
    assert pooled.table == Path("out/seg.states.tsv")
    # another name keeps it whole: seg.a and seg.b must not share a table
    assert decode_outputs(model_on_store(), "out/seg.a").table == Path("out/seg.a.states.tsv")


def test_posteriors_of_a_pooled_model_are_refused_before_any_work():
    with pytest.raises(ValueError, match="dir/m3.json is a pooled model; --posteriors"):
        decode_outputs(model_on_store(pooled=True), "seg.bed", posteriors=True)


def test_states_are_named_by_label_or_index():
    job = model_on_store()
    assert job.states("high,0") == [2, 0]
    assert job.states(None) == [0, 1, 2]
    assert job.states("high, 0,") == [2, 0]
    for empty in ("", ",", " , "):  # was an error from deep in the posterior pass, after it
        with pytest.raises(ValueError, match="--targets .* names no state; give labels or indices"):
            job.states(empty)
    for bad in ("3", "low", "-1"):
        with pytest.raises(ValueError, match=f"--targets: no state '{bad}'; the model's are unmethylated, "
                                             f"intermediate, high \\(or 0..2\\)"):
            job.states(bad)


def test_region_rules_from_a_preset_or_states_with_the_users_settings():
    job = model_on_store()
    hmr = region_rule(job, "hmr", None, max_gap=500, min_bins=None)
    assert (hmr.targets, hmr.name, hmr.max_gap, hmr.min_bins, hmr.bridge_covered) == ((0,), "HMR", 500, 4, False)
    # on the store's 100 bp bins the unmethylated state is the HMRs', not a PMD's
    assert region_rule(job, "pmd", None).targets == (1,)
    chosen = region_rule(job, None, "high,unmethylated,0", min_posterior=0.9)
    assert (chosen.targets, chosen.name, chosen.min_posterior) == ((0, 2), "region", 0.9)
    with pytest.raises(ValueError, match="is a pooled model; regions are found with joint models"):
        region_rule(model_on_store(pooled=True), "hmr", None)
    # a sample ingested from files listing methylated cytosines only has no HMRs; its states do
    records = {"H1": {"rows": 2_000, "unmethylated_rows": 0}, "IMR90": {"rows": 2_000, "unmethylated_rows": 9}}
    with pytest.raises(ValueError, match=r"ingested for H1 \(2,000 rows\) .* a model of IMR90 \(fit --samples IMR90\)"):
        region_rule(model_on_store(records=records), "hmr", None)
    assert region_rule(model_on_store(records=records), "pmd", None).targets == (1,)
    assert region_rule(model_on_store(records=records), None, "0").targets == (0,)
