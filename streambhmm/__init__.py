"""streambhmm: spectral and EM learning of Binomial HMMs for DNA methylation."""

from .evaluate import MatchedError, match_states, matched_error
from .features import beta_map
from .model import SpectralBinomialHMM
from .moments import Moments, compute_moments
from .simulate import Model, paper_model, population_moments, simulate
from .spectral import SpectrumError

__version__ = "0.1.0"

__all__ = [
    "MatchedError", "Model", "Moments", "SpectralBinomialHMM", "SpectrumError", "beta_map",
    "compute_moments", "match_states", "matched_error", "paper_model", "population_moments",
    "simulate",
]
