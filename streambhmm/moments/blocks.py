"""Statistics of fixed genomic blocks: the block bootstrap and held-out blocks.

A triple belongs to the block (``block_size`` bp, 1 Mb by default) holding its middle bin,
whatever the storage chunks. For every block a chunk touches, the moment pass keeps what the
refinement needs, small enough to keep for every block of a genome:

    n_triples, P12 and P13 (float32; P23 is taken equal to P12, as the model has it),
    the coverage-bucket features (float32),
    the bin and pair histograms at BLOCK_CELL_BUDGET cells (sparse, float32).

Summing the statistics of resampled (or held-in) blocks gives Moments at that budget, which
the refinement fits like any other; the coverage histogram is the whole data's, since its
sampling noise barely moves E[F | level]. A block cut by a chunk boundary is kept in two
parts and summed by :class:`BlockTable`.

For the projected feature (many samples) a block keeps P12 and P13 of the projected feature
(K x K) and the histograms per sample, but not the coverage-bucket features, which are
S x buckets x D per block (30 MB per chunk of 100 blocks at S = 100): resampled blocks then
take the whole data's coverage-bucket features, scaled to their number of triples, so the
bootstrap does not resample the per-state coverage model (a nuisance parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from . import moment_kernels
from .features import (BLOCK_CELL_BUDGET, COVERAGE_BUCKETS, FeatureTable, coverage_bucket, flush_subnormals,
                       histogram_layout, projected_layout)
from .histograms import grouped_histograms
from .sums import Moments


@dataclass(frozen=True)
class BlockStats:
    """The blocks of one chunk of one chromosome."""

    chromosome: str
    n_samples: int
    n_bins: int
    block: np.ndarray  # (B,) int64: block index, position // block_size
    n_triples: np.ndarray  # (B,) int64
    p12: np.ndarray  # (B, SD, SD) float32
    p13: np.ndarray  # (B, SD, SD) float32
    coverage_features: np.ndarray  # (B, S, buckets, D) float32; (B, 0, 0, 0) for the projected feature
    bin_histogram: sparse.csr_matrix  # (B, cells) float32
    pair_histogram: sparse.csr_matrix  # (B, cells) float32

    ARRAYS = ("block", "n_triples", "p12", "p13", "coverage_features")
    HISTOGRAMS = ("bin_histogram", "pair_histogram")


def block_stats(chromosome: str, features: FeatureTable, positions: np.ndarray, block_size: int) -> BlockStats:
    """The blocks of every triple of one sequence (the rows of ``features``, at ``positions``
    in bp, increasing): each block's triples are a contiguous run of starts, so its
    features are gathered once and its P12 and P13 are products of shifted slices."""
    n_samples, d = features.codes.shape[1], features.n_bins
    sd = n_samples * d
    n_triples = max(positions.size - 2, 0)
    ids, first = np.unique(positions[1:n_triples + 1] // block_size, return_index=True)
    bounds = np.r_[first, n_triples]
    p12 = np.zeros((ids.size, sd, sd), np.float32)
    p13 = np.zeros_like(p12)
    by_coverage = np.zeros((ids.size, n_samples, len(COVERAGE_BUCKETS), d), np.float32)
    layouts = {w: histogram_layout(n_samples, w, BLOCK_CELL_BUDGET) for w in (1, 2)}
    # the sums are kept in float32 (half the matmul work), where the table's far tail is subnormal
    table = flush_subnormals(features.table.astype(np.float32))
    bucket_of_code = coverage_bucket(features.coverage)
    buffer = np.empty((int(np.diff(bounds).max(initial=0)) + 2, sd), np.float32)
    for b in range(ids.size):
        lo, hi = bounds[b], bounds[b + 1]
        rows = moment_kernels.gather_features(table, features.codes, lo, hi + 2, buffer)
        p12[b] = rows[:-2].T @ rows[1:-1]
        p13[b] = rows[:-2].T @ rows[2:]
        # per triple (coverage_features' product over every code costs more for a block's few
        # triples), summed in float64 and kept in float32 as the other block sums
        summed = np.zeros(by_coverage.shape[1:])
        moment_kernels.add_coverage_features(features.codes, np.arange(lo, hi), bucket_of_code, features.table, summed)
        by_coverage[b] = summed
    middles = np.arange(n_triples) + 1
    histograms = {w: grouped_histograms(features, middles, bounds, w, layout=layouts[w]).reshape(
        ids.size, int(np.prod(layouts[w].shape))) for w in (1, 2)}
    return BlockStats(chromosome, n_samples, d, ids.astype(np.int64), np.diff(bounds).astype(np.int64), p12, p13,
                      by_coverage, *(sparse.csr_matrix(histograms[w].astype(np.float32)) for w in (1, 2)))


class ProjectedBlocks:
    """The block statistics of a chunk of the projected feature, built one histogram row at
    a time: ``add_rows`` (projected_moments' on_rows) adds a row's block histograms,
    ``finish`` the feature's P12 and P13 per block."""

    def __init__(self, chromosome: str, n_samples: int, n_bins: int, starts: np.ndarray, positions: np.ndarray,
                 block_size: int):
        self.chromosome, self.n_samples, self.n_bins = chromosome, n_samples, n_bins
        block_of = positions[starts + 1] // block_size
        order = np.argsort(block_of, kind="stable")
        self.starts = starts[order]
        self.ids, first = np.unique(block_of[order], return_index=True)
        self.bounds = np.r_[first, starts.size]
        self.layouts = {w: projected_layout(n_samples, w, BLOCK_CELL_BUDGET) for w in (1, 2)}
        self.histograms = {w: np.zeros((self.ids.size, *self.layouts[w].shape), np.float32) for w in (1, 2)}

    def _block(self, b: int) -> np.ndarray:
        return self.starts[self.bounds[b]:self.bounds[b + 1]]

    def add_rows(self, width: int, row: int, features: FeatureTable) -> None:
        self.histograms[width][:, row] = grouped_histograms(features, self.starts + 1, self.bounds, width,
                                                            layout=self.layouts[width].row_layout())[:, 0]

    def finish(self, feature: np.ndarray) -> BlockStats:
        dim = feature.shape[1]
        p12 = np.zeros((self.ids.size, dim, dim), np.float32)
        p13 = np.zeros_like(p12)
        for b in range(self.ids.size):
            chosen = self._block(b)
            first = feature[chosen]
            p12[b] = first.T @ feature[chosen + 1]
            p13[b] = first.T @ feature[chosen + 2]
        return BlockStats(self.chromosome, self.n_samples, self.n_bins, self.ids.astype(np.int64),
                          np.diff(self.bounds).astype(np.int64), p12, p13,
                          np.zeros((self.ids.size, 0, 0, 0), np.float32),
                          *(sparse.csr_matrix(h.reshape(h.shape[0], h.shape[1] * h.shape[2]))
                            for h in (self.histograms[1], self.histograms[2])))


def _gather(rows: np.ndarray, n_keys: int, dtype) -> sparse.csr_matrix:
    """The (keys x rows) 0/1 matrix that adds the rows belonging to each key."""
    return sparse.csr_matrix((np.ones(rows.size, dtype), (rows, np.arange(rows.size))), shape=(n_keys, rows.size))


def _summed(gather: sparse.csr_matrix, arrays: list) -> np.ndarray:
    """The stacked ``arrays`` (each (rows, ...)) with the rows of each key added."""
    stacked = np.concatenate(arrays)
    flat = stacked.reshape(stacked.shape[0], int(np.prod(stacked.shape[1:])))
    return (gather @ flat).reshape(gather.shape[0], *stacked.shape[1:])


def _summed_sparse(gather: sparse.csr_matrix, matrices: list) -> sparse.csr_matrix:
    return (gather @ sparse.vstack(matrices)).tocsr()


def combine_blocks(parts: list[BlockStats]) -> BlockStats:
    """One chunk's block statistics from several sequences' (the samples of a pooled pass):
    the parts of each block summed, so the result has one row per block whatever the number
    of parts."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    ids, rows = np.unique(np.concatenate([p.block for p in parts]), return_inverse=True)
    gather = _gather(rows, ids.size, np.float32)  # the statistics are kept in float32
    return BlockStats(first.chromosome, first.n_samples, first.n_bins, ids.astype(np.int64),
                      np.bincount(rows, np.concatenate([p.n_triples for p in parts]), ids.size).astype(np.int64),
                      *(_summed(gather, [getattr(p, name) for p in parts]) for name in ("p12", "p13",
                                                                                       "coverage_features")),
                      *(_summed_sparse(gather, [getattr(p, name) for p in parts]) for name in BlockStats.HISTOGRAMS))


class BlockTable:
    """The blocks of a whole data set (parts of a block summed), ready to resample."""

    def __init__(self, parts: list[BlockStats]):
        if not parts:
            raise ValueError("no block statistics")
        first = parts[0]
        self.n_samples, self.n_bins = first.n_samples, first.n_bins
        keys = [(p.chromosome, int(b)) for p in parts for b in p.block]
        self.keys = sorted(set(keys))
        row_of = {key: i for i, key in enumerate(self.keys)}
        gather = _gather(np.array([row_of[key] for key in keys], np.int64), len(self.keys), np.float64)
        self.n_triples = gather @ np.concatenate([p.n_triples for p in parts]).astype(np.float64)
        self.p12 = _summed(gather, [p.p12 for p in parts])
        self.p13 = _summed(gather, [p.p13 for p in parts])
        self.coverage_features = _summed(gather, [p.coverage_features for p in parts])
        self.bin_histogram = _summed_sparse(gather, [p.bin_histogram for p in parts])
        self.pair_histogram = _summed_sparse(gather, [p.pair_histogram for p in parts])

    def __len__(self) -> int:
        return len(self.keys)

    def moments(self, weights: np.ndarray, total: Moments) -> Moments:
        """sum_b weights[b] * block b, as Moments at BLOCK_CELL_BUDGET (fields the
        refinement does not use are zero); ``total``: the whole data's moments (their
        coverage histogram, feature settings and, for the projected feature, the
        coverage-bucket features scaled to the blocks' triples)."""
        w = np.asarray(weights, dtype=np.float64)
        out = Moments.zeros(self.n_samples, self.n_bins, BLOCK_CELL_BUDGET, total.projection_dim,
                            total.projection_seed)
        out.n_triples = int(round(w @ self.n_triples))
        out.p12 = np.tensordot(w, self.p12, axes=1)
        out.p23 = out.p12.copy()
        out.p13 = np.tensordot(w, self.p13, axes=1)
        if self.coverage_features.size or not total.projected:
            out.coverage_features = np.tensordot(w, self.coverage_features, axes=1)
        else:
            out.coverage_features = total.coverage_features * (out.n_triples / max(total.n_triples, 1))
        # (what refine.projected_weight reads: the spread of the feature's products)
        out.sq_norm_13 = total.sq_norm_13 * (out.n_triples / max(total.n_triples, 1))
        out.coverage_histogram = total.coverage_histogram
        out.bin_histogram = np.asarray(self.bin_histogram.T @ w).reshape(out.bin_histogram.shape)
        out.pair_histogram = np.asarray(self.pair_histogram.T @ w).reshape(out.pair_histogram.shape)
        return out
