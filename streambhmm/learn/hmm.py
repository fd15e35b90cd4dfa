"""Binomial (or beta-binomial) HMM by EM (Baum-Welch), hmmlearn-style (scoring, decoding and
sampling are every model's: streambhmm.learn.base).

log P(x_t | h) = sum_s [log C(c, mu) + mu log p[h, s] + (c - mu) log(1 - p[h, s])]; zero
coverage contributes 0. Including the binomial coefficient makes log-likelihoods comparable
with other tools (hmmlearn's MultinomialHMM on [[mu, c - mu]] rows is the same model for
one sample). With ``emission="betabinomial"`` each state and sample also has an
overdispersion (streambhmm.learn.emissions). Emissions are computed once per distinct (c, mu)
pair and state.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .base import BaseBinomialHMM, EncodedCounts, log_emissions  # noqa: F401 - also public here
from .checks import stationary_weights
from .emissions import START_DISPERSION, add_pair_weights, betabinomial_mstep
from .model import SpectralBinomialHMM
from .refine import fit_threads
from ..moments.features import DEFAULT_N_BINS
from ..moments.validation import refuse_without_reads, validate_counts


@dataclass
class SufficientStats:
    """E-step sums; they add across sequences, chromosomes and segments like moments."""

    loglik: float
    start: np.ndarray  # (m,) posterior of the first bin of each sequence
    trans: np.ndarray  # (m, m) expected transitions
    methylated: np.ndarray  # (m, S) posterior-weighted methylated counts
    coverage: np.ndarray  # (m, S) posterior-weighted coverage
    pairs: list | None = None  # per sample, PairWeights (the beta-binomial's M-step)

    def __add__(self, other: "SufficientStats") -> "SufficientStats":
        return SufficientStats(self.loglik + other.loglik, self.start + other.start, self.trans + other.trans,
                               self.methylated + other.methylated, self.coverage + other.coverage,
                               add_pair_weights(self.pairs, other.pairs))


@dataclass
class ConvergenceMonitor:
    """EM's log-likelihood history, before each M-step and of the final parameters;
    converged after ``n_iter`` M-steps (as hmmlearn's) or when an iteration gains less than
    ``tol + rel_tol * |loglik|`` (has_converged: the one stopping rule of EM, in memory
    and on a store)."""

    tol: float
    n_iter: int
    rel_tol: float = 0.0
    history: list = field(default_factory=list)

    def report(self, loglik: float) -> None:
        self.history.append(float(loglik))

    @property
    def iter(self) -> int:
        return len(self.history)

    @property
    def converged(self) -> bool:
        return self.iter > self.n_iter or has_converged(self.history, self.rel_tol, self.tol)


INITS = ("spectral", "ftd", "random")
PARAMETER_LETTERS = "stmd"


class BinomialHMM(BaseBinomialHMM):
    """Binomial HMM fitted by EM.

    Parameters follow hmmlearn: ``init_params`` names what ``fit`` initializes and
    ``params`` what EM updates ("s" startprob, "t" transmat, "m" methylation); attributes
    the user set and left out of ``init_params`` are kept. ``init="spectral"`` starts from
    the one-pass estimate of the same data (:class:`~streambhmm.learn.model.SpectralBinomialHMM`,
    refined), ``"ftd"`` from the paper's tensor decomposition, ``"random"`` from random
    levels. Each sequence in ``lengths`` starts from ``startprob_``. ``fit`` makes at most
    ``n_iter`` M-steps and stops early when an iteration gains less than ``tol`` (run_em's
    rule, absolute here as hmmlearn's); ``monitor_.history`` holds the log-likelihood before
    each and of the final parameters.

    ``stationary_start=True`` keeps ``startprob_`` equal to the stationary distribution of
    ``transmat_`` instead of estimating it from the first bins: the natural choice for a
    few long sequences (chromosomes), whose first bins say little. ``fit`` checks its result
    like :class:`~streambhmm.learn.model.SpectralBinomialHMM`: a degenerate model raises
    :class:`~streambhmm.learn.checks.DegenerateModelError` unless ``allow_degenerate`` (then it warns).

    ``emission="betabinomial"`` gives each state and sample an overdispersion too
    (``dispersion_``, (n_components, n_samples), the correlation of two reads of a bin;
    streambhmm.learn.emissions), updated with the levels ("m" in ``params``).

    ``limits`` (:class:`~streambhmm.learn.refine.StateLimits`) caps some states' levels and
    overdispersions in every M-step: states defined in advance, such as the hypomethylated
    state of `streambhmm hmr` (:mod:`streambhmm.learn.domains`).
    """

    def __init__(self, n_components: int, n_iter: int = 100, tol: float = 1e-4, init: str = "spectral",
                 random_state=None, params: str = "stm", init_params: str = "stm", n_bins: int = DEFAULT_N_BINS,
                 stationary_start: bool = False, allow_degenerate: bool = False, emission: str = "binomial",
                 limits=None):
        super().__init__(n_components, n_bins, random_state, allow_degenerate, emission, limits, n_iter=n_iter,
                         tol=tol, init=init, params=params, init_params=init_params, stationary_start=stationary_start)
        self._check_emission()

    # -- initialization -------------------------------------------------------------
    def initialize(self, methylated, coverage, lengths=None) -> "BinomialHMM":
        """Set the starting parameters as ``fit`` does (``init``, ``init_params``)."""
        self._initialize(*validate_counts(methylated, coverage, lengths))
        return self

    def _initialize(self, meth, cov, lengths) -> None:
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        names = {"s": "startprob_", "t": "transmat_", "m": "methylation_"}
        if self.emission == "betabinomial":
            names["d"] = "dispersion_"
        if not any(k in self.init_params or not hasattr(self, name) for k, name in names.items()):
            return  # all set by the user, none to initialize (hmmlearn's init_params="")
        if self.init == "random":
            self.start_from(*random_parameters(self.n_components, meth.shape[1], self.random_state))
            return
        spectral = SpectralBinomialHMM(self.n_components, n_bins=self.n_bins, random_state=self.random_state,
                                       method="refined" if self.init == "spectral" else "ftd",
                                       check_spectrum=self.init == "spectral", allow_degenerate=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a poor start is EM's to improve; the result is checked
            spectral.fit(meth, cov, lengths)
        self.start_from(spectral.startprob_, spectral.transmat_, spectral.methylation_)

    def start_from(self, startprob, transmat, methylation, dispersion=None) -> "BinomialHMM":
        """Set EM's starting point: the parameters named in ``init_params`` (and any not
        yet set) are moved strictly inside their ranges so that EM can move all of them.
        A beta-binomial model without ``dispersion`` starts from START_DISPERSION."""
        if "s" in self.init_params or not hasattr(self, "startprob_"):
            self.startprob_ = _normalize(np.maximum(startprob, 1e-6))
        if "t" in self.init_params or not hasattr(self, "transmat_"):
            self.transmat_ = _normalize(np.maximum(transmat, 1e-6), axis=1)
        if "m" in self.init_params or not hasattr(self, "methylation_"):
            self.methylation_ = np.clip(methylation, 1e-4, 1 - 1e-4)
        if self.emission == "betabinomial" and ("m" in self.init_params or not hasattr(self, "dispersion_")):
            self.dispersion_ = np.full(np.shape(self.methylation_), START_DISPERSION) if dispersion is None \
                else np.asarray(dispersion, np.float64).copy()
        if self.stationary_start:
            self.startprob_ = stationary_weights(self.transmat_)
        return self

    # -- E and M steps --------------------------------------------------------------
    def e_step(self, methylated, coverage=None, lengths=None) -> SufficientStats:
        """Sufficient statistics of the current parameters (add them across data).
        ``methylated`` may be counts encoded once (EncodedCounts.of) for many E-steps."""
        data = methylated if isinstance(methylated, EncodedCounts) else EncodedCounts.of(methylated, coverage, lengths)
        loglik, start, trans, code_weights, _ = self._fb(data)
        return SufficientStats(loglik, start, trans,
                               *data.table.statistics(code_weights, self.emission == "betabinomial"))

    def m_step(self, stats: SufficientStats) -> None:
        if "s" in self.params and stats.start.sum() > 0 and not self.stationary_start:
            self.startprob_ = _normalize(stats.start)
        if "t" in self.params:
            rows = stats.trans.sum(axis=1, keepdims=True)
            self.transmat_ = np.where(rows > 0, stats.trans / np.where(rows > 0, rows, 1), self.transmat_)
        if self.stationary_start:
            self.startprob_ = stationary_weights(self.transmat_)
        if "m" in self.params:
            with np.errstate(invalid="ignore", divide="ignore"):
                levels = stats.methylated / stats.coverage
            self.methylation_ = np.where(stats.coverage > 0, levels, self.methylation_)
            caps = (None, None) if self.limits is None else (self.limits.level, self.limits.dispersion)
            if caps[0] is not None:
                self.methylation_ = np.minimum(self.methylation_, caps[0][:, None])
            if self.emission == "betabinomial":  # from the binomial update and the current overdispersion
                start = np.clip(self.methylation_, 1e-4, 1 - 1e-4)
                # the states' problems in threads, one per core: on deep coverage (RRBS) they were
                # most of dmr's EM (each Newton step sums over every coverage up to the deepest)
                with ThreadPoolExecutor(fit_threads(self.n_components)) as pool:
                    updated = [betabinomial_mstep(pairs, start[:, s], self.dispersion_[:, s], *caps, pool=pool)
                               for s, pairs in enumerate(stats.pairs)]
                self.methylation_ = np.stack([u[0] for u in updated], axis=1)
                self.dispersion_ = np.stack([u[1] for u in updated], axis=1)

    def _check_params(self) -> None:
        super()._check_params()
        if not isinstance(self.n_iter, (int, np.integer)) or self.n_iter < 0:
            raise ValueError(f"n_iter must be a non-negative integer, got {self.n_iter!r}")
        for name in ("params", "init_params"):
            unknown = set(getattr(self, name)) - set(PARAMETER_LETTERS)
            if unknown:
                raise ValueError(f"{name} may hold the letters {PARAMETER_LETTERS} (startprob, transmat, methylation, "
                                 f"dispersion), got {getattr(self, name)!r}")

    def fit(self, methylated, coverage, lengths=None) -> "BinomialHMM":
        self._check_params()
        meth, cov, lengths = validate_counts(methylated, coverage, lengths)
        refuse_without_reads(cov)
        self._initialize(meth, cov, lengths)
        data = EncodedCounts(meth, cov, lengths)  # once for all iterations
        run_em(self, lambda: self.e_step(data), self.n_iter, tol=self.tol)
        self.n_features_in_ = meth.shape[1]
        self.check_fit()
        return self

    def _degeneracy_terms(self) -> tuple[str, np.ndarray, str]:
        return ("EM", stationary_weights(self.transmat_),
                "other starts (fit --seed, --em-starts; BinomialHMM init, random_state)")

def run_em(hmm: BinomialHMM, e_step, n_iter: int, rel_tol: float = 0.0, report=None, tol: float = 0.0
           ) -> list[float]:
    """EM, in memory (BinomialHMM.fit) or on a store: alternate ``e_step()``
    (SufficientStats of ``hmm``'s current parameters, from any data source) and
    ``hmm.m_step`` for at most ``n_iter`` M-steps, stopping early when an iteration gains
    less than ``tol + rel_tol * |loglik|`` (has_converged). ``hmm.monitor_`` is the
    ConvergenceMonitor. Returns the log-likelihood of each E-step; the last is that of
    ``hmm``'s final parameters. ``report(iteration, loglik)`` is called after each E-step."""
    monitor = hmm.monitor_ = ConvergenceMonitor(tol, n_iter, rel_tol)
    while True:
        stats = e_step()
        monitor.report(stats.loglik)
        if report is not None:
            report(monitor.iter - 1, stats.loglik)
        if monitor.converged:
            return monitor.history
        hmm.m_step(stats)


def has_converged(history: list, rel_tol: float = 0.0, tol: float = 0.0) -> bool:
    """EM's stopping rule: the last iteration gained less than ``tol + rel_tol * |loglik|``
    (an absolute and a relative tolerance, as numpy.isclose's; the store's EM uses the
    relative one, BinomialHMM's ``tol`` the absolute one, as hmmlearn's)."""
    if len(history) < 2:
        return False
    return history[-1] - history[-2] < (tol + rel_tol * abs(history[-1]) if rel_tol else tol)


def random_parameters(n_components: int, n_samples: int, random_state=None):
    """(startprob, transmat, methylation) for a random start: sorted uniform levels and a
    transition matrix with at least 0.5 on the diagonal."""
    rng = np.random.default_rng(random_state)
    levels = np.sort(rng.uniform(0.02, 0.98, (n_components, n_samples)), axis=0)
    trans = rng.dirichlet(np.ones(n_components), size=n_components) * 0.5 + np.eye(n_components) * 0.5
    return np.full(n_components, 1.0 / n_components), trans, levels


def _normalize(a: np.ndarray, axis=None) -> np.ndarray:
    return a / a.sum(axis=axis, keepdims=axis is not None)
