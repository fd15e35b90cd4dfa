"""From C = E[F(x) | h] to methylation levels, transitions and the stationary distribution."""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from ..moments.sums import Moments


def normalize_observation(observation: np.ndarray, n_samples: int, projected: bool = False) -> np.ndarray:
    """Rescale each column of C so its per-sample blocks sum to 1 on average (projected:
    so it sums to S, as the projected feature does).

    Each block of a true column is a probability vector; the decomposition's column
    scales (lambda_j) carry sampling error that this removes. Entries are not clipped.
    """
    if projected:
        return observation / (observation.sum(axis=0) / n_samples)
    m = observation.shape[1]
    blocks = observation.reshape(n_samples, -1, m)
    return observation / blocks.sum(axis=1).mean(axis=0)


def methylation_ratio(observation: np.ndarray, s3: np.ndarray, moments: Moments) -> tuple[np.ndarray, np.ndarray]:
    """p[h, s] = E[mu^s | h] / E[c^s | h], consistent when coverage depends on the state.

    The middle bin is independent of the third given h_t+1, so for g = mu^s or c^s,
    S3 E[g(x_t+1) F(x_t+2)] = C diag(pi) E[g | h]; solving for it and taking the ratio
    cancels diag(pi). Returns the levels clipped to [0, 1] and which were clipped (or undefined).
    """
    solve = np.linalg.pinv(observation) @ s3
    per_state_meth = solve @ moments.b_methylated.T  # (m, S), each times pi_h * N
    per_state_cov = solve @ moments.b_coverage.T
    with np.errstate(divide="ignore", invalid="ignore"):
        p = per_state_meth / per_state_cov
    return _clipped(p)


def _clipped(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p clipped to [0, 1] with undefined values at 0.5, mask of the values changed)."""
    changed = ~np.isfinite(p) | (p < 0.0) | (p > 1.0)
    return np.clip(np.nan_to_num(p, nan=0.5, posinf=1.0, neginf=0.0), 0.0, 1.0), changed


def methylation_paper(observation: np.ndarray, moments: Moments) -> tuple[np.ndarray, np.ndarray]:
    """The paper's eq. (recoverp), corrected: p = (sum_i t_i C[i, h] - a) / (1 - 2a).

    t_i is the midpoint of bin i (the paper's (1/D)(i/D) has a spurious 1/D and a
    right-endpoint bias of up to 1/D); a = E[1/(c+2)] per sample. Assumes coverage is
    independent of the state.
    """
    if moments.projected:
        raise ValueError("methylation_recovery='paper' reads each sample's Beta-map bins, which the projected "
                         "feature mixes; use 'ratio'")
    d, s = moments.n_bins, moments.n_samples
    midpoints = (np.arange(d) + 0.5) / d
    means = np.einsum("i,sih->hs", midpoints, observation.reshape(s, d, -1))
    a = moments.inv_coverage / moments.n_triples
    return _clipped((means - a) / (1.0 - 2.0 * a))


def transitions(observation: np.ndarray, moments: Moments,
                constraint_weight: float = 1e4) -> tuple[np.ndarray, np.ndarray]:
    """Fit H21 >= 0, sum(H21) = 1 to min |P21 - C H21 C^T|_F (the paper's stabilization).

    With C = Q R, |P21 - C H C^T|_F^2 = |Q^T P21 Q - R H R^T|_F^2 + const, an m^2-unknown
    problem with matrix kron(R, R). It is scaled to unit norm and solved exactly by
    Lawson-Hanson NNLS, the equality entering as one heavily weighted row (the weighting
    method for equality-constrained least squares); the tiny residual violation is
    removed by renormalizing. Returns (transmat with rows summing to 1, pi).
    """
    m = observation.shape[1]
    q, r = np.linalg.qr(observation)
    target = q.T @ (moments.p12.T / moments.n_triples) @ q  # reduced P21
    design = np.kron(r, r)
    scale = np.linalg.norm(design, 2)
    weight = constraint_weight * scale
    lhs = np.vstack([design / scale, np.full((1, m * m), weight / scale)])
    rhs = np.concatenate([target.ravel() / scale, [weight / scale]])
    h21, _ = nnls(lhs, rhs, maxiter=50 * m * m)
    h21 = h21.reshape(m, m)  # h21[i, j] ~ P(h_t+1 = i, h_t = j)
    h21 /= h21.sum()
    pi = h21.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        transmat = np.where(pi[:, None] > 0, h21.T / pi[:, None], 1.0 / m)
    return transmat, pi
