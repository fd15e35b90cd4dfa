"""What the Binomial HMMs (BinomialHMM, SpectralBinomialHMM) share, in hmmlearn's manner: their
common parameters, the checks of those, ``validate`` of the fitted parameters and ``check_fit``."""

from __future__ import annotations

import numpy as np

from .checks import degeneracy_problems, refuse_degenerate
from .emissions import EMISSIONS


class BaseBinomialHMM:
    """A Binomial (or beta-binomial) HMM of ``n_components`` states.

    Fitted attributes: ``startprob_`` (n_components,), ``transmat_`` (n_components,
    n_components), ``methylation_`` (n_components, n_samples) and, with
    ``emission="betabinomial"``, ``dispersion_`` (n_components, n_samples). A subclass
    says how its fit is checked for degeneracy (``_degeneracy_terms``) and passes its own
    parameters (``own``) to be set with the shared ones."""

    def __init__(self, n_components: int, n_bins: int, random_state, allow_degenerate: bool, emission: str,
                 limits, **own):
        self.n_components = n_components
        self.n_bins = n_bins
        self.random_state = random_state
        self.allow_degenerate = allow_degenerate
        self.emission = emission
        self.limits = limits
        for name, value in own.items():
            setattr(self, name, value)

    @property
    def dispersion(self) -> np.ndarray | None:
        """The emissions' overdispersion (None for the binomial)."""
        return np.asarray(self.dispersion_, dtype=np.float64) if self.emission == "betabinomial" else None

    def _check_emission(self) -> None:
        if self.emission not in EMISSIONS:
            raise ValueError(f"emission must be one of {', '.join(EMISSIONS)}, got {self.emission!r}")

    def _check_params(self) -> None:
        """The checks of the parameters every fit makes before it starts."""
        if not isinstance(self.n_components, (int, np.integer)) or self.n_components < 1:
            raise ValueError(f"n_components must be a positive integer, got {self.n_components!r}")
        if not isinstance(self.n_bins, (int, np.integer)) or self.n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {self.n_bins!r}")
        self._check_emission()

    def validate(self, n_samples: int) -> None:
        """Raise ValueError unless the parameters are those of ``n_components`` states and
        ``n_samples`` samples: shapes, rows summing to 1, levels in [0, 1]."""
        m = self.n_components
        for name, shape in (("startprob_", (m,)), ("transmat_", (m, m)), ("methylation_", (m, n_samples))):
            value = np.asarray(getattr(self, name))
            if value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}, expected {shape}")
        if not np.allclose(self.transmat_.sum(axis=1), 1.0) or not np.isclose(self.startprob_.sum(), 1.0):
            raise ValueError("startprob_ and the rows of transmat_ must sum to 1")
        if ((self.methylation_ < 0) | (self.methylation_ > 1)).any():
            raise ValueError("methylation_ must lie in [0, 1]")

    def _degeneracy_terms(self) -> tuple[str, np.ndarray, str]:
        """(the fit's name, the states' weights, what else to try) for ``check_fit``."""
        raise NotImplementedError

    def check_fit(self, clipped=None) -> None:
        """Raise (or, with ``allow_degenerate``, warn) when the fitted model is degenerate
        (:mod:`streambhmm.learn.checks`); ``clipped``: levels the estimator clipped."""
        what, weights, remedy = self._degeneracy_terms()
        problems = degeneracy_problems(self.methylation_, self.transmat_, weights, clipped)
        refuse_degenerate(problems, what, self.n_components, remedy, self.allow_degenerate)
