"""The spectral estimator (the paper's Feature-Tensor-Decomp) with an hmmlearn-style API."""

from __future__ import annotations

import numpy as np

from . import recovery
from .moments import Moments, compute_moments
from .spectral import decompose

METHYLATION_RECOVERY = ("ratio", "paper")


class SpectralBinomialHMM:
    """Binomial HMM learned by the method of moments in one pass over the data.

    Parameters
    ----------
    n_components : number of hidden states m.
    n_bins : Beta-map granularity D (the paper uses 30).
    random_state : seed (int), ``numpy.random.Generator`` or None for the tensor power
        method's random restarts; the same seed gives the same model.
    methylation_recovery : "ratio" (default; consistent when coverage depends on the
        state) or "paper" (the paper's formula, corrected; assumes it does not).
    n_restarts, n_iter : tensor power method restarts and iterations per component.
    check_spectrum : raise :class:`~streambhmm.spectral.SpectrumError` when the moments
        do not support ``n_components`` states.

    Fitted attributes
    -----------------
    methylation_ : (n_components, n_samples) methylation level of each state and sample.
    transmat_ : (n_components, n_components), ``transmat_[i, j] = P(next=j | current=i)``.
    startprob_ : the stationary distribution. Moments average over all positions, so
        the distribution of the first bin of a sequence is not identifiable from them.
    observation_ : (n_samples * n_bins, n_components) C = E[F(x) | h], the expected feature.
    spectrum_ : singular values of the normalized P13, to judge how many states the data support.
    noise_level_ : the level the m-th singular value must exceed (the spectrum check).
    n_triples_ : number of triples the moments were summed over.
    moments_ : the :class:`~streambhmm.moments.Moments` fitted.
    """

    def __init__(self, n_components: int, n_bins: int = 30, random_state=None,
                 methylation_recovery: str = "ratio", n_restarts: int = 30, n_iter: int = 50,
                 check_spectrum: bool = True):
        self.n_components = n_components
        self.n_bins = n_bins
        self.random_state = random_state
        self.methylation_recovery = methylation_recovery
        self.n_restarts = n_restarts
        self.n_iter = n_iter
        self.check_spectrum = check_spectrum

    def fit(self, methylated, coverage, lengths=None) -> "SpectralBinomialHMM":
        """Fit to counts of shape (n,) or (n, n_samples); ``lengths`` splits sequences."""
        self._check_params(n_samples=None)
        return self.fit_moments(compute_moments(methylated, coverage, lengths, n_bins=self.n_bins))

    def fit_moments(self, moments: Moments) -> "SpectralBinomialHMM":
        """Fit from precomputed :class:`~streambhmm.moments.Moments`."""
        if moments.n_bins != self.n_bins:
            raise ValueError(f"moments use n_bins={moments.n_bins} but the model has n_bins={self.n_bins}")
        self._check_params(moments.n_samples)
        m = self.n_components
        if moments.n_triples < m:
            raise ValueError(
                f"too few triples: {moments.n_triples} consecutive triples cannot support "
                f"{m} states (the moment matrices have rank at most the number of triples)"
            )
        rng = np.random.default_rng(self.random_state)
        dec = decompose(moments, m, rng, n_restarts=self.n_restarts, n_iter=self.n_iter,
                        check_spectrum=self.check_spectrum)
        observation = recovery.normalize_observation(dec.observation, moments.n_samples)
        if self.methylation_recovery == "ratio":
            methylation = recovery.methylation_ratio(observation, dec.whitened.s3, moments)
        else:
            methylation = recovery.methylation_paper(observation, moments)
        transmat, startprob = recovery.transitions(observation, moments)
        self.observation_ = observation
        self.methylation_ = methylation
        self.transmat_ = transmat
        self.startprob_ = startprob
        self.spectrum_ = dec.whitened.p13_singular_values
        self.noise_level_ = dec.whitened.noise_floor
        self.n_triples_ = moments.n_triples
        self.moments_ = moments
        return self

    def _check_params(self, n_samples: int | None) -> None:
        if not isinstance(self.n_components, (int, np.integer)) or self.n_components < 1:
            raise ValueError(f"n_components must be a positive integer, got {self.n_components!r}")
        if not isinstance(self.n_bins, (int, np.integer)) or self.n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {self.n_bins!r}")
        if self.methylation_recovery not in METHYLATION_RECOVERY:
            raise ValueError(f"methylation_recovery must be one of {METHYLATION_RECOVERY}, "
                             f"got {self.methylation_recovery!r}")
        if n_samples is not None and self.n_components > n_samples * self.n_bins:
            raise ValueError(
                f"n_components={self.n_components} is larger than the feature dimension "
                f"n_samples * n_bins = {n_samples} * {self.n_bins} = {n_samples * self.n_bins}"
            )
