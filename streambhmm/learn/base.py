"""What the Binomial HMMs (BinomialHMM, SpectralBinomialHMM) share, in hmmlearn's manner: their
common parameters (``get_params``, ``set_params``) and the checks of those, ``validate`` of the
fitted parameters, ``check_fit``, and scoring, decoding and sampling with the parameters."""

from __future__ import annotations

import inspect

import numpy as np

from . import hmm_kernels
from .checks import NotFittedError, degeneracy_problems, refuse_degenerate, validate_parameters
from .emissions import EMISSIONS, MAX_DISPERSION, EmissionTable
from .simulate import Model, simulate
from ..moments.validation import validate_counts

DECODERS = ("viterbi", "map")


class EncodedCounts:
    """Validated counts ready for the recursion: their emission table and lengths; with the
    recursion's buffers, reused by every iteration (BinomialHMM.e_step)."""

    def __init__(self, methylated: np.ndarray, coverage: np.ndarray, lengths: np.ndarray):
        self.table = EmissionTable(methylated, coverage)
        self.lengths = lengths
        self.log_b = None
        self.workspace = hmm_kernels.Workspace()

    @classmethod
    def of(cls, methylated, coverage, lengths=None) -> "EncodedCounts":
        """Counts of shape (n,) or (n, n_samples), validated (moments.validation), encoded."""
        return cls(*validate_counts(methylated, coverage, lengths))


def log_emissions(methylated: np.ndarray, coverage: np.ndarray, methylation: np.ndarray,
                  dispersion: np.ndarray | None = None) -> np.ndarray:
    """Per-bin log P(x_t | h), shape (n, m), from validated (n, S) counts (``dispersion``:
    the beta-binomial's, (m, S))."""
    return EmissionTable(methylated, coverage).log_b(methylation, dispersion)


class BaseBinomialHMM:
    """A Binomial (or beta-binomial) HMM of ``n_components`` states.

    Fitted attributes: ``startprob_`` (n_components,), ``transmat_`` (n_components,
    n_components), ``methylation_`` (n_components, n_samples) and, with
    ``emission="betabinomial"``, ``dispersion_`` (n_components, n_samples). A subclass
    says how its fit is checked for degeneracy (``_degeneracy_terms``) and passes its own
    parameters (``own``) to be set with the shared ones. Every constructor argument is an
    attribute of the same name (``get_params``, ``set_params``: scikit-learn's ``clone``
    works)."""

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

    # -- parameters, as scikit-learn's estimators ------------------------------------
    @classmethod
    def _parameter_defaults(cls) -> dict:
        return {p.name: p.default for p in inspect.signature(cls.__init__).parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    def get_params(self, deep: bool = True) -> dict:
        """The constructor's arguments as set now (``deep`` is accepted for scikit-learn)."""
        return {name: getattr(self, name) for name in self._parameter_defaults()}

    def set_params(self, **params) -> "BaseBinomialHMM":
        """Set constructor arguments; an unknown name is refused."""
        known = self._parameter_defaults()
        for name, value in params.items():
            if name not in known:
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}; its parameters: "
                                 f"{', '.join(known)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = self._parameter_defaults()
        changed = [f"{name}={value!r}" for name, value in self.get_params().items()
                   if not _is_default(value, defaults[name])]
        return f"{type(self).__name__}({', '.join(changed)})"

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

    # -- the fitted parameters -------------------------------------------------------
    def _check_fitted(self) -> None:
        names = ["startprob_", "transmat_", "methylation_"] + (["dispersion_"] if self.emission == "betabinomial"
                                                               else [])
        missing = [name for name in names if not hasattr(self, name)]
        if missing:
            raise NotFittedError(f"this {type(self).__name__} has no {', '.join(missing)} yet: call fit, or set "
                                 f"the parameters")

    def validate(self, n_samples: int) -> None:
        """Raise ValueError unless the parameters are those of ``n_components`` states and
        ``n_samples`` samples: shapes, finite values, rows summing to 1, levels in [0, 1]
        (and overdispersions in [0, MAX_DISPERSION]); NotFittedError when one is not set.
        Parameters set as lists become arrays."""
        self._check_fitted()
        m = self.n_components
        for name, shape in (("startprob_", (m,)), ("transmat_", (m, m)), ("methylation_", (m, n_samples))):
            value = np.asarray(getattr(self, name))
            if value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}, expected {shape}")
        self.methylation_, self.transmat_, self.startprob_ = validate_parameters(
            self.methylation_, self.transmat_, self.startprob_, n_samples, source=f"{type(self).__name__}")
        if self.emission == "betabinomial":
            dispersion = np.asarray(self.dispersion_, dtype=np.float64)
            if dispersion.shape != (m, n_samples):
                raise ValueError(f"dispersion_ has shape {dispersion.shape}, expected {(m, n_samples)}")
            if not (np.isfinite(dispersion).all() and (dispersion >= 0).all() and (dispersion <= MAX_DISPERSION).all()):
                raise ValueError(f"dispersion_ must lie in [0, {MAX_DISPERSION}] (the overdispersion; 0 is the "
                                 f"binomial), got {np.array2string(dispersion, precision=4)[:200]}")
            self.dispersion_ = dispersion

    def _degeneracy_terms(self) -> tuple[str, np.ndarray, str]:
        """(the fit's name, the states' weights, what else to try) for ``check_fit``."""
        raise NotImplementedError

    def check_fit(self, clipped=None) -> None:
        """Raise (or, with ``allow_degenerate``, warn) when the fitted model is degenerate
        (:mod:`streambhmm.learn.checks`); ``clipped``: levels the estimator clipped."""
        what, weights, remedy = self._degeneracy_terms()
        problems = degeneracy_problems(self.methylation_, self.transmat_, weights, clipped, self.dispersion)
        refuse_degenerate(problems, what, self.n_components, remedy, self.allow_degenerate)

    # -- scoring, decoding and sampling ----------------------------------------------
    def _fb(self, data: EncodedCounts, want_posteriors=False):
        self.validate(data.table.codes.shape[0])
        data.log_b = data.table.log_b(self.methylation_, self.dispersion, data.log_b)
        return hmm_kernels.forward_backward(data.log_b, data.lengths, self.startprob_, self.transmat_,
                                             data.table.codes, data.table.keys.size, want_posteriors,
                                             np.ones(self.n_components), data.workspace)

    def score(self, methylated, coverage, lengths=None) -> float:
        """Total log-likelihood, binomial coefficients included."""
        return float(self._fb(EncodedCounts.of(methylated, coverage, lengths))[0])

    def score_samples(self, methylated, coverage, lengths=None) -> tuple[float, np.ndarray]:
        """(total log-likelihood, posterior state probabilities (n, n_components))."""
        result = self._fb(EncodedCounts.of(methylated, coverage, lengths), want_posteriors=True)
        return float(result[0]), result[4]

    def predict_proba(self, methylated, coverage, lengths=None) -> np.ndarray:
        """Posterior state probabilities, shape (n, n_components)."""
        return self.score_samples(methylated, coverage, lengths)[1]

    def decode(self, methylated, coverage, lengths=None, algorithm: str | None = None) -> tuple[float, np.ndarray]:
        """(log-probability, states). ``algorithm="viterbi"`` (the default): the most probable
        paths and their log-probability; ``"map"``: each bin's most probable state and the
        sum of the log of its posterior."""
        algorithm = algorithm or "viterbi"
        if algorithm not in DECODERS:
            raise ValueError(f"algorithm must be one of {', '.join(DECODERS)}, got {algorithm!r}")
        meth, cov, lengths = validate_counts(methylated, coverage, lengths)
        if algorithm == "map":
            posteriors = self._fb(EncodedCounts(meth, cov, lengths), want_posteriors=True)[4]
            with np.errstate(divide="ignore"):
                return float(np.log(posteriors.max(axis=1)).sum()), posteriors.argmax(axis=1)
        self.validate(meth.shape[1])
        log_b = log_emissions(meth, cov, self.methylation_, self.dispersion)
        with np.errstate(divide="ignore"):
            states, logprob = hmm_kernels.viterbi(log_b, lengths, np.log(self.startprob_), np.log(self.transmat_))
        return float(logprob), states

    def predict(self, methylated, coverage, lengths=None) -> np.ndarray:
        """Most probable state of each bin along the best path (Viterbi)."""
        return self.decode(methylated, coverage, lengths)[1]

    def sample(self, n_samples: int | None = None, random_state=None, coverage=20.0, lengths=None):
        """Draw (methylated, coverage, states) of ``n_samples`` bins (default 1), or of
        sequences of ``lengths``; coverage is Poisson with the given mean(s). ``random_state``
        None uses the model's (hmmlearn's convention: an int seed gives the same draw each time)."""
        if lengths is None:
            n_samples = 1 if n_samples is None else n_samples
            if not isinstance(n_samples, (int, np.integer)) or n_samples < 0:
                raise ValueError(f"n_samples must be a non-negative integer, got {n_samples!r}")
            lengths = [n_samples]
        elif n_samples is not None and n_samples != sum(lengths):
            raise ValueError(f"n_samples={n_samples} but lengths sum to {sum(lengths)}; give one of them")
        self._check_fitted()  # before its levels are read
        levels = np.asarray(self.methylation_)  # one sample's levels as a vector: validate names the shape wanted
        self.validate(levels.shape[1] if levels.ndim == 2 else 1)
        mdl = Model(self.methylation_, self.transmat_, self.startprob_)
        sim = simulate(mdl, [int(k) for k in lengths], coverage=coverage,
                       random_state=self.random_state if random_state is None else random_state,
                       dispersion=self.dispersion)
        return sim.methylated, sim.coverage, sim.states


def _is_default(value, default) -> bool:
    if value is default:
        return True
    try:
        return type(value) is type(default) and bool(value == default)
    except (TypeError, ValueError):
        return False
