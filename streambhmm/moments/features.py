"""The Beta map and the table of distinct (coverage, methylated) pairs.

phi_i(c, mu) = I_{i/D}(mu+1, c-mu+1) - I_{(i-1)/D}(mu+1, c-mu+1), i = 1..D, the mass that
the Beta(mu+1, c-mu+1) posterior puts on the i-th of D equal bins of [0, 1]. The feature
depends only on the integer pair, so each distinct pair is mapped once and bins carry a
small integer code into that table. There is no coverage limit: the table holds exactly
the pairs present.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np

# Above this many possible pair keys, fall back from a direct-address lookup to np.unique.
_DIRECT_KEY_LIMIT = 1 << 23


# Pairs up to this coverage are mapped through tables of binomial tails, one per coverage
# value, kept for the process (8 MB at D = 30): every chunk holds the same shallow pairs, and a
# store of many short contigs has a chunk per contig. Deeper pairs are mapped one at a time.
KEPT_COVERAGE = 256

# D, the Beta map's bins per sample, unless --bins says otherwise
DEFAULT_N_BINS = 30

# A feature table's entries below this are 0: the moments multiply three features (a tensor
# entry), and a product below 2.2e-308 is a subnormal number, which the processor multiplies
# many times slower (the moments of dmrseq IMR90 chr21's 5 kb bins took 3.6x as long with the
# tails of their deep Beta maps). Such an entry is under 1e-100 of its bin's features (a sum of 1).
SMALLEST_FEATURE = 1e-100


def beta_map(coverage, methylated, n_bins: int) -> np.ndarray:
    """Beta-map features for arrays of pairs; returns shape ``coverage.shape + (n_bins,)``.

    With integer counts the Beta(mu+1, c-mu+1) CDF at x is P(Y > mu) for Y ~ Bin(c+1, x).
    Each difference is taken on the side of the distribution (lower or upper tail) where both
    values are small, so bins far in either tail keep their relative precision down to the
    smallest normal double. Pairs up to KEPT_COVERAGE reads are rows of kept per-coverage
    tables; deeper ones sum their tails term by term (streambhmm.moments.deep_pairs).
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    c = np.asarray(coverage, dtype=np.int64)
    mu = np.asarray(methylated, dtype=np.int64)
    out = np.empty(c.shape + (n_bins,))
    flat_c, flat_mu, flat = c.ravel(), mu.ravel(), out.reshape(-1, n_bins)
    deep = np.flatnonzero(flat_c > KEPT_COVERAGE)
    if deep.size:
        from .deep_pairs import beta_map_of_pairs  # compiled on first use: shallow data never need it

        mapped = np.empty((deep.size, n_bins))
        beta_map_of_pairs(flat_c[deep], flat_mu[deep], n_bins, mapped)
        flat[deep] = mapped
    shallow = np.flatnonzero(flat_c <= KEPT_COVERAGE)
    order = shallow[np.argsort(flat_c[shallow], kind="stable")]
    if order.size:
        bounds = np.flatnonzero(np.r_[True, np.diff(flat_c[order]) != 0, True])
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            rows = order[lo:hi]
            flat[rows] = _kept_table(int(flat_c[rows[0]]), n_bins)[flat_mu[rows]]
    return out


@functools.lru_cache(maxsize=None)
def _kept_table(c: int, n_bins: int) -> np.ndarray:
    """The Beta maps of every pair of coverage ``c`` (row mu), read-only: each pair's row is
    computed on its own, so a lookup gives what the pair's own computation gives, bitwise."""
    table = _beta_map_of_coverage(c, np.arange(c + 1), np.arange(n_bins + 1, dtype=np.float64) / n_bins,
                                  log_factorials(c + 1))
    table.flags.writeable = False
    return table


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """``x`` with its subnormal entries (below its dtype's smallest normal: a Beta map's far
    tail, 1.2e-38 in float32, 2.2e-308 in float64) set to zero, in place; returns ``x``.
    Matrix products with subnormals run several times slower (measured: 9.5 against 0.9 ms
    per float32 block of 8,100 bins), and no such entry reaches a sum above rounding."""
    x[np.abs(x) < np.finfo(x.dtype).tiny] = 0.0
    return x


def log_factorials(n: int) -> np.ndarray:
    """log k! for k = 0..n (gammaln(k + 1), so a lookup gives what gammaln would)."""
    from scipy.special import gammaln  # scipy on first use: the command line starts without it

    return gammaln(np.arange(n + 1, dtype=np.float64) + 1.0)


def log_binomial_pmf(n: int, p: np.ndarray, log_factorial: np.ndarray) -> np.ndarray:
    """log Bin(k; n, p) for k = 0..n and each of p (P,), shape (P, n + 1); p may be 0 or 1.
    ``log_factorial``: log_factorials(n) or a longer table."""
    k = np.arange(n + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (log_factorial[n] - log_factorial[k] - log_factorial[n - k]
                + np.where(k > 0, k * np.log(p)[:, None], 0.0) + np.where(k < n, (n - k) * np.log1p(-p)[:, None], 0.0))


def _beta_map_of_coverage(c: int, mu: np.ndarray, edges: np.ndarray, log_factorial: np.ndarray) -> np.ndarray:
    pmf = np.exp(log_binomial_pmf(c + 1, edges, log_factorial))  # (D + 1, c + 2): Y ~ Bin(c + 1, edge)
    above = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1][:, mu + 1]  # the Beta CDF at each edge: P(Y > mu)
    below = np.cumsum(pmf, axis=1)[:, mu]  # its survival function: P(Y <= mu)
    from_cdf, from_sf = np.diff(above, axis=0).T, -np.diff(below, axis=0).T
    in_upper_tail = edges[None, :-1] >= ((mu + 1.0) / (c + 2.0))[:, None]
    return np.where(in_upper_tail, from_sf, from_cdf)


def pair_keys(methylated: np.ndarray, coverage: np.ndarray) -> np.ndarray:
    """A unique non-negative int64 per pair: c (c + 1) / 2 + mu (triangular numbering)."""
    c = coverage.astype(np.int64, copy=False)
    return c * (c + 1) // 2 + methylated.astype(np.int64, copy=False)


def pairs_from_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Invert :func:`pair_keys`; returns (coverage, methylated)."""
    keys = np.asarray(keys, dtype=np.int64)
    c = ((np.sqrt(8.0 * keys + 1.0) - 1.0) // 2).astype(np.int64)
    # float rounding can put c off by one for huge keys; correct exactly in integers
    c -= (c * (c + 1) // 2 > keys).astype(np.int64)
    c += ((c + 1) * (c + 2) // 2 <= keys).astype(np.int64)
    return c, keys - c * (c + 1) // 2


@dataclass(frozen=True)
class FeatureTable:
    """Bins encoded as codes into a table of the distinct pairs present.

    ``codes[t, s]`` indexes ``table`` (K x D), ``coverage`` and ``methylated`` (K,).
    """

    codes: np.ndarray
    table: np.ndarray
    coverage: np.ndarray
    methylated: np.ndarray

    @property
    def n_bins(self) -> int:
        return self.table.shape[1]


def index_pairs(methylated: np.ndarray, coverage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the sorted distinct pair keys (K,), each count's index into them as int32, shaped
    like the counts)."""
    keys = pair_keys(methylated, coverage)
    max_key = int(keys.max()) if keys.size else 0
    if max_key < min(_DIRECT_KEY_LIMIT, 4 * keys.size + 65536):
        present = np.zeros(max_key + 1, dtype=bool)
        present[keys] = True
        distinct = np.flatnonzero(present)
        lookup = np.empty(max_key + 1, np.int64)
        lookup[distinct] = np.arange(distinct.size)
        codes = lookup[keys]
    else:
        distinct, codes = np.unique(keys, return_inverse=True)
        codes = codes.reshape(keys.shape)
    return distinct, codes.astype(np.int32)


def encode(methylated: np.ndarray, coverage: np.ndarray, n_bins: int) -> FeatureTable:
    """Encode validated counts of shape (n, S) and build their Beta-map table (entries below
    SMALLEST_FEATURE set to 0)."""
    distinct, codes = index_pairs(methylated, coverage)
    cov, meth = pairs_from_keys(distinct)
    table = beta_map(cov, meth, n_bins)
    table[table < SMALLEST_FEATURE] = 0.0
    return FeatureTable(codes=codes, table=table, coverage=cov, methylated=meth)


# -- coverage buckets ------------------------------------------------------------------------
# Fixed coverage buckets, about 1.5x wide (lower edges 0, 1, 2, 3, 5, 7, 11, 17, 25, 38, ...,
# up to ~1e5): the refinement lets each state have its own distribution over them (CpG-dense,
# unmethylated bins get more reads), so one-pass partials record coverage by these buckets.
# 2x-wide buckets left a bias 3x that of ratio recovery under state-dependent coverage; 1.5x
# matched it (docs/methods/one-pass.md).
COVERAGE_BUCKETS = np.unique(np.r_[0, 1, 2, np.floor(1.5 ** np.arange(3, 30)).astype(np.int64)])


# The coverage histogram counts bins by their coverage up to the last bucket's lower edge, and
# those with more reads at that edge (in the same, open-ended bucket): its length, and a
# partial's memory, stay bounded whatever a bin holds (one 100 bp bin of 5e8 reads asked for
# 4 GB). The expected features treat coverages above expected.LARGEST_TABULATED_COVERAGE
# (1e4) as that anyway; only the states' mean coverage of such bins is counted lower.
COVERAGE_HISTOGRAM_TOP = int(COVERAGE_BUCKETS[-1])


def histogram_coverage(coverage: np.ndarray) -> np.ndarray:
    """Coverages as the coverage histogram counts them (at most COVERAGE_HISTOGRAM_TOP)."""
    return np.minimum(coverage, COVERAGE_HISTOGRAM_TOP)


def coverage_bucket(coverage) -> np.ndarray:
    """The bucket index of each coverage."""
    return np.searchsorted(COVERAGE_BUCKETS, np.asarray(coverage), side="right") - 1


# -- histograms of single bins and of adjacent pairs of bins ----------------------------
# The moment-only refinement needs, besides the triple sums, how often each (coverage,
# methylated) pair occurs in a bin (jointly over the samples, which share the bin's state),
# and in two adjacent bins. Pairs are unbounded, so each sample of a bin is thinned to at
# most ``cap`` reads: a bin with c > cap reads is counted as the *expected* histogram of a
# random cap-read subsample, the hypergeometric distribution of its methylated reads. Under
# the Binomial model a random subsample of Binomial(c, p) reads is exactly Binomial(cap, p),
# so a thinned histogram is still a sample of the model, only at lower coverage. A
# histogram has ``slots`` counts per tuple (S for single bins, 2S for adjacent pairs); the
# cap is the largest that keeps the joint histogram within a cell budget, and with many
# samples the slots are kept per sample instead (see histogram_layout).
HISTOGRAM_CELL_BUDGET = 1 << 19
BLOCK_CELL_BUDGET = 1 << 12  # the per-block histograms of the bootstrap (streambhmm.moments.blocks)
HISTOGRAM_MAX_CAP = 256
# hypergeometric probabilities below this are dropped (deterministically, per pair)
THINNING_FLOOR = 1e-15


def cells_per_sample(cap: int) -> int:
    """Number of (c, mu) pairs with c <= cap: the cells of one slot."""
    return (cap + 1) * (cap + 2) // 2


def _largest_cap(n_slots: int, n_groups: int, budget: int) -> int:
    """Largest cap (at most HISTOGRAM_MAX_CAP) with n_groups * cells^n_slots within the budget."""
    cap = HISTOGRAM_MAX_CAP
    while cap > 0 and n_groups * cells_per_sample(cap) ** n_slots > budget:
        cap -= 1
    return cap


@dataclass(frozen=True)
class HistogramLayout:
    """How a histogram of single bins (width 1) or adjacent pairs (width 2) is kept for S
    samples: ``joint`` over all samples (one row of cells^(width S) cells), or one row per
    sample (cells^width each), or with ``ring`` one row per pair of neighbouring samples
    (s, s + 1 mod S; single bins only); ``cap`` reads per slot."""

    n_samples: int
    width: int
    cap: int
    joint: bool
    ring: bool = False

    @property
    def slots(self) -> int:
        """Counts per tuple: width * S jointly, 2 per ring pair, width per sample."""
        return self.width * (self.n_samples if self.joint else 2 if self.ring else 1)

    @property
    def rows(self) -> int:
        return 1 if self.joint or (self.ring and self.n_samples == 2) else self.n_samples

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, cells_per_sample(self.cap) ** self.slots

    def slot_samples(self, row: int) -> np.ndarray:
        """The sample of each slot of a row (bin-major: the first bin's samples, then the second's)."""
        if self.joint:
            samples = np.arange(self.n_samples)
        elif self.ring:
            samples = np.array([row, (row + 1) % self.n_samples])
        else:
            samples = np.array([row])
        return np.tile(samples, self.width)

    def row_layout(self) -> "HistogramLayout":
        """The layout of one row, as a joint layout of the row's own samples."""
        return HistogramLayout(len(self.slot_samples(0)) // self.width, self.width, self.cap, True)


def histogram_layout(n_samples: int, width: int = 1, budget: int = HISTOGRAM_CELL_BUDGET,
                     joint: bool | None = None) -> HistogramLayout:
    """Joint over the samples when a cap of at least 1 fits the budget (for single bins: at
    least 3), otherwise per sample; ``joint=False`` asks for per sample (the projected
    feature's moments, whose cost must stay linear in the samples)."""
    cap = _largest_cap(width * n_samples, 1, budget)
    if joint is not False and cap >= (3 if width == 1 else 1):
        return HistogramLayout(n_samples, width, cap, True)
    return HistogramLayout(n_samples, width, max(_largest_cap(width, n_samples, budget), 1), False)


def projected_layout(n_samples: int, width: int, budget: int = HISTOGRAM_CELL_BUDGET) -> HistogramLayout:
    """The projected feature's histograms, a row per sample or per pair, so their cost and
    size stay linear in S: single bins jointly in each pair of neighbouring samples (a ring,
    which ties every sample's levels to its neighbour's: which levels share a state), and
    adjacent pairs of bins per sample."""
    if width == 1 and n_samples >= 2:
        ring = HistogramLayout(n_samples, 1, 1, False, ring=True)
        return replace(ring, cap=max(_largest_cap(ring.slots, ring.rows, budget), 1))
    return histogram_layout(n_samples, width, budget, joint=False)


# -- the projected feature ---------------------------------------------------------------------
# With many samples the concatenated Beta maps (dimension S * D) make the triple tensor
# (S * D)^3. The projected feature F(x) = sum_s R_s phi(x^s) has a dimension K that does
# not grow with S. Each R_s (K x D) has seeded exponential entries and columns summing to 1,
# so F is nonnegative and sums to S (its pair and triple moments are distributions, as the
# refinement's KL divergences need), and since each sample's Beta map sums to 1, the
# projection's constant part cancels from every difference between states: those are
# projected as by a random (Johnson-Lindenstrauss) map. A sample's projection depends only
# on the seed and its place in the selection.
DEFAULT_PROJECTION_DIM = 32
# "auto" projects when the concatenated feature's dimension S * D exceeds this (measured,
# docs/benchmarks.md, "Many samples"): there the refinement drops its (S * D)^3 tensor term anyway
AUTO_PROJECTION_ABOVE = 64
FEATURES = ("auto", "beta", "projected")


def projection_for(feature: str, n_samples: int, n_bins: int, dim: int = DEFAULT_PROJECTION_DIM) -> int:
    """The projected dimension K to use (0: the concatenated Beta maps) for ``feature``
    ("auto", "beta" or "projected") and S samples."""
    if feature not in FEATURES:
        raise ValueError(f"feature must be one of {', '.join(FEATURES)}, got {feature!r}")
    if dim < 1:
        raise ValueError(f"the projected dimension must be >= 1, got {dim}")
    if feature == "projected" or (feature == "auto" and n_samples * n_bins > AUTO_PROJECTION_ABOVE):
        return dim
    return 0


def projection_matrix(n_samples: int, n_bins: int, dim: int, seed: int = 0) -> np.ndarray:
    """(S, K, D): R_s of the projected feature F(x) = sum_s R_s phi(x^s)."""
    out = np.empty((n_samples, dim, n_bins))
    for s in range(n_samples):
        r = np.random.default_rng([seed, s]).exponential(size=(dim, n_bins))
        out[s] = r / r.sum(axis=0, keepdims=True)
    return out


@dataclass(frozen=True)
class Thinning:
    """Each table pair's thinned distribution over histogram cells.

    A pair with c <= cap is the single cell ``base``; one with c > cap spreads over cells
    base + j (j = lo..hi, the pairs (cap, j)) with weights ``rows[row, j]``.
    """

    cap: int
    base: np.ndarray  # (K,) int64
    row: np.ndarray  # (K,) int64, -1 for a single cell
    rows: np.ndarray  # (n_thinned, cap + 1)
    lo: np.ndarray  # (n_thinned,) first and last j with weight >= THINNING_FLOOR
    hi: np.ndarray


def thinning(coverage: np.ndarray, methylated: np.ndarray, cap: int) -> Thinning:
    """The thinned distribution of each pair (c, mu) of a feature table, 0 <= cap <=
    HISTOGRAM_MAX_CAP (the compiled rows' products stay finite there)."""
    c = np.asarray(coverage, dtype=np.int64)
    mu = np.asarray(methylated, dtype=np.int64)
    if not 0 <= cap <= HISTOGRAM_MAX_CAP:
        raise ValueError(f"the thinning's cap must be within 0..{HISTOGRAM_MAX_CAP}, got {cap}")
    if ((mu < 0) | (mu > c)).any():  # the compiled rows index by them unchecked
        raise ValueError("a pair's methylated count is negative or above its coverage")
    over = c > cap
    base = np.where(over, pair_keys(np.zeros_like(c), np.full_like(c, cap)), pair_keys(mu, c))
    row = np.full(c.size, -1, np.int64)
    n_over = int(over.sum())
    row[over] = np.arange(n_over)
    rows = np.zeros((n_over, cap + 1))
    lo = np.zeros(n_over, np.int64)
    hi = np.zeros(n_over, np.int64)
    if n_over:
        from .deep_pairs import thinning_rows  # compiled on first use

        thinning_rows(c[over], mu[over], cap, THINNING_FLOOR, rows, lo, hi)
    return Thinning(cap=cap, base=base, row=row, rows=rows, lo=lo, hi=hi)


def decode_cells(cells: np.ndarray, layout: HistogramLayout) -> tuple[np.ndarray, np.ndarray]:
    """(coverage, methylated), each (n, slots), of flat cell indices into one row."""
    cells = np.asarray(cells, dtype=np.int64)
    per_slot = np.stack(np.unravel_index(cells, (cells_per_sample(layout.cap),) * layout.slots), axis=1)
    return pairs_from_keys(per_slot)
