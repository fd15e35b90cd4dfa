"""What only tests and benchmarks need: stores written from arrays, counts loaded whole.
Each part of the package keeps its own section."""

from __future__ import annotations

import numpy as np

from .io.store import DEFAULT_CHUNK_SIZE, CountsStore, SampleWriter, open_store
from .moments.pipeline import kept_sequences, plan_chunks, select_samples


# --- io: counts stores from arrays, and back ---
def write_store(path, chromosomes: dict, samples: list[str], bin_size: int = 100,
                chunk_size: int = DEFAULT_CHUNK_SIZE, provenance: dict | None = None) -> CountsStore:
    """Write a counts store from in-memory counts: ``chromosomes`` maps each name to
    (bins, methylated (n, S), coverage (n, S)), bins being bin indices. Each sample goes in
    through a SampleWriter and a commit, as an ingest would put it."""
    for s, sample in enumerate(samples):
        with SampleWriter(path, bin_size, chunk_size) as writer:
            for chrom, (bins, meth, cov) in chromosomes.items():
                keep = np.asarray(cov)[:, s] > 0
                writer.add(chrom, np.asarray(bins)[keep], np.asarray(meth)[keep, s], np.asarray(cov)[keep, s])
            writer.commit(sample, (provenance or {}).get(sample, {}))
    return open_store(path)


def load_counts(store: CountsStore, samples=None):
    """All kept bins of the store in memory: (methylated, coverage, lengths), one length
    per chromosome. For in-memory use and tests only; it loads the whole genome."""
    samples = select_samples(store, samples)
    meth, cov, lengths = [], [], []
    for chrom in store.chromosomes:
        kept = [kept_sequences(None, *plan.ref.read(), None)[0][1:3]
                for plan in plan_chunks(store, samples, chromosomes=[chrom])]
        meth += [m for m, _ in kept]
        cov += [c for _, c in kept]
        lengths.append(sum(m.shape[0] for m, _ in kept))
    empty = np.zeros((0, len(samples)), np.int64)
    return np.concatenate(meth or [empty]), np.concatenate(cov or [empty]), np.array(lengths, dtype=np.int64)


def chunk_tail(previous, methylated, coverage, positions, pooled: bool = False):
    """The last two kept bins (counts and positions) up to the end of this chunk: the next
    chunk's halo (per sample when pooled)."""
    tails = [tuple(np.concatenate([before, now])[-2:] for before, now in zip(halo, kept))
             for halo, *kept in kept_sequences(previous, methylated, coverage, positions, pooled)]
    return tails if pooled else tails[0]
