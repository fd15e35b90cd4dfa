"""Nothing broken is handed out: degenerate fits are refused, model files validated, and
forward-backward stays finite on every valid model."""

import itertools
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import gammaln

from streambhmm import SpectralBinomialHMM, compute_moments, simulate
from streambhmm.learn.checks import DegenerateModelError, DegenerateModelWarning, degeneracy_problems
from streambhmm.app.cli import main
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.learn.simulate import model

from ..conftest import STICKY, WELL_SEPARATED


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


GOOD = (WELL_SEPARATED, STICKY, np.full(4, 0.25))


@pytest.mark.parametrize("change,message", [
    (lambda p, a, s: (np.where(p == p.max(), np.nan, p), a, s), "NaN or infinite"),
    (lambda p, a, s: (p, a, np.array([0.5, 0.5, 0.0, 0.0])), r"state\(s\) 2, 3 have \(near\) zero weight"),
    (lambda p, a, s: (p, np.eye(4), s), r"\(nearly\) the identity"),
    (lambda p, a, s: (p, np.kron(np.eye(2), np.full((2, 2), 0.5)), s), r"reducible: states split into 2 groups"),
    (lambda p, a, s: (p, np.eye(4) * (1 - 3e-8) + 1e-8, s), r"\(nearly\) the identity"),
    # every read methylated: each level at the estimator's bound (the audit's all-methylated store)
    (lambda p, a, s: (np.full_like(p, 0.9999), a, s), r"states 0 and 1, 0 and 2, .* have the same level in every "
                                                      r"sample \(0.9999/0.9999, "),
    (lambda p, a, s: (np.vstack([p[:3], p[2] + 1e-7]), a, s), r"states 2 and 3 have the same level"),
])
def test_crafted_degenerate_models_are_named(change, message):
    assert degeneracy_problems(*GOOD) == []
    problems = degeneracy_problems(*change(*GOOD))
    assert problems and re.search(message, "; ".join(problems))


def test_states_a_little_apart_are_not_the_same():
    assert degeneracy_problems(np.vstack([WELL_SEPARATED[:3], WELL_SEPARATED[2] + [1e-4, 0]]), STICKY,
                               np.full(4, 0.25)) == []


def test_clipped_levels_are_degenerate():
    clipped = np.zeros_like(WELL_SEPARATED, dtype=bool)
    clipped[1, 0] = True
    assert "clipped to exactly 0 or 1 by the estimator (state 1 sample 0)" in degeneracy_problems(*GOOD, clipped)[0]


@pytest.fixture(scope="module")
def two_state_moments():
    two = model([[0.1], [0.9]], [[0.97, 0.03], [0.03, 0.97]])
    sim = simulate(two, [20_000], coverage=20, random_state=0)
    return compute_moments(sim.methylated, sim.coverage, sim.lengths)


def test_a_degenerate_ftd_fit_raises_or_warns(two_state_moments):
    """Four states asked of two: FTD without its spectrum check breaks, and says so."""
    est = SpectralBinomialHMM(4, method="ftd", check_spectrum=False, random_state=0)
    with pytest.raises(DegenerateModelError, match="degenerate ftd fit with 4 states: .*Try fewer states"):
        est.fit_moments(two_state_moments)
    est.allow_degenerate = True
    with pytest.warns(DegenerateModelWarning, match="degenerate ftd fit"):
        est.fit_moments(two_state_moments)
    assert hasattr(est, "methylation_")


def test_a_degenerate_em_fit_raises():
    sim = simulate(model([[0.1], [0.9]], [[0.9, 0.1], [0.1, 0.9]]), [2000], coverage=10, random_state=1)
    hmm = BinomialHMM(2, init="random", init_params="sm", params="m", random_state=0)
    hmm.transmat_ = np.eye(2)  # kept: neither initialized nor updated
    with pytest.raises(DegenerateModelError, match="degenerate EM fit with 2 states: the transition matrix is"):
        hmm.fit(sim.methylated, sim.coverage)


def brute_force(meth, cov, start, transmat, levels):
    """log P(data) and posteriors by enumerating every state path."""
    n, m = len(meth), len(start)
    coef = gammaln(cov + 1) - gammaln(meth + 1) - gammaln(cov - meth + 1)
    log_b = coef[:, None] + meth[:, None] * np.log(levels) + (cov - meth)[:, None] * np.log1p(-levels)
    with np.errstate(divide="ignore"):
        log_a, log_s = np.log(transmat), np.log(start)
    paths = np.array(list(itertools.product(range(m), repeat=n)))
    logp = log_s[paths[:, 0]] + log_b[np.arange(n), paths].sum(axis=1) + log_a[paths[:, :-1], paths[:, 1:]].sum(axis=1)
    top = logp.max()
    weights = np.exp(logp - top)
    post = np.stack([np.bincount(paths[:, t], weights, minlength=m) for t in range(n)]) / weights.sum()
    return top + np.log(weights.sum()), post


@pytest.mark.parametrize("transmat", [np.eye(3), np.array([[1, 0, 0], [0.5, 0.5, 0], [0, 0, 1.0]])],
                         ids=["identity", "absorbing"])
def test_forward_backward_is_exact_on_transition_matrices_with_zeros(transmat):
    """Emissions thousands of nats apart meet transitions that are exactly zero: the scaled
    recursion underflows and the log-domain path takes over; no NaN, no division by zero."""
    meth = np.array([0, 0, 400, 400, 0, 3])
    cov = np.array([400, 400, 400, 400, 400, 5])
    levels = np.array([1e-4, 0.5, 1 - 1e-4])
    start = np.array([0.98, 0.01, 0.01])
    hmm = BinomialHMM(3)
    hmm.startprob_, hmm.transmat_, hmm.methylation_ = start, transmat, levels[:, None]
    loglik, post = brute_force(meth, cov, start, transmat, levels)
    assert hmm.score(meth, cov) == pytest.approx(loglik, rel=1e-9)
    got = hmm.predict_proba(meth, cov)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, post, atol=1e-9)


@pytest.fixture
def store_and_models(tmp_path, four_state_model):
    from ..moments.test_pipeline import synthetic_store

    store = synthetic_store(tmp_path / "counts.zarr", four_state_model, [800, 500], chunk_size=130)
    base = {"format": "streambhmm-model", "version": 1, "method": "refined", "n_states": 4, "samples": ["A", "B"],
            "methylation": WELL_SEPARATED.tolist(), "transmat": np.eye(4).tolist(), "startprob": [0.25] * 4,
            "feature": {"kind": "beta", "n_bins": 30}, "n_triples": 0, "chromosomes": ["chr1", "chr2"],
            "created_by": "test"}
    return store, base


@pytest.mark.slow
def test_decode_and_score_stay_finite_under_an_identity_transition_matrix(tmp_path, store_and_models, scheduler):
    store, doc = store_and_models
    model_path = tmp_path / "identity.json"
    model_path.write_text(json.dumps(doc))
    r = run("score", store.path, "--model", model_path, "--scheduler", scheduler)
    assert r.exit_code == 0, r.output
    total = float(re.search(r"^total\s+(\S+)", r.output, re.M).group(1))
    assert np.isfinite(total)
    from streambhmm.testing import hmm_from_model
    from streambhmm.testing import load_counts

    assert total == pytest.approx(hmm_from_model(doc).score(*load_counts(store)), rel=1e-9)
    r = run("decode", store.path, "--model", model_path, "--output", tmp_path / "seg.bed", "--posteriors",
            "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    for line in (tmp_path / "seg.bed").read_text().splitlines()[1:]:
        assert 0 <= int(line.split("\t")[4]) <= 1000
    import xarray as xr

    for chrom in ("chr1", "chr2"):
        ds = xr.open_zarr(store.path, group=chrom)
        covered = ds.coverage.values.sum(axis=1) > 0
        posterior = ds.state_posterior.values
        assert np.isfinite(posterior[covered]).all() and np.isnan(posterior[~covered]).all()


@pytest.mark.slow
@pytest.mark.parametrize("edit,message", [
    (lambda d: d["methylation"][0].__setitem__(0, float("nan")), "methylation contains NaN"),
    (lambda d: d.__setitem__("transmat", (np.eye(4) * 1.5 - 0.5 / 3 * (1 - np.eye(4))).tolist()),
     "transmat has values outside"),
    (lambda d: d.__setitem__("startprob", [-0.5, 0.5, 0.5, 0.5]), "startprob has values outside"),
    (lambda d: d.__setitem__("startprob", [0.2, 0.2, 0.2, 0.2]), "startprob sums to 0.8"),
    (lambda d: d.__setitem__("transmat", np.eye(3).tolist()), "transmat must be 4 x 4"),
    (lambda d: d.__setitem__("version", "1"), "version must be an integer"),
    (lambda d: d.__setitem__("samples", ["A", "A"]), "distinct names"),
    (lambda d: d.__setitem__("n_states", 5), "n_states is 5 but methylation lists 4"),
])
def test_malformed_model_files_are_refused_with_the_file_named(tmp_path, store_and_models, edit, message):
    store, doc = store_and_models
    doc["transmat"] = STICKY.tolist()
    edit(doc)
    model_path = tmp_path / "bad.json"
    model_path.write_text(json.dumps(doc))
    for command in (("score", store.path, "--model", model_path),
                    ("decode", store.path, "--model", model_path, "-o", tmp_path / "x.bed")):
        r = run(*command)
        assert r.exit_code != 0 and str(model_path) in r.output and message in r.output, r.output
        assert "Traceback" not in r.output
    assert not (tmp_path / "x.bed").exists()


@pytest.mark.slow
def test_malformed_json_is_refused_with_the_file_named(tmp_path, store_and_models):
    store, _ = store_and_models
    model_path = tmp_path / "cut.json"
    model_path.write_text('{"format": "streambhmm-model", "version": ')
    r = run("score", store.path, "--model", model_path)
    assert r.exit_code != 0 and f"{model_path}: not a valid model file: malformed JSON" in r.output


@pytest.mark.slow
def test_fit_table_shows_the_weights_written_to_the_json(tmp_path, store_and_models, scheduler):
    store, _ = store_and_models
    for method in ("refined", "em"):
        model_path = tmp_path / f"{method}.json"
        r = run("fit", store.path, "-m", "3", "--method", method, "--em-starts", "1", "--em-iter", "5", "-o",
                model_path, "--scheduler", scheduler, "-q")
        assert r.exit_code == 0, r.output
        doc = json.loads(model_path.read_text())
        table = re.findall(r"^\s+(\d)\s+\S+\s+\S+\s+(\S+)\s+(\S+)\s+\S+$", r.output, re.M)[-3:]  # ... label
        assert [float(weight) for _, weight, _ in table] == pytest.approx(doc["startprob"], abs=5e-4)
        assert [float(stay) for _, _, stay in table] == pytest.approx(np.diag(doc["transmat"]), abs=5e-4)


@pytest.mark.slow
def test_cli_refuses_a_degenerate_model_unless_allowed(tmp_path, scheduler):
    """FTD on the real H1/IMR90 excerpt returns an identity transition matrix: refused with
    the reason and what to try; written, with a warning, only when allowed."""
    from pathlib import Path

    data = Path(__file__).parents[1] / "data"
    store = tmp_path / "counts.zarr"
    for sample in ("H1", "IMR90"):
        files = sorted(data.glob(f"dmrseq_{sample}_r*.chr21.tsv.gz"))
        assert run("ingest", *files, "--sample", sample, "--store", store).exit_code == 0
    args = ("fit", store, "-m", "2", "--method", "ftd", "--scheduler", scheduler, "-q")
    r = run(*args, "-o", tmp_path / "a.json")
    assert r.exit_code != 0 and "degenerate ftd fit with 2 states: the transition matrix is (nearly) the identity" \
        in r.output and "--method refined" in r.output and "--allow-degenerate" in r.output
    assert not (tmp_path / "a.json").exists()
    r = run(*args, "--allow-degenerate", "-o", tmp_path / "a.json")
    assert r.exit_code == 0 and "warning: degenerate ftd fit" in r.output
    assert json.loads((tmp_path / "a.json").read_text())["method"] == "ftd"
    r = run("fit", store, "-m", "2", "--scheduler", scheduler, "-q", "-o", tmp_path / "b.json")  # refined: fine
    assert r.exit_code == 0 and "warning:" not in r.output and "degenerate refined fit" not in r.output
