"""Symmetrize, whiten and decompose the moments (design note section 4).

With E[F(x_k) | h_2 = j] = A_k[:, j] for the three views and C = A_2 (the middle view):

    S1 = P23 (P13)^+_m = C A_1^+          S3 = P21 (P31)^+_m = C A_3^+
    M2 = S1 P12 = C diag(pi) C^T          G = T(S1^T, I, S3^T) = sum_j pi_j C_j (x3)
    H = G(W, W, W) = sum_j pi_j^(-1/2) v_j (x3)  with W^T M2 W = I, v_j orthonormal.

(.)^+_m is the rank-m truncated pseudo-inverse: a full one inverts noise-level
singular values and destroys the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..moments.sums import Moments


# sigma_m(P13) must exceed this fraction of the Frobenius sampling-noise scale. Calibrated by
# scripts/calibrate_spectrum_check.py: the largest pure-noise singular value stayed below
# 0.45 of the scale in every simulated setting; identifiable states gave 1.2 or more.
NOISE_MARGIN = 0.6


class SpectrumError(ValueError):
    """The moments do not support the requested number of states."""


def truncated_pinv(a: np.ndarray, rank: int) -> np.ndarray:
    """Rank-``rank`` truncated Moore-Penrose pseudo-inverse."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return (vt[:rank].T / s[:rank]) @ u[:, :rank].T


def _format_values(values: np.ndarray, count: int = 12) -> str:
    shown = ", ".join(f"{v:.3g}" for v in values[:count])
    return f"[{shown}{', ...' if values.size > count else ''}]"


@dataclass(frozen=True)
class Whitened:
    """Result of the symmetrization and whitening steps."""

    s3: np.ndarray  # (SD, SD) maps third-view conditionals to middle-view ones
    whitening: np.ndarray  # W, (SD, m)
    tensor: np.ndarray  # H, (m, m, m), symmetric
    p13_singular_values: np.ndarray
    m2_eigenvalues: np.ndarray  # all eigenvalues of the symmetrized M2, descending
    noise_floor: float
    refusal: str | None  # why the spectrum does not support m states (None: it does)


def whiten(moments: Moments, n_components: int, check_spectrum: bool = True) -> Whitened:
    """Symmetrize onto the middle view and whiten; raises :class:`SpectrumError`.

    The check compares the m-th singular value of P13 (normalized) with NOISE_MARGIN
    times sqrt(E|F_1|^2 |F_3|^2 / N), the Frobenius norm of P13's estimation error for
    independent triples (for the projected feature sqrt((E|F_1|^2 |F_3|^2 - |P13|^2) / N),
    its variance without the mean's share), and requires M2's m-th eigenvalue to be positive.
    """
    m = n_components
    n = moments.n_triples
    p12, p13, p23 = moments.p12 / n, moments.p13 / n, moments.p23 / n
    p123 = moments.p123 / n
    s1 = p23 @ truncated_pinv(p13, m)
    s3 = p12.T @ truncated_pinv(p13.T, m)
    m2 = s1 @ p12
    m2 = 0.5 * (m2 + m2.T)
    evals, evecs = np.linalg.eigh(m2)
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    p13_sv = np.linalg.svd(p13, compute_uv=False)
    second = moments.sq_norm_13 / n
    if getattr(moments, "projected", False):
        # the projected feature is mostly a constant (it sums to S): its products' mean
        # square is mostly their mean squared, which is signal, not noise
        second = max(second - float(np.sum(p13 * p13)), 0.0)
    noise = NOISE_MARGIN * float(np.sqrt(second) / np.sqrt(n))
    top = evals[0] if evals.size else 0.0
    weak = not (evals[m - 1] > 1e-12 * max(top, 1e-300))
    refusal = None
    if weak or p13_sv[m - 1] <= noise:
        reason = (
            f"M2's {m}-th eigenvalue is not clearly positive" if weak
            else f"P13's {m}-th singular value {p13_sv[m - 1]:.3g} is at or below the "
                 f"sampling noise level {noise:.3g}"
        )
        refusal = (
            f"the data do not support {m} states: {reason}.\n"
            f"  singular values of P13: {_format_values(p13_sv)}\n"
            f"  eigenvalues of M2:      {_format_values(evals)}\n"
            f"  noise level: {noise:.3g} from {n} triples. "
            f"Use fewer states, or more data."
        )
        if check_spectrum:
            raise SpectrumError(refusal)
    w = evecs[:, :m] / np.sqrt(np.maximum(evals[:m], 1e-300))
    # H = T(S1^T W, W, S3^T W): contract the big tensor one mode at a time
    w1, w3 = s1.T @ w, s3.T @ w
    h = np.tensordot(p123, w3, axes=([2], [0]))  # (SD, SD, m)
    h = np.tensordot(h, w, axes=([1], [0]))  # (SD, m, m)
    h = np.tensordot(w1, h, axes=([0], [0]))  # (m, m, m)
    h = sum(h.transpose(p) for p in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))) / 6
    return Whitened(s3=s3, whitening=w, tensor=h, p13_singular_values=p13_sv,
                    m2_eigenvalues=evals, noise_floor=noise, refusal=refusal)


def tensor_apply(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """H(I, v, v) for a batch of vectors v (rows)."""
    return np.einsum("ijk,lj,lk->li", h, v, v)


def tensor_power_method(h: np.ndarray, rng: np.random.Generator, n_restarts: int = 30,
                        n_iter: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Robust tensor power method (Anandkumar et al. 2014, Algorithm 1) with deflation.

    For each component: ``n_restarts`` random unit starts run ``n_iter`` power
    iterations, the start with the largest H(v, v, v) is refined for ``n_iter`` more,
    and its rank-one term is deflated. Returns eigenvalues (m,) and vectors (m, m) as rows.
    """
    m = h.shape[0]
    residual = h.copy()
    lambdas = np.empty(m)
    vectors = np.empty((m, m))
    for k in range(m):
        v = rng.standard_normal((n_restarts, m))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        for _ in range(n_iter):
            v = tensor_apply(residual, v)
            v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-300)
        values = np.einsum("li,li->l", tensor_apply(residual, v), v)
        best = v[np.argmax(values)][None, :]
        for _ in range(n_iter):
            best = tensor_apply(residual, best)
            best /= np.maximum(np.linalg.norm(best), 1e-300)
        lam = float(np.einsum("li,li->", tensor_apply(residual, best), best))
        vectors[k] = best[0]
        lambdas[k] = lam
        residual -= lam * np.einsum("i,j,k->ijk", best[0], best[0], best[0])
    return lambdas, vectors


@dataclass(frozen=True)
class Decomposition:
    whitened: Whitened
    eigenvalues: np.ndarray  # lambda_j = 1 / sqrt(pi_j)
    observation: np.ndarray  # C, (SD, m): E[F(x) | h = j] in column j


def decompose(moments: Moments, n_components: int, rng: np.random.Generator,
              n_restarts: int = 30, n_iter: int = 50, check_spectrum: bool = True,
              whitened: Whitened | None = None) -> Decomposition:
    """Estimate C = E[F(x) | h] (columns) from the moments (``whitened``: their whitening,
    if already computed)."""
    wh = whitened or whiten(moments, n_components, check_spectrum=check_spectrum)
    lambdas, vectors = tensor_power_method(wh.tensor, rng, n_restarts=n_restarts, n_iter=n_iter)
    observation = np.linalg.pinv(wh.whitening.T) @ (vectors.T * lambdas)
    return Decomposition(whitened=wh, eigenvalues=lambdas, observation=observation)
