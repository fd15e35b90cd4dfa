"""What the one-pass refinement needs to fit beta-binomial emissions from the moments.

A beta-binomial state draws each bin's level from Beta(a, b), a = p s, b = (1 - p) s with
s = (1 - rho) / rho, then its reads from the binomial. Two consequences for the moments:

- The thinned single-bin and adjacent-pair histograms stay exact: a random subsample of
  beta-binomial reads is beta-binomial with the same (a, b), so a histogram cell's
  likelihood is the beta-binomial pmf at its thinned counts (_emission_kernels.entry_logliks).
- The expected Beta-map feature of a state is g(p) = E[phi | level p] integrated over the
  state's Beta distribution of levels (LevelQuadrature): a fixed grid of nodes in
  z = logit(p), where the Beta density becomes sigma(z)^a sigma(-z)^b, smooth and decaying
  at both ends, so the midpoint rule converges fast; the mass beyond the grid (levels within
  1e-4 of 0 or 1, where g is g(0) or g(1)) is added at the ends in closed form. The weights
  are a softmax of a log p_k + b log(1 - p_k), so their gradient in (a, b) is exact.
"""

from __future__ import annotations

import numpy as np

from . import _expected_kernels

# The one-pass fit keeps rho >= this: the nodes below resolve a Beta this concentrated
# (standard deviation in z at least 0.063, 1.6 node spacings). EM has no such bound.
ONE_PASS_MIN_DISPERSION = 1e-3
ONE_PASS_MAX_DISPERSION = 0.95
LOGIT_RANGE = 9.2  # nodes cover levels within [1e-4, 1 - 1e-4]
NODE_SPACING = 0.04


def scale_bounds() -> tuple[float, float]:
    """Bounds of v = log(a + b) = log((1 - rho) / rho) in the one-pass fit."""
    return (float(np.log((1 - ONE_PASS_MAX_DISPERSION) / ONE_PASS_MAX_DISPERSION)),
            float(np.log((1 - ONE_PASS_MIN_DISPERSION) / ONE_PASS_MIN_DISPERSION)))


def beta_parameters(levels: np.ndarray, dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = (1.0 - dispersion) / dispersion
    return levels * scale, (1.0 - levels) * scale


class LevelQuadrature:
    """E over p ~ Beta(a, b) of a function tabulated at ``levels`` (the nodes, with 0 and 1
    for the tails): weights (m, nodes) and their derivatives in a and b."""

    def __init__(self):
        z = np.arange(-LOGIT_RANGE, LOGIT_RANGE + NODE_SPACING / 2, NODE_SPACING)
        self.edge = LOGIT_RANGE + NODE_SPACING / 2  # the tails start half a spacing beyond the last node
        self.log_p = -np.logaddexp(0.0, -z)
        self.log_q = -np.logaddexp(0.0, z)
        self.levels = np.concatenate([[0.0], np.exp(self.log_p), [1.0]])

    def weights(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(W, dW/da, dW/db) for a, b (m,): (3, m, nodes + 2), each row of W summing to 1
        (compiled: _expected_kernels.beta_weights)."""
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or a.ndim != 1:  # the kernel reads b[h] for every h of a
            raise ValueError(f"a and b must be vectors of one length, got shapes {a.shape} and {b.shape}")
        weights = _expected_kernels.beta_weights(a, b, self.log_p, self.log_q, self.edge, np.log(NODE_SPACING))
        return weights.reshape(3, a.size, -1)


QUADRATURE = LevelQuadrature()
