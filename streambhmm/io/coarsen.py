"""A counts store's bins summed into wider ones, as a new store: `pmd` works on 5 kb bins
from a store ingested at 100 bp, without a second ingest.

A bin's start is floor(pos0 / bin) * bin, so the coarse bin of a row,
floor(pos0 / (bin * factor)), is floor(fine bin / factor): summing ``factor`` consecutive
bins gives exactly what an ingest of the same files at ``bin * factor`` would have stored.
Each sample is read one chunk at a time, the next ones read ahead in a thread while this one
is added (io.blocks.prefetched), and written through a SampleWriter, so memory holds at most
three chunks, and the new store is as any ingest would leave it.
"""

from __future__ import annotations

import numpy as np

from .blocks import prefetched
from .store import CountsStore, SampleWriter, open_store


def coarsen(store: CountsStore, factor: int, output, samples: list[str], progress=None) -> CountsStore:
    """Write ``samples`` of ``store`` into a new counts store ``output`` with bins ``factor``
    times wider; ``progress(done, total)`` after each chunk of a sample is summed."""
    if factor < 1:
        raise ValueError(f"the coarsening factor must be a positive integer, got {factor}")
    chunk_size = max(store.chunk_size // factor, 1)
    refs = {sample: [ref for chrom in store.chromosomes for ref in store.chunk_refs(chrom, [sample])]
            for sample in samples}
    total, done = sum(map(len, refs.values())), 0
    for sample in samples:
        provenance = {k: v for k, v in store.meta.samples[sample].items() if k != "column"}
        provenance["coarsened"] = {"store": str(store.path), "bin_size": store.bin_size, "factor": factor}
        with SampleWriter(output, store.bin_size * factor, chunk_size) as writer:
            for ref, (meth, cov) in prefetched(((ref, ref.read()) for ref in refs[sample]), depth=1):
                rows = np.flatnonzero(cov[:, 0])
                writer.add(ref.chrom, (ref.start + rows) // factor, meth[rows, 0], cov[rows, 0])
                done += 1
                if progress is not None:
                    progress(done, total)
            writer.commit(sample, provenance, scratch=True)
    return open_store(output)
