"""A counts store's bins summed into wider ones, as a new store: `pmd` works on 5 kb bins
from a store ingested at 100 bp, without a second ingest.

A bin's start is floor(pos0 / bin) * bin, so the coarse bin of a row,
floor(pos0 / (bin * factor)), is floor(fine bin / factor): summing ``factor`` consecutive
bins gives exactly what an ingest of the same files at ``bin * factor`` would have stored.
Each sample is read one chunk at a time and written through a SampleWriter, so memory holds
two chunks (the next one is read in a thread while this one is added), and the new store is
as any ingest would leave it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

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
            for ref, (meth, cov) in _read_ahead(refs[sample]):
                rows = np.flatnonzero(cov[:, 0])
                writer.add(ref.chrom, (ref.start + rows) // factor, meth[rows, 0], cov[rows, 0])
                done += 1
                if progress is not None:
                    progress(done, total)
            writer.commit(sample, provenance)
    return open_store(output)


def _read_ahead(refs: list):
    """Each chunk reference with its counts, the next chunk read (decompressed, checked) in a
    thread while the caller adds this one."""
    with ThreadPoolExecutor(1, thread_name_prefix="streambhmm-coarsen") as pool:
        pending = pool.submit(refs[0].read) if refs else None
        for i, ref in enumerate(refs):
            counts = pending.result()
            if i + 1 < len(refs):
                pending = pool.submit(refs[i + 1].read)
            yield ref, counts
