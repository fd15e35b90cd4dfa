"""Checks on models: a fitted model that is broken is refused, a model file that is malformed
is rejected with the file named, before anything uses it.

A fit is *degenerate* when its parameters cannot describe a methylome:
- a value is NaN or infinite;
- a state has (near) zero stationary weight (below MIN_WEIGHT): it describes no bins;
- the chain is reducible, counting only transitions above MIN_TRANSITION: some state can
  never be left or never be reached; the (near) identity matrix is the extreme case;
- a level was clipped to exactly 0 or 1 by the estimator (the spectral ratio fell outside
  [0, 1]): the data did not say so, the estimate broke;
- two states have the same level (and overdispersion) in every sample, within SAME_LEVEL: one
  state in two, as when every read is methylated and each level sits at the estimator's bound.
"""

from __future__ import annotations

import warnings
from typing import Callable, TypeVar

import numpy as np
from scipy.sparse.csgraph import connected_components

MIN_WEIGHT = 1e-4  # a state below one bin in 10,000
MIN_TRANSITION = 1e-6  # rarer than once per 100 Mb of 100-bp bins: no transition
SAME_LEVEL = 1e-6  # levels closer than this in every sample: one state (fitted levels are far apart or equal)
ROW_TOLERANCE = 1e-6


T = TypeVar("T")


class DegenerateModelError(ValueError):
    """A fit produced parameters that cannot describe the data (see :mod:`streambhmm.learn.checks`)."""


class NotFittedError(ValueError, AttributeError):
    """A model used before it has parameters (scikit-learn's and hmmlearn's convention)."""


class DegenerateModelWarning(UserWarning):
    """Issued instead of :class:`DegenerateModelError` when the caller allows degenerate models."""


def fit_or_refusal(fit: Callable[[], T]) -> tuple[T | None, str | None, list[str]]:
    """Run ``fit``: (its result, None, the warnings it gave), or (None, why, []) when it
    refuses a degenerate model (DegenerateModelError)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DegenerateModelWarning)
            result = fit()
    except DegenerateModelError as exc:
        return None, str(exc), []
    return result, None, [str(w.message) for w in caught]


def stationary_weights(transmat: np.ndarray) -> np.ndarray:
    """The stationary distribution (least squares, for any chain, reducible ones included)."""
    a = np.asarray(transmat, dtype=np.float64)
    m = a.shape[0]
    system = np.vstack([(a - np.eye(m)).T, np.ones((1, m))])
    rhs = np.zeros(m + 1)
    rhs[-1] = 1.0
    pi = np.clip(np.linalg.lstsq(system, rhs, rcond=None)[0], 0.0, None)
    return pi / pi.sum() if pi.sum() > 0 else np.full(m, 1.0 / m)


def degeneracy_problems(methylation, transmat, startprob, clipped=None, dispersion=None) -> list[str]:
    """What is wrong with fitted parameters, one sentence each (empty: nothing); ``dispersion``:
    the beta-binomial's overdispersions (two states of one level and other dispersions differ)."""
    p = np.asarray(methylation, dtype=np.float64)
    a = np.asarray(transmat, dtype=np.float64)
    start = np.asarray(startprob, dtype=np.float64)
    problems = []
    for name, value in (("levels", p), ("transition matrix", a), ("state weights", start)):
        if not np.isfinite(value).all():
            problems.append(f"the {name} contain NaN or infinite values")
    if problems:
        return problems
    weights = start
    empty = np.flatnonzero(weights < MIN_WEIGHT)
    if empty.size:
        problems.append(f"state(s) {', '.join(map(str, empty))} have (near) zero weight "
                        f"({', '.join(f'{weights[h]:.2g}' for h in empty)})")
    n_classes, labels = connected_components(a > MIN_TRANSITION, directed=True, connection="strong")
    if n_classes > 1:
        stay = np.diag(a)
        if (stay > 1 - MIN_TRANSITION).all():
            problems.append("the transition matrix is (nearly) the identity: no state is ever left")
        else:
            groups = [np.flatnonzero(labels == k).tolist() for k in range(n_classes)]
            problems.append(f"the chain is reducible: states split into {n_classes} groups that do not "
                            f"communicate ({'; '.join(','.join(map(str, g)) for g in groups)})")
    spread = np.zeros_like(p) if dispersion is None else np.asarray(dispersion, dtype=np.float64)
    same = [(h, k) for h in range(len(p)) for k in range(h + 1, len(p))
            if np.all(np.abs(p[h] - p[k]) < SAME_LEVEL) and np.all(np.abs(spread[h] - spread[k]) < SAME_LEVEL)]
    if same:
        problems.append(f"states {', '.join(f'{h} and {k}' for h, k in same[:6])} have the same level in every sample "
                        f"({', '.join('/'.join(f'{v:.4g}' for v in np.atleast_1d(p[h])) for h, _ in same[:6])}): the "
                        f"data hold fewer distinct states")
    if clipped is not None and np.asarray(clipped).any():
        where = [f"state {h} sample {s}" for h, s in zip(*np.nonzero(clipped))]
        problems.append(f"level(s) clipped to exactly 0 or 1 by the estimator ({', '.join(where[:6])}"
                        f"{', ...' if len(where) > 6 else ''})")
    return problems


def refuse_degenerate(problems: list[str], what: str, n_components: int, remedy: str, allow: bool) -> None:
    """Raise DegenerateModelError for ``problems`` of a fit (``what``: "EM", "ftd", ...), or
    with ``allow`` warn (DegenerateModelWarning); nothing when there are none."""
    if not problems:
        return
    fewer = "fewer states, or " if n_components > 2 else ""
    message = f"degenerate {what} fit with {n_components} states: {'; '.join(problems)}. Try {fewer}{remedy}."
    if not allow:
        raise DegenerateModelError(message)
    warnings.warn(message, DegenerateModelWarning, stacklevel=4)


def validate_parameters(methylation, transmat, startprob, n_samples: int | None = None,
                        source: str = "model") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shapes, finiteness, ranges and normalization of a model's parameters; raises
    ValueError naming ``source``. Returns them as float64 arrays."""
    try:
        p = np.asarray(methylation, dtype=np.float64)
        a = np.asarray(transmat, dtype=np.float64)
        start = np.asarray(startprob, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: parameters are not numeric arrays ({exc})") from None
    if p.ndim != 2 or p.shape[0] < 1:
        raise ValueError(f"{source}: methylation must be a list of states, each a list of levels per sample; "
                         f"got shape {p.shape}")
    m = p.shape[0]
    if n_samples is not None and p.shape[1] != n_samples:
        raise ValueError(f"{source}: methylation has {p.shape[1]} level(s) per state but the model names "
                         f"{n_samples} sample(s)")
    if a.shape != (m, m):
        raise ValueError(f"{source}: transmat must be {m} x {m} for {m} states, got shape {a.shape}")
    if start.shape != (m,):
        raise ValueError(f"{source}: startprob must have {m} entries, got shape {start.shape}")
    for name, value in (("methylation", p), ("transmat", a), ("startprob", start)):
        if not np.isfinite(value).all():
            raise ValueError(f"{source}: {name} contains NaN or infinite values")
        if (value < 0).any() or (value > 1).any():
            raise ValueError(f"{source}: {name} has values outside [0, 1]")
    rows = a.sum(axis=1)
    if np.abs(rows - 1).max() > ROW_TOLERANCE:
        bad = int(np.argmax(np.abs(rows - 1)))
        raise ValueError(f"{source}: transmat row {bad} sums to {rows[bad]:.8g}, not 1")
    if abs(start.sum() - 1) > ROW_TOLERANCE:
        raise ValueError(f"{source}: startprob sums to {start.sum():.8g}, not 1")
    return p, a, start
