"""The one-pass estimators with an hmmlearn-style API: the paper's Feature-Tensor-Decomp
(``method="ftd"``) and, by default, its estimate refined on the same moments
(``method="refined"``, streambhmm.learn.refine). Neither reads the counts twice."""

from __future__ import annotations

import numpy as np

from . import recovery
from .base import BaseBinomialHMM
from .checks import stationary_weights
from ..moments.features import DEFAULT_N_BINS, DEFAULT_PROJECTION_DIM, projection_for
from ..moments.sums import Moments, compute_moments
from ..moments.validation import refuse_without_reads, validate_counts
from .criterion import Weights, objective_for
from .refine import quantile_levels, refine, sticky_start
from .spectral import SpectrumError, decompose, whiten

METHODS = ("refined", "ftd")
TRIPLES_PER_PARAMETER = 10  # fewer data cannot pin the parameters down
METHYLATION_RECOVERY = ("ratio", "paper")


class TooFewDataError(ValueError):
    """Too few triples of bins for the model's parameters (``n_triples`` of ``needed``)."""

    def __init__(self, message: str, n_triples: int, needed: int):
        super().__init__(message)
        self.n_triples, self.needed = n_triples, needed


class SpectralBinomialHMM(BaseBinomialHMM):
    """Binomial HMM learned by the method of moments in one pass over the data.

    Parameters
    ----------
    n_components : number of hidden states m.
    n_bins : Beta-map granularity D (the paper uses 30).
    method : "refined" (default): the tensor decomposition's estimate and a few other starts
        refined by fitting the model to the moments and the single-bin histogram
        (:mod:`streambhmm.learn.refine`); "ftd": the paper's estimator alone.
    random_state : seed (int), ``numpy.random.Generator`` or None for the tensor power
        method's restarts and the refinement's random starts; the same seed gives the same model.
    methylation_recovery : FTD's levels: "ratio" (default; consistent when coverage depends on
        the state) or "paper" (the paper's formula, corrected; assumes it does not).
    n_restarts, n_iter : tensor power method restarts and iterations per component.
    check_spectrum : for "ftd", raise :class:`~streambhmm.learn.spectral.SpectrumError` when P13's
        spectrum does not support ``n_components`` states. "refined" does not need the
        decomposition: it then starts from the other starts and reports
        ``spectrum_supported_ = False``.
    n_random_starts : seeded random starts of the refinement (besides FTD's estimate and a
        spread of levels at the quantiles of the marginal features).
    n_finished : the screened starts with the lowest criterion that the refinement runs to
        convergence (:func:`~streambhmm.learn.refine.refine`'s ``keep``).
    tol : the refinement's relative tolerance on the criterion (L-BFGS-B's ``ftol``).
    allow_degenerate : a degenerate fit (:mod:`streambhmm.learn.checks`) raises
        :class:`~streambhmm.learn.checks.DegenerateModelError` unless this is True; then it warns
        (:class:`~streambhmm.learn.checks.DegenerateModelWarning`) and keeps the fit.
    criterion : :class:`~streambhmm.learn.refine.Weights` of the refinement's criterion; None: the
        default, chosen by measurement (docs/methods/one-pass.md, scripts/refine_weights.py).
    feature : the feature ``fit`` sums moments of: "beta" (each sample's D-bin Beta map,
        concatenated: dimension S * D), "projected" (a seeded projection of those to
        ``projection_dim`` dimensions, whatever S; features.projection_matrix) or "auto"
        (projected when S * D > 64). ``fit_moments`` fits the moments it is given.
    projection_dim, projection_seed : K and the seed of the projected feature.
    emission : "binomial" or "betabinomial": each state's (and sample's) level is then
        Beta-distributed across bins with an overdispersion (``dispersion_``), fitted by the
        refinement from the same moments (:mod:`streambhmm.learn.overdispersion`); "ftd" is
        binomial only.
    limits : :class:`~streambhmm.learn.refine.StateLimits` capping some states' levels and
        overdispersions (the refinement only): states defined in advance, such as the
        hypomethylated state of :func:`streambhmm.learn.states.hmr_model`.

    Fitted attributes
    -----------------
    methylation_ : (n_components, n_samples) methylation level of each state and sample.
    transmat_ : (n_components, n_components), ``transmat_[i, j] = P(next=j | current=i)``.
    startprob_ : the stationary distribution of ``transmat_`` (each state's share of the
        bins). Moments average over all positions, so the distribution of the first bin of a
        sequence is not identifiable from them.
    spectrum_ : singular values of the normalized P13, to judge how many states the data support.
    noise_level_ : the level the m-th singular value must exceed (the spectrum check).
    spectrum_supported_ : whether it does.
    dispersion_ : (n_components, n_samples) the overdispersion (``emission="betabinomial"``).
    loss_ : the refinement's criterion at the fit (per triple; lower is better), or None for "ftd".
    coverage_ : (n_components, n_samples) each state's expected coverage ("refined"): the
        refinement lets coverage depend on the state (CpG-dense bins get more reads).
    coverage_buckets_ : per sample, (n_components, buckets): each state's distribution over
        the sample's non-empty coverage buckets (features.COVERAGE_BUCKETS).
    starts_ : {start label: criterion} of the refinement's starts; ``start_``: the winner.
    observation_ : (dim, n_components) E[F(x) | h], the expected feature (dim: S * D, or K
        when projected).
    n_triples_ : number of triples the moments were summed over.
    moments_ : the :class:`~streambhmm.moments.sums.Moments` fitted.
    """

    def __init__(self, n_components: int, n_bins: int = DEFAULT_N_BINS, method: str = "refined", random_state=None,
                 methylation_recovery: str = "ratio", n_restarts: int = 30, n_iter: int = 50,
                 check_spectrum: bool = True, n_random_starts: int = 8, allow_degenerate: bool = False,
                 criterion=None, feature: str = "auto", projection_dim: int = DEFAULT_PROJECTION_DIM,
                 projection_seed: int = 0, emission: str = "binomial", limits=None, n_finished: int = 2,
                 tol: float = 1e-8):
        super().__init__(n_components, n_bins, random_state, allow_degenerate, emission, limits, method=method,
                         methylation_recovery=methylation_recovery, n_restarts=n_restarts, n_iter=n_iter,
                         check_spectrum=check_spectrum, n_random_starts=n_random_starts, criterion=criterion,
                         feature=feature, projection_dim=projection_dim, projection_seed=projection_seed,
                         n_finished=n_finished, tol=tol)

    def fit(self, methylated, coverage, lengths=None) -> "SpectralBinomialHMM":
        """Fit to counts of shape (n,) or (n, n_samples); ``lengths`` splits sequences."""
        self._check_params(n_samples=None)
        methylated, coverage, lengths = validate_counts(methylated, coverage, lengths)
        refuse_without_reads(coverage)
        dim = projection_for(self.feature, methylated.shape[1], self.n_bins, self.projection_dim)
        return self.fit_moments(compute_moments(methylated, coverage, lengths, n_bins=self.n_bins,
                                                projection_dim=dim, projection_seed=self.projection_seed))

    def fit_moments(self, moments: Moments, progress=None) -> "SpectralBinomialHMM":
        """Fit from precomputed :class:`~streambhmm.moments.sums.Moments`; ``progress(done,
        total)`` follows the refinement's starts."""
        if moments.n_bins != self.n_bins:
            raise ValueError(f"moments use n_bins={moments.n_bins} but the model has n_bins={self.n_bins}")
        self._check_params(moments.n_samples, moments.projection_dim or None)
        m = self.n_components
        n_parameters = m * moments.n_samples + m * (m - 1)
        if moments.n_triples < TRIPLES_PER_PARAMETER * n_parameters:
            raise TooFewDataError(
                f"too few data for {m} states: {moments.n_triples:,} triples of bins for {n_parameters} parameters "
                f"(levels and transitions); at least {TRIPLES_PER_PARAMETER} triples per parameter are needed. "
                f"Use fewer states, or more data.", moments.n_triples, TRIPLES_PER_PARAMETER * n_parameters
            )
        rng = np.random.default_rng(self.random_state)
        ftd, clipped = self._ftd(moments, rng)
        self.moments_, self.n_triples_ = moments, moments.n_triples
        if self.method == "ftd":
            self.methylation_, self.transmat_ = ftd
            self.startprob_ = stationary_weights(self.transmat_)
            self.loss_, self.starts_, self.start_ = None, {}, "ftd"
        else:
            self._refine(moments, ftd, rng, progress)
            clipped = None
        self.check_fit(clipped)
        return self

    def _ftd(self, moments: Moments, rng):
        """The paper's estimate ((levels, transmat), clipped levels), or (None, None) when the
        refinement should not start from it (the spectrum check refuses, or it breaks)."""
        m = self.n_components
        wh = whiten(moments, m, check_spectrum=False)
        self.spectrum_, self.noise_level_ = wh.p13_singular_values, wh.noise_floor
        self.spectrum_supported_ = wh.refusal is None
        if self.check_spectrum and wh.refusal is not None:
            if self.method == "ftd":
                raise SpectrumError(wh.refusal)
            return None, None  # the refinement starts from the other starts only
        try:
            dec = decompose(moments, m, rng, n_restarts=self.n_restarts, n_iter=self.n_iter, whitened=wh)
            observation = recovery.normalize_observation(dec.observation, moments.n_samples, moments.projected)
            if self.methylation_recovery == "ratio":
                levels, clipped = recovery.methylation_ratio(observation, dec.whitened.s3, moments)
            else:
                levels, clipped = recovery.methylation_paper(observation, moments)
            transmat, _ = recovery.transitions(observation, moments)
        except np.linalg.LinAlgError:  # the decomposition broke down numerically
            if self.method != "ftd":
                return None, None
            levels = np.full((m, moments.n_samples), np.nan)
            transmat, clipped, observation = np.full((m, m), np.nan), None, None
        self.observation_ = observation
        if self.method != "ftd" and not (np.isfinite(levels).all() and np.isfinite(transmat).all()):
            return None, None
        return (levels, transmat), clipped

    def _refine(self, moments: Moments, ftd, rng, progress=None) -> None:
        m, n_samples = self.n_components, moments.n_samples
        starts = [] if ftd is None else [("ftd", *ftd)]
        starts.append(("quantiles", quantile_levels(moments, m), 0.9 * np.eye(m) + 0.1 / m))
        starts += [(f"random{i}", *sticky_start(m, n_samples, rng)) for i in range(self.n_random_starts)]
        objective = objective_for(moments, self.criterion or Weights(), self.emission)
        result = refine(objective, starts, keep=self.n_finished, tol=self.tol, limits=self.limits,
                        progress=progress)
        self.methylation_, self.transmat_, self.startprob_ = result.methylation, result.transmat, result.startprob
        if result.dispersion is not None:
            self.dispersion_ = result.dispersion
        self.coverage_, self.coverage_buckets_ = result.mean_coverage, result.coverage
        self.loss_, self.starts_, self.start_ = result.loss, dict(result.starts), result.start
        observation = objective.observation(result.methylation, result.coverage, result.dispersion)[0]
        self.observation_ = observation if objective.projection is None else objective.projection @ observation

    def _degeneracy_terms(self) -> tuple[str, np.ndarray, str]:
        other = "method='refined' (fit --method refined)" if self.method == "ftd" else "EM (fit --method em)"
        return self.method, self.startprob_, other

    def _check_params(self, n_samples: int | None = None, dim: int | None = None) -> None:
        super()._check_params()
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.emission == "betabinomial" and self.method == "ftd":
            raise ValueError("the tensor decomposition (method='ftd') fits binomial emissions; "
                             "use method='refined' for emission='betabinomial'")
        for name, least in (("n_restarts", 1), ("n_iter", 1), ("n_random_starts", 0), ("n_finished", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
        if self.methylation_recovery not in METHYLATION_RECOVERY:
            raise ValueError(f"methylation_recovery must be one of {METHYLATION_RECOVERY}, "
                             f"got {self.methylation_recovery!r}")
        if n_samples is not None and self.n_components > n_samples * self.n_bins:
            raise ValueError(
                f"n_components={self.n_components} (fit --states) is larger than the feature dimension "
                f"n_samples * n_bins = {n_samples} * {self.n_bins} = {n_samples * self.n_bins} (samples x --bins): "
                f"fit fewer states, or use more --bins"
            )
        if dim is not None and self.n_components > dim:
            raise ValueError(f"n_components={self.n_components} is larger than the projected feature's dimension "
                             f"{dim}; use a larger projection_dim")
