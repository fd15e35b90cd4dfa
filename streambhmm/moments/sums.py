"""Raw moment sums over consecutive triples: the only pass over the data.

For S samples the feature of a bin is F(x) = [phi(x^1); ...; phi(x^S)] (dimension S*D).
Over every triple (t, t+1, t+2) inside one sequence, :class:`Moments` holds the sums

    n_triples     number of triples
    p12, p13, p23 sum F(x_t) F(x_t+1)^T, sum F(x_t) F(x_t+2)^T, sum F(x_t+1) F(x_t+2)^T
    p123          sum F(x_t) (x) F(x_t+1) (x) F(x_t+2)
    b_methylated  row s: sum mu^s(x_t+1) F(x_t+2)   (ratio recovery of methylation levels)
    b_coverage    row s: sum c^s(x_t+1) F(x_t+2)
    inv_coverage  entry s: sum 1 / (c^s(x_t+1) + 2)  (the paper's recovery formula)
    sq_norm_13    sum |F(x_t)|^2 |F(x_t+2)|^2         (sampling-noise scale of p13)
    coverage_histogram  (S, L): row s counts the middle bins with coverage c in sample s
                        (those above features.COVERAGE_HISTOGRAM_TOP at it)
    coverage_features   (S, B, D): sum onehot(coverage bucket of x_t+1 in sample s) (x)
                        phi_s(x_t+2) (features.COVERAGE_BUCKETS): coverage against state
    bin_histogram       the middle bins' (coverage, methylated) pairs, each sample thinned
                        to at most ``cap`` reads, jointly over the samples or per sample
    pair_histogram      the same of the adjacent pairs (middle bin, third bin)
                        (shapes and caps: features.histogram_layout)

The histograms feed the moment-only refinement (streambhmm.learn.refine): the first gives
E[F(x) | level] for any level, the others the likelihood of single bins and of pairs.

With many samples the feature is the projected one (``projection_dim`` K > 0, see
features.projection_matrix): F(x) = sum_s R_s phi(x^s) of dimension K, so p12, p13, p23
are K x K, p123 K^3 and b_methylated, b_coverage S x K, whatever S. The per-sample sums
(inv_coverage, the coverage histogram and features, the histograms, kept per sample)
are unchanged. Every sum is linear in F, so the projected sums are exactly the beta
feature's sums multiplied by R in each mode (tests/moments/test_projected.py).

They are sums, not means, so partial sums over chunks, chromosomes or files add up
exactly (``a + b``); that is what tree reduction, resume and incremental updates use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.linalg.cython_blas  # noqa: F401  the BLAS of numba's np.dot: loaded before threadpoolctl looks
from threadpoolctl import ThreadpoolController

from . import moment_kernels
from .features import (COVERAGE_BUCKETS, DEFAULT_N_BINS, HISTOGRAM_CELL_BUDGET, FeatureTable, encode,
                       histogram_coverage, histogram_layout, projected_layout, projection_matrix)
from .histograms import coverage_features, coverage_histogram, thinned_histogram
from .validation import validate_counts

ARRAY_FIELDS = ("p12", "p13", "p23", "p123", "b_methylated", "b_coverage", "inv_coverage",
                 "coverage_histogram", "coverage_features", "bin_histogram", "pair_histogram")


@dataclass(eq=False)
class Moments:
    """Raw triple sums for a Beta-map feature with ``n_bins`` bins per sample."""

    n_samples: int
    n_bins: int
    n_triples: int
    p12: np.ndarray
    p13: np.ndarray
    p23: np.ndarray
    p123: np.ndarray
    b_methylated: np.ndarray
    b_coverage: np.ndarray
    inv_coverage: np.ndarray
    coverage_histogram: np.ndarray
    coverage_features: np.ndarray
    bin_histogram: np.ndarray
    pair_histogram: np.ndarray
    sq_norm_13: float = 0.0
    histogram_budget: int = HISTOGRAM_CELL_BUDGET  # sets the histograms' caps (features.histogram_layout)
    projection_dim: int = 0  # K of the projected feature; 0: the concatenated Beta maps (S * D)
    projection_seed: int = 0

    @property
    def projected(self) -> bool:
        return self.projection_dim > 0

    @property
    def dim(self) -> int:
        """Feature dimension: S * D, or K when projected."""
        return self.projection_dim or self.n_samples * self.n_bins

    @property
    def projection(self) -> np.ndarray | None:
        """(S, K, D) the projection R_s of each sample (None for the concatenated feature)."""
        if not self.projected:
            return None
        return projection_matrix(self.n_samples, self.n_bins, self.projection_dim, self.projection_seed)

    @property
    def feature(self) -> dict:
        """The feature's settings, as the model JSON and the moment store record them."""
        if not self.projected:
            return {"kind": "beta", "n_bins": self.n_bins}
        return {"kind": "projected", "n_bins": self.n_bins, "dim": self.projection_dim, "seed": self.projection_seed}

    def histogram_layout(self, width: int):
        """The layout of ``bin_histogram`` (width 1) or ``pair_histogram`` (width 2)."""
        if self.projected:
            return projected_layout(self.n_samples, width, self.histogram_budget)
        return histogram_layout(self.n_samples, width, self.histogram_budget)

    @classmethod
    def zeros(cls, n_samples: int, n_bins: int, histogram_budget: int = HISTOGRAM_CELL_BUDGET,
              projection_dim: int = 0, projection_seed: int = 0) -> "Moments":
        dim = projection_dim or n_samples * n_bins
        layout = projected_layout if projection_dim else histogram_layout
        return cls(
            n_samples=n_samples,
            n_bins=n_bins,
            n_triples=0,
            p12=np.zeros((dim, dim)),
            p13=np.zeros((dim, dim)),
            p23=np.zeros((dim, dim)),
            p123=np.zeros((dim, dim, dim)),
            b_methylated=np.zeros((n_samples, dim)),
            b_coverage=np.zeros((n_samples, dim)),
            inv_coverage=np.zeros(n_samples),
            coverage_histogram=np.zeros((n_samples, 1)),
            coverage_features=np.zeros((n_samples, len(COVERAGE_BUCKETS), n_bins)),
            bin_histogram=np.zeros(layout(n_samples, 1, histogram_budget).shape),
            pair_histogram=np.zeros(layout(n_samples, 2, histogram_budget).shape),
            histogram_budget=histogram_budget,
            projection_dim=projection_dim,
            projection_seed=projection_seed,
        )

    def like(self) -> "Moments":
        """Zero moments with these feature settings."""
        return Moments.zeros(self.n_samples, self.n_bins, self.histogram_budget, self.projection_dim,
                             self.projection_seed)

    def _settings(self) -> tuple:
        return self.n_samples, self.n_bins, self.histogram_budget, self.projection_dim, self.projection_seed

    def check_compatible(self, other: "Moments") -> None:
        if self._settings() != other._settings():
            raise ValueError(
                "cannot combine moments with different feature settings: (n_samples, n_bins, histogram_budget, "
                f"projection_dim, projection_seed) = {self._settings()} vs {other._settings()}"
            )

    def __add__(self, other: "Moments") -> "Moments":
        if not isinstance(other, Moments):
            return NotImplemented
        self.check_compatible(other)
        arrays = {name: _padded_sum(getattr(self, name), getattr(other, name)) for name in ARRAY_FIELDS}
        return Moments(
            n_samples=self.n_samples,
            n_bins=self.n_bins,
            n_triples=self.n_triples + other.n_triples,
            sq_norm_13=self.sq_norm_13 + other.sq_norm_13,
            histogram_budget=self.histogram_budget,
            projection_dim=self.projection_dim,
            projection_seed=self.projection_seed,
            **arrays,
        )

    def __radd__(self, other):
        # lets sum(list_of_moments) start from 0
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented

    def allclose(self, other: "Moments", rtol: float = 1e-10) -> bool:
        """Equal up to float rounding, relative to each array's largest entry."""
        if self._settings() != other._settings() or self.n_triples != other.n_triples:
            return False
        for name in ARRAY_FIELDS + ("sq_norm_13",):
            a, b = np.asarray(getattr(self, name)), np.asarray(getattr(other, name))
            if name == "coverage_histogram":  # trailing zero columns carry nothing
                a, b = _padded(a, max(a.shape[1], b.shape[1])), _padded(b, max(a.shape[1], b.shape[1]))
            scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-300)
            if a.shape != b.shape or np.abs(a - b).max(initial=0.0) > rtol * scale:
                return False
        return True


def _padded(a: np.ndarray, width: int) -> np.ndarray:
    return a if a.shape[1] == width else np.pad(a, ((0, 0), (0, width - a.shape[1])))


def _padded_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, the shorter of two 2-D histograms padded with zero columns."""
    if a.ndim == 2 and a.shape[1] != b.shape[1]:
        width = max(a.shape[1], b.shape[1])
        return _padded(a, width) + _padded(b, width)
    return a + b


@functools.cache
def _blas_libraries() -> ThreadpoolController:
    """The process's BLAS libraries, found once: threadpool_limits looks for them at each call
    (3 ms, as long as the whole moment task of a short contig)."""
    return ThreadpoolController()


def moments_from_features(features: FeatureTable, lengths: np.ndarray,
                          histogram_budget: int = HISTOGRAM_CELL_BUDGET) -> Moments:
    """Triple sums of encoded bins; no triple crosses a boundary given by ``lengths``."""
    n_samples = features.codes.shape[1]
    out = Moments.zeros(n_samples, features.n_bins, histogram_budget)
    starts = moment_kernels.triple_starts(np.asarray(lengths, dtype=np.int64))
    if starts.size == 0:
        return out
    # the kernel's GEMMs are small: BLAS threads only contend with the other chunks' tasks
    with _blas_libraries().limit(limits=1, user_api="blas"):
        moment_kernels.accumulate_triples(
            features.codes, starts, features.table,
            features.coverage.astype(np.float64), features.methylated.astype(np.float64),
            out.p12, out.p13, out.p23, out.p123, out.b_methylated, out.b_coverage, out.inv_coverage,
        )
    sq_norm = np.einsum("kd,kd->k", features.table, features.table)
    out.sq_norm_13 = float(moment_kernels.feature_sq_norm_13(features.codes, starts, sq_norm))
    out.coverage_histogram = coverage_histogram(features, starts + 1)
    out.coverage_features = coverage_features(features, starts)
    out.bin_histogram = thinned_histogram(features, starts + 1, 1, histogram_budget)
    out.pair_histogram = thinned_histogram(features, starts + 1, 2, histogram_budget)
    out.n_triples = int(starts.size)
    return out


def contiguous_runs(starts: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) of each run of consecutive values in the sorted ``starts``."""
    if starts.size == 0:
        return []
    cut = np.flatnonzero(np.diff(starts) != 1) + 1
    return [(int(starts[a]), int(starts[b - 1]) + 1) for a, b in zip(np.r_[0, cut], np.r_[cut, starts.size])]


def add_feature_triples(features: np.ndarray, starts: np.ndarray, out: Moments, block: int = 4096) -> None:
    """Add the pair and triple sums of a dense feature (n, K) over the triples at ``starts``
    to ``out``: the tensor as one GEMM per block of triples, (F_t (x) F_t+1)^T F_t+2 with the
    row-wise Khatri-Rao product of the first two bins' features."""
    dim = features.shape[1]
    for first, end in contiguous_runs(starts):
        for lo in range(first, end, block):
            hi = min(end, lo + block)
            a, b, c = features[lo:hi], features[lo + 1:hi + 1], features[lo + 2:hi + 2]
            out.p12 += a.T @ b
            out.p13 += a.T @ c
            out.p23 += b.T @ c
            out.p123 += ((a[:, :, None] * b[:, None, :]).reshape(hi - lo, dim * dim).T @ c).reshape(dim, dim, dim)
            out.sq_norm_13 += float(np.einsum("ij,ij->i", a, a) @ np.einsum("ij,ij->i", c, c))


def projected_moments(column, n_rows: int, n_samples: int, starts: np.ndarray, n_bins: int, dim: int, seed: int = 0,
                      histogram_budget: int = HISTOGRAM_CELL_BUDGET, on_rows=None) -> tuple[Moments, np.ndarray]:
    """Moments of the projected feature over the triples at ``starts`` of ``n_rows`` bins,
    whose counts ``column(s)`` gives one sample at a time ((methylated, coverage), each
    (n_rows,)): memory holds a few samples' counts and the (n_rows, K) feature, never all
    samples. ``on_rows(width, row, features)`` sees the FeatureTable of each histogram row
    (the block statistics). Returns the Moments and the feature."""
    out = Moments.zeros(n_samples, n_bins, histogram_budget, dim, seed)
    projection = projection_matrix(n_samples, n_bins, dim, seed)
    uniform = np.full(n_bins, 1.0 / n_bins)  # the Beta map of no reads
    feature = np.tile(np.einsum("skd,d->k", projection, uniform), (n_rows, 1))
    layouts = {w: out.histogram_layout(w) for w in (1, 2)}
    histograms = []
    middle = starts + 1

    def add_row(width: int, row: int, table: FeatureTable) -> None:
        hist = out.bin_histogram if width == 1 else out.pair_histogram
        hist[row] = thinned_histogram(table, middle, width, layout=layouts[width].row_layout())[0]
        if on_rows is not None:
            on_rows(width, row, table)

    first = previous = None
    for s in range(n_samples):
        meth, cov = column(s)
        table = encode(meth[:, None], cov[:, None], n_bins)
        covered = np.flatnonzero(cov)
        moment_kernels.gather_add(feature, (table.table - uniform) @ projection[s].T, table.codes[covered, 0], covered)
        out.inv_coverage[s] = float(np.sum(1.0 / (cov[middle] + 2.0)))
        histograms.append(np.bincount(histogram_coverage(cov[middle])).astype(np.float64))
        out.coverage_features[s] = coverage_features(table, starts)[0]
        add_row(2, s, table)
        if not layouts[1].ring:
            add_row(1, s, table)
        elif previous is not None:  # the ring pair (s - 1, s)
            add_row(1, s - 1, encode(np.stack([previous[0], meth], axis=1), np.stack([previous[1], cov], axis=1),
                                     n_bins))
        if first is None:
            first = meth, cov
        previous = meth, cov
    if layouts[1].ring and layouts[1].rows > 1:  # and (S - 1, 0)
        add_row(1, n_samples - 1, encode(np.stack([previous[0], first[0]], axis=1),
                                         np.stack([previous[1], first[1]], axis=1), n_bins))
    width = max([1] + [h.size for h in histograms])
    out.coverage_histogram = np.array([np.pad(h, (0, width - h.size)) for h in histograms]).reshape(n_samples, width)
    add_feature_triples(feature, starts, out)
    for s in range(n_samples):  # the ratio recovery's sums need the whole feature
        meth, cov = column(s)
        for first_start, end in contiguous_runs(starts):
            later = feature[first_start + 2:end + 2]
            out.b_methylated[s] += meth[first_start + 1:end + 1] @ later
            out.b_coverage[s] += cov[first_start + 1:end + 1] @ later
    out.n_triples = int(starts.size)
    return out, feature


def compute_moments(methylated, coverage, lengths=None, n_bins: int = DEFAULT_N_BINS,
                    histogram_budget: int = HISTOGRAM_CELL_BUDGET, projection_dim: int = 0,
                    projection_seed: int = 0) -> Moments:
    """Validate counts of shape (n,) or (n, S) and return their :class:`Moments`
    (``histogram_budget``: cells of the thinned histograms, features.histogram_layout;
    ``projection_dim`` K > 0: the projected feature, features.projection_matrix)."""
    mu, cov, lengths = validate_counts(methylated, coverage, lengths)
    if not isinstance(projection_dim, (int, np.integer)) or projection_dim < 0:
        raise ValueError(f"projection_dim must be a non-negative integer (0: no projection), got {projection_dim!r}")
    if not projection_dim:
        return moments_from_features(encode(mu, cov, n_bins), lengths, histogram_budget)
    starts = moment_kernels.triple_starts(np.asarray(lengths, dtype=np.int64))
    return projected_moments(lambda s: (mu[:, s], cov[:, s]), mu.shape[0], mu.shape[1], starts, n_bins,
                             projection_dim, projection_seed, histogram_budget)[0]
