"""Compare estimated and true states: Hungarian matching and matched errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


@dataclass(frozen=True)
class MatchedError:
    permutation: np.ndarray  # estimated state matched to true state i is permutation[i]
    methylation_error: float  # sum over states and samples of |p - p_hat|
    transmat_error: float | None  # Frobenius norm under the same permutation
    startprob_error: float | None  # L1 under the same permutation


def match_states(true_methylation, est_methylation) -> np.ndarray:
    """Permutation minimizing sum |p - p_hat| over states and samples."""
    p = np.atleast_2d(np.asarray(true_methylation, dtype=float))
    q = np.atleast_2d(np.asarray(est_methylation, dtype=float))
    if p.shape != q.shape:
        raise ValueError(f"methylation shapes differ: {p.shape} vs {q.shape}")
    cost = np.abs(p[:, None, :] - q[None, :, :]).sum(axis=2)
    _, cols = linear_sum_assignment(cost)
    return cols


def matched_error(true_methylation, est_methylation, true_transmat=None, est_transmat=None,
                  true_startprob=None, est_startprob=None) -> MatchedError:
    """Errors after matching estimated states to true ones on methylation levels."""
    p = np.atleast_2d(np.asarray(true_methylation, dtype=float))
    q = np.atleast_2d(np.asarray(est_methylation, dtype=float))
    perm = match_states(p, q)
    trans_err = start_err = None
    if true_transmat is not None and est_transmat is not None:
        est = np.asarray(est_transmat)[np.ix_(perm, perm)]
        trans_err = float(np.linalg.norm(np.asarray(true_transmat) - est))
    if true_startprob is not None and est_startprob is not None:
        start_err = float(np.abs(np.asarray(true_startprob) - np.asarray(est_startprob)[perm]).sum())
    return MatchedError(permutation=perm, methylation_error=float(np.abs(p - q[perm]).sum()),
                        transmat_error=trans_err, startprob_error=start_err)


def differential_states(methylation, threshold: float) -> list[int]:
    """States whose levels differ across samples by more than ``threshold``."""
    levels = np.asarray(methylation)
    return [int(h) for h in np.flatnonzero(levels.max(axis=1) - levels.min(axis=1) > threshold)]
