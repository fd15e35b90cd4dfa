"""Synthetic counts stores for benchmarks (scripts/bench_*.py): a two-sample genome of
simulated bins, written chromosome by chromosome."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..io.store import SampleWriter
from ..learn.simulate import model, simulate


CHROM_BINS = 2_500_000  # like human chr1 at 100 bp
BENCH_TRUTH = model([[0.05, 0.10], [0.35, 0.80], [0.65, 0.20], [0.95, 0.90]],
                    np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3))
BENCH_COVERAGE = [[30, 25], [15, 18], [15, 18], [12, 14]]


def build_synthetic_store(path: Path, total: int, chunk_size: int, echo=lambda message: None) -> float:
    """A two-sample counts store of ``total`` simulated bins, written one chromosome
    (CHROM_BINS bins) at a time so the genome is never whole in memory; returns seconds."""
    start = time.perf_counter()
    sizes = [CHROM_BINS] * (total // CHROM_BINS) + ([total % CHROM_BINS] if total % CHROM_BINS else [])
    writers = [SampleWriter(path, 100, chunk_size) for _ in range(2)]
    try:
        for i, size in enumerate(sizes):
            sim = simulate(BENCH_TRUTH, [size], coverage=BENCH_COVERAGE, random_state=i)
            for s, writer in enumerate(writers):
                covered = np.flatnonzero(sim.coverage[:, s] > 0)
                writer.add(f"chr{i + 1}", covered, sim.methylated[covered, s], sim.coverage[covered, s])
            echo(f"  wrote chr{i + 1} ({sum(sizes[:i + 1]):,} of {total:,} bins)")
        for name, writer in zip("AB", writers):
            writer.commit(name, {"synthetic": True})
    finally:
        for writer in writers:
            writer.close()
    return time.perf_counter() - start
