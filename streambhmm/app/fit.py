"""The `fit` job: the moments of a counts store (or a moment store's), then for each number
of states one model fitted, checked, described and written. The command (app/cli/fit.py)
parses the options, calls ``run_fit`` and prints what it returns; progress goes through
``echo``."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..distributed.cluster import OpenedStore
from ..distributed.fitdata import FitData, load_moments
from ..distributed.fitting import COUNTS_STORE_METHOD, MOMENT_STORE_METHOD, ONE_PASS, default_emission
from ..distributed.em import fit_store_em
from ..io.outputs import check_replaceable_file
from ..io.progress import em_progress, stage
from ..io.storage import write_json
from ..io.store import store_inputs
from ..learn.bootstrap import block_bootstrap, check_blocks
from ..learn.checks import fit_or_refusal
from ..learn.hmm import BinomialHMM, random_parameters
from ..learn.refine import fit_threads
from ..learn.selection import HeldOut, SweepFit, bic, held_out, held_out_problem, one_pass, sweep_in_processes
from ..learn.states import DIFF_THRESHOLD
from ..moments.momentstore import is_moment_store, read_manifest
from ..moments.pipeline import select_samples
from ..moments.spec import FeatureSpec
from .modelio import data_settings_of, format_states, model_head, model_to_dict


@dataclass
class FitSettings:
    """The options of one `fit` call."""

    store: str
    states: list[int]
    output: str
    method: str | None = None  # None: the store kind's default
    samples: list | None = None
    spec: FeatureSpec = field(default_factory=FeatureSpec)  # as asked; the moments' own once loaded
    seed: int = 0
    em_iter: int = 1000
    em_tol: float = 1e-7
    em_starts: int = 3
    emission: str | None = None  # None: the method's (fitting.default_emission)
    bootstrap: int = 0
    allow_degenerate: bool = False
    diff_threshold: float = DIFF_THRESHOLD
    split_every: int = 8
    scheduler: str | None = None
    quiet: bool = False
    moment_store: bool = field(init=False, default=False)

    def __post_init__(self):
        """Defaults resolved and combinations that cannot work refused (ValueError), before any work."""
        self.moment_store = is_moment_store(self.store)
        self.method = self.method or (MOMENT_STORE_METHOD if self.moment_store else COUNTS_STORE_METHOD)
        if self.method not in ONE_PASS and self.moment_store:
            raise ValueError(f"{self.store} is a moment store; --method {self.method} needs the counts store "
                             f"(EM reads the counts)")
        if self.bootstrap and self.method != "refined":
            raise ValueError("--bootstrap refits the refined one-pass model to resampled blocks; it needs "
                             "--method refined")
        if self.method == "ftd" and self.emission == "betabinomial":
            raise ValueError("--method ftd (the tensor decomposition) fits binomial emissions; --method refined "
                             "fits beta-binomial ones from the same moments")
        self.emission = self.emission or default_emission(self.method)
        inputs = store_inputs(self.store)
        for m in self.states:  # a sweep's models are named after --output: each is checked
            path = self.output_path(m)
            inputs.check(path)
            if self.sweep:  # a name the user did not give: replaced only if it holds a model
                check_replaceable_file(path, model_head(), self.output)
            else:
                check_replaceable_file(path, model_head())

    @property
    def sweep(self) -> bool:
        return len(self.states) > 1

    def output_path(self, m: int) -> Path:
        """The model file of M states: --output, or NAME.mM.json in a sweep."""
        path = Path(self.output)
        return path.with_name(f"{path.stem}.m{m}{path.suffix}") if self.sweep else path


@dataclass
class FitOutcome:
    """One number of states: the model and its document, written to ``path``, or why not."""

    m: int
    path: Path
    refused: str | None = None  # a degenerate model, not written
    estimator: object = None
    samples: list = field(default_factory=list)
    columns: list = field(default_factory=list)  # the model's methylation columns
    document: dict | None = None
    warnings: list[str] = field(default_factory=list)  # degenerate, written with --allow-degenerate
    bootstrap: object = None  # learn.bootstrap.BootstrapIntervals
    block_size: int = 0
    spectrum: bool | None = None
    loss: float | None = None  # the moment-fit criterion
    held_out: HeldOut | None = None
    no_held_out: str | None = None  # why a sweep's fit has no held-out criterion
    bic: float | None = None

    @property
    def written(self) -> bool:
        return self.refused is None


@dataclass
class FitRun:
    """What a `fit` computed before its models: the moments (None for --method em) and,
    in a sweep, the singular values of P13."""

    data: FitData | None
    seconds: float
    singular_values: np.ndarray | None = None


def run_fit(settings: FitSettings, opened: OpenedStore | None,
            echo: Callable[[str], None]) -> tuple[FitRun, Iterator[FitOutcome]]:
    """The moments now, then an iterator that fits, checks and writes one model per number
    of states (a degenerate one is refused, or with ``allow_degenerate`` written with a warning).
    ``opened``: the counts store as store_session opened it (None for a moment store: no
    counts are read)."""
    start = time.perf_counter()
    client = opened.client if opened else None
    data, singular_values = None, None
    if settings.method != "em":
        data = load_moments(opened.store if opened else settings.store, settings.samples, settings.spec, client,
                            settings.quiet, settings.split_every,
                            want_blocks=settings.bootstrap > 0 or (settings.sweep and settings.method in ONE_PASS))
        settings.spec = data.spec
        if settings.sweep:
            mom = data.moments
            singular_values = np.linalg.svd(mom.p13 / max(mom.n_triples, 1), compute_uv=False)
    run = FitRun(data, time.perf_counter() - start, singular_values)
    return run, _fits(settings, data, opened, echo)


def _fits(settings: FitSettings, data: FitData | None, opened: OpenedStore | None, echo) -> Iterator[FitOutcome]:
    """fit_one for each number of states; a sweep's progress counts them."""
    processes = fit_threads(len(settings.states))  # one per core, as the threads of one fit
    with contextlib.ExitStack() as stack, \
            stage("sweep", len(settings.states), quiet=settings.quiet or not settings.sweep, unit="models") as sweep:
        fitted = None
        if settings.sweep and settings.method == "refined" and processes > 1:  # a process per core
            # closed when the caller stops (Ctrl-C, an error writing a model): that ends the processes' fits
            fitted = stack.enter_context(contextlib.closing(sweep_in_processes(
                data.moments, data.blocks, settings.states, settings.seed, settings.allow_degenerate,
                settings.emission, processes)))
        for done, m in enumerate(settings.states):
            sweep(done, note=f"M = {m}")
            yield fit_one(m, settings, data, opened, echo, None if fitted is None else next(fitted))
        sweep(len(settings.states))


def fit_one(m: int, settings: FitSettings, data: FitData | None, opened: OpenedStore | None, echo,
            fitted: SweepFit | None = None) -> FitOutcome:
    """Fit, check, describe and write the model of ``m`` states (``fitted``: its fit and
    held-out criterion, made in a sweep's worker process)."""

    if settings.sweep:
        echo(f"\nM = {m}:")
    outcome = FitOutcome(m, settings.output_path(m))
    if fitted is None:
        result, outcome.refused, warned = fit_or_refusal(lambda: _fit_model(m, settings, data, opened, echo))
    else:  # made in a sweep's worker process: a refined fit of the moments, as _fit_model returns it
        result = fitted.estimator, data.samples, data.chromosomes, None, None
        outcome.refused, warned = fitted.refused, fitted.warnings
    if outcome.refused:
        return outcome
    est, samples, chromosomes, history, n_bins = result
    if fitted is not None:
        _describe_start(est, settings, echo)
    outcome.warnings = warned
    outcome.estimator, outcome.samples = est, samples
    outcome.columns = settings.spec.grouping(samples).columns
    outcome.spectrum, outcome.loss = getattr(est, "spectrum_supported_", None), getattr(est, "loss_", None)
    if history:
        outcome.bic = bic(history[-1], m, len(outcome.columns), n_bins, getattr(est, "emission", "") == "betabinomial")
    if settings.sweep and settings.method == "refined":
        outcome.no_held_out = held_out_problem(data.blocks, data.block_size)
        if fitted is not None:
            outcome.held_out = fitted.held_out
        else:
            with stage("held-out folds", quiet=settings.quiet, unit="folds") as shown:
                outcome.held_out = held_out(data.blocks, data.moments, est, progress=shown)
    document = model_to_dict(est, settings.spec.grouping(samples), chromosomes, method=settings.method,
                             **data_settings(settings, opened, samples))
    if outcome.loss is not None:
        document["moment_loss"] = float(outcome.loss)
    if history:
        document["loglik"] = history[-1]
        document["loglik_history"] = history
    if settings.bootstrap > 0:
        outcome.bootstrap, outcome.block_size = _bootstrap(est, settings, data, document, echo), data.block_size
    write_json(outcome.path, document)
    outcome.document = document
    return outcome


def data_settings(settings: FitSettings, opened: OpenedStore | None, samples) -> dict:
    """What a model of ``samples`` depends on besides its parameters (modelio.model_to_dict):
    the counts store's bin size and how each sample was read; a moment store records the bin
    size of the counts it was computed from (a merged one: none)."""
    if settings.moment_store:
        return {"bin_size": read_manifest(settings.store).source.get("bin_size")}
    return data_settings_of(opened.store, samples)


def _fit_model(m: int, settings: FitSettings, data: FitData | None, opened: OpenedStore | None, echo):
    """(estimator, samples, chromosomes, EM's log-likelihood history, bins EM saw) for one M."""

    method = settings.method
    if method in ONE_PASS:
        with stage(f"{method} fit of {m} states: starts", quiet=settings.quiet, unit="starts") as shown:
            est = one_pass(data.moments, m, method, settings.seed, settings.allow_degenerate,
                           emission=settings.emission, progress=shown)
        _describe_start(est, settings, echo)
        return est, data.samples, data.chromosomes, None, None
    counts = opened.store
    grouping = settings.spec.grouping(select_samples(counts, settings.samples))
    samples, columns = list(grouping.samples), grouping.columns
    if method == "em":
        starts = [(f"random start {r + 1} of {settings.em_starts}",
                   random_parameters(m, len(columns), settings.seed + r)) for r in range(settings.em_starts)]
    else:
        first = method.split("-")[0]  # refined or ftd
        with stage(f"{first} start of {m} states: starts", quiet=settings.quiet, unit="starts") as shown:
            start = one_pass(data.moments, m, first, settings.seed, quiet_degenerate=True,
                             emission=default_emission(first) if settings.emission == "betabinomial" else "binomial",
                             progress=shown)
        echo(f"{first} start:")
        echo(format_states(start.methylation_, start.transmat_, start.startprob_, columns))
        starts = [(f"{first} start", (start.startprob_, start.transmat_, start.methylation_,
                                      getattr(start, "dispersion_", None)))]
    best = None
    for label, params in starts:
        hmm = BinomialHMM(m, n_bins=settings.spec.n_bins, stationary_start=True, allow_degenerate=True,
                          emission=settings.emission)
        hmm.start_from(*params)
        if len(starts) > 1:
            echo(f"EM from {label}:")
        t = time.perf_counter()
        with stage(f"EM from {label}", settings.em_iter, quiet=settings.quiet, unit="iterations",
                   capped=True) as shown:
            result = fit_store_em(counts, hmm, opened.em_client, grouping,
                                  settings.em_iter, settings.em_tol, settings.split_every, report=em_progress(shown),
                                  check=False)
        gain = result.history[-1] - result.history[-2] if len(result.history) > 1 else float("nan")
        state = ("converged" if result.converged else
                 f"stopped at --em-iter {settings.em_iter} while still improving (last gain {gain:.4g}; raise "
                 f"--em-iter to continue)")
        echo(f"EM {state} after {len(result.history) - 1} iteration(s), {time.perf_counter() - t:.1f} s; "
             f"log-likelihood {result.history[-1]:.8g}")
        if best is None or result.history[-1] > best.history[-1]:
            best = result
    est = best.hmm
    est.allow_degenerate = settings.allow_degenerate
    est.check_fit()
    if data is not None:
        est.n_triples_ = data.moments.n_triples
    return est, samples, counts.chromosomes, best.history, best.n_bins



def _describe_start(est, settings: FitSettings, echo) -> None:
    """Which start a refined fit came from, and whether the spectrum supports it."""
    if not settings.quiet and settings.method == "refined":
        supported = "supported" if est.spectrum_supported_ else \
            "below noise" + ("" if "ftd" in est.starts_ else " (no FTD start)")
        echo(f"refined from start {est.start_} (criterion {est.loss_:.6f}); the spectrum check: {supported}")


def _bootstrap(est, settings: FitSettings, data: FitData, document: dict, echo):
    """Block-bootstrap intervals of the refined fit, added to ``document``."""
    warning = check_blocks(len(data.blocks), data.block_size)
    if warning:
        echo(f"warning: {warning}")
    with stage("bootstrap", settings.bootstrap, quiet=settings.quiet, unit="replicates") as shown:
        ci = block_bootstrap(data.blocks, data.moments, est, settings.bootstrap, random_state=settings.seed,
                             progress=shown)
    document["methylation_ci"] = ci.methylation_ci.tolist()
    document["transmat_ci"] = ci.transmat_ci.tolist()
    return ci

