"""Typed settings of a moment pass, resolved once: the feature spec (kind, bins, dimension,
seed, pooled, block size) and the grouping of samples into sequences."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .features import (BLOCK_CELL_BUDGET, DEFAULT_N_BINS, DEFAULT_PROJECTION_DIM, HISTOGRAM_CELL_BUDGET,
                       projection_for)

DEFAULT_BLOCK_SIZE = 1_000_000
# Each block keeps its own statistics (a few kB times samples squared) whatever its length,
# so the moment store grows as 1 / block size: below MIN_BLOCK_BINS bins a block holds fewer
# counts than statistics (--block-size 1 made every bin a block: a 52x larger store).
MIN_BLOCK_BINS = 50


def check_block_size(block_size: int, bin_size: int) -> None:
    """Refuse a block shorter than MIN_BLOCK_BINS bins of ``bin_size`` bp (ValueError)."""
    smallest = MIN_BLOCK_BINS * bin_size
    if block_size < smallest:
        raise ValueError(f"--block-size {block_size:,} bp is below the minimum of {smallest:,} bp ({MIN_BLOCK_BINS} "
                         f"bins of {bin_size:,} bp): every block keeps its own statistics, so the moments would "
                         f"grow as 1 / block size. The default is {DEFAULT_BLOCK_SIZE:,} bp")


@dataclass(frozen=True)
class Grouping:
    """Samples and how they form sequences: jointly (each bin a vector of the samples'
    counts) or pooled (each sample a sequence of its own, the moments summed: one sample wide)."""

    samples: tuple[str, ...]
    pooled: bool = False

    def __post_init__(self):
        object.__setattr__(self, "samples", tuple(self.samples))

    @classmethod
    def of(cls, samples) -> Grouping:
        """``samples`` as a Grouping: a Grouping as it is, a list of samples taken jointly."""
        return samples if isinstance(samples, Grouping) else cls(tuple(samples))

    @property
    def groups(self) -> list[list[str]]:
        """The samples of each sequence: all of them together, or each on its own when pooled."""
        return [[s] for s in self.samples] if self.pooled else [list(self.samples)]

    @property
    def width(self) -> int:
        """Samples side by side in a sequence: 1 when pooled."""
        return 1 if self.pooled else len(self.samples)

    @property
    def columns(self) -> list[str]:
        """Names of a model's methylation columns: the samples, or one for a pooled model."""
        return ["pooled"] if self.pooled else list(self.samples)


class Grouped:
    """What has a ``grouping`` (a Grouping): its samples, pooled flag and columns, read through."""

    grouping: Grouping

    @property
    def samples(self) -> list[str]:
        return list(self.grouping.samples)

    @property
    def pooled(self) -> bool:
        return self.grouping.pooled

    @property
    def columns(self) -> list[str]:
        return self.grouping.columns


@dataclass(frozen=True)
class FeatureSpec:
    """The feature moments are summed of. As asked, ``kind`` may be "auto" and ``block_size``
    None (a moment store's, else DEFAULT_BLOCK_SIZE); :meth:`resolve` fixes both once the
    samples are known. ``dim`` and ``seed`` count only for the projected feature."""

    kind: str = "auto"  # "auto", "beta" or "projected"
    n_bins: int = DEFAULT_N_BINS
    dim: int = DEFAULT_PROJECTION_DIM
    seed: int = 0
    pooled: bool = False
    block_size: int | None = None

    @classmethod
    def of_settings(cls, n_bins: int, projection_dim: int = 0, projection_seed: int = 0, pooled: bool = False,
                    block_size: int | None = None) -> FeatureSpec:
        """The spec of keyword settings (moments_graph, testing.update_moment_store): the projected
        feature when ``projection_dim`` K > 0, else the Beta maps."""
        return cls("projected" if projection_dim else "beta", n_bins, projection_dim, projection_seed, pooled,
                   block_size)

    def resolve(self, n_samples: int, block_size: int | None = None) -> FeatureSpec:
        """The spec for ``n_samples`` selected samples: "auto" decided (features.projection_for),
        no projection settings for the beta feature, the block size ``block_size`` if none was asked."""
        dim = 0 if self.kind == "beta" else projection_for(self.kind, 1 if self.pooled else n_samples, self.n_bins,
                                                           self.dim)
        return replace(self, kind="projected" if dim else "beta", dim=dim, seed=self.seed if dim else 0,
                       block_size=self.block_size or block_size or DEFAULT_BLOCK_SIZE)

    @property
    def projection_dim(self) -> int:
        """K of the projected feature; 0 for the concatenated Beta maps."""
        return self.dim if self.kind == "projected" else 0

    def grouping(self, samples) -> Grouping:
        return Grouping(tuple(samples), self.pooled)

    def record(self) -> dict:
        """The moment store's "feature" (manifest and Zarr attributes). ``pooled`` and the
        projection are recorded only when set, so other stores keep their digests."""
        record = {"kind": self.kind, "n_bins": int(self.n_bins), "block_size": int(self.block_size),
                  "histogram_budget": HISTOGRAM_CELL_BUDGET, "block_histogram_budget": BLOCK_CELL_BUDGET}
        if self.projection_dim:
            record.update(dim=int(self.dim), seed=int(self.seed))
        return {**record, "pooled": True} if self.pooled else record

    @classmethod
    def of_record(cls, record: dict) -> "FeatureSpec":
        """The spec a moment store's "feature" records."""
        return cls(record.get("kind", "beta"), record["n_bins"], record.get("dim", 0), record.get("seed", 0),
                   bool(record.get("pooled")), record["block_size"])
