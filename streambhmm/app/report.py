"""`streambhmm report`: an HTML page with PNG figures of a model on a counts store.

The segmentation is computed on Dask (posterior decoding, exact across chunks) and kept
as DIR/segments.bed; the page and figures are written into a staging directory that is
renamed to DIR only when complete. DIR/streambhmm-report.json lists the files the report
wrote: an existing DIR is replaced only when it is such a report holding nothing else (or
is empty), and the old report is removed file by file, so nothing the report did not write
is ever deleted (report_dir.py; the figures in report_figures.py, the page in report_page.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np

from ..distributed.cluster import compute
from ..distributed.decode import decode_store
from ..io.bed import read_bed
from ..io.progress import stage as progress_stage
from ..io.rows import first_few
from ..learn.evaluate import differential_states
from ..learn.spectral import whiten
from ..learn.states import DIFF_THRESHOLD
from ..moments.momentstore import load_total, read_manifest
from ..moments.pipeline import moments_graph
from ..moments.spec import FeatureSpec
from .modelio import model_for_store
from .report_dir import (check_report_output, put_report_in_place, remove_report_leftovers, staged_report,
                         write_marker)
from .report_figures import (OCCUPANCY_ROWS, Region, plot_bootstrap, plot_history, plot_methylation, plot_occupancy,
                             plot_spectrum, plot_track, plot_transmat)
from .report_page import render_page

REGION_BINS = 500  # default track width, in bins


def parse_region(text: str) -> Region:
    """'chr1:10,000-20,000' (0-based, half-open) -> Region."""
    match = re.fullmatch(r"\s*([^:\s]+):([\d,]+)-([\d,]+)\s*", text)
    if not match:
        raise ValueError(f"region {text!r} is not CHROM:START-END")
    start, end = (int(v.replace(",", "")) for v in match.group(2, 3))
    if end <= start:
        raise ValueError(f"region {text!r} ends before it starts")
    return Region(match.group(1), start, end)


@dataclass
class ReportResult:
    path: Path
    figures: list
    timings: dict = field(default_factory=dict)


def write_report(opened, model, output, region: str | None = None, max_gap: int = 1000,
                 diff_threshold: float = DIFF_THRESHOLD, moments=None, quiet: bool = False,
                 regions: tuple = ()) -> ReportResult:
    """Decode the store ``opened`` (distributed.cluster.store_session: its shared lock held,
    as the report only reads it) with ``model`` and write DIR/index.html, its PNGs and
    segments.bed, each step's progress shown unless ``quiet`` (io.progress). ``output`` is
    refused before any work unless it can be replaced (:func:`check_report_output`).
    ``regions``: (name, BedItems) of BED files (read_region_sets: hmr, pmd, dmr calls) drawn
    under the track, which by default shows the first file's highest-scoring region."""
    output = check_report_output(output, opened.path, model, moments)
    matplotlib.use("Agg")
    start = time.perf_counter()
    timings = {}
    counts = opened.store
    document = model_for_store(counts, model)
    hmm = document.hmm()
    if document.pooled:
        raise ValueError(f"{model} is a pooled model; the report draws joint models only (decode a pooled "
                         f"model with `streambhmm decode`)")
    samples = document.samples
    labels = document.labels
    region_sets = list(regions)
    for name, items in region_sets:  # a row that could never show a region: another genome's calls, or chr22's
        if items and not any(item.chrom in counts.chromosomes for item in items):
            raise ValueError(f"--regions {name}: none of its regions is on a chromosome of {counts.path} "
                             f"({first_few(counts.chromosomes, 5)}); they are on "
                             f"{first_few(dict.fromkeys(item.chrom for item in items), 5)}")
    where = parse_region(region) if region else \
        _region_around(counts, region_sets[0]) if region_sets else _default_region(counts, samples)
    if where.chrom not in counts.chromosomes:
        raise ValueError(f"region {where}: {counts.path} has no chromosome {where.chrom}")
    where = _checked_view(counts, samples, where)
    remove_report_leftovers(output)
    with staged_report(output) as stage:
        t = time.perf_counter()
        with progress_stage("report: decode", quiet=quiet, unit="chunks") as progress:
            decoded = decode_store(counts, hmm, opened.client, stage / "segments.bed", samples, max_gap,
                                   progress=progress, labels=labels, track=f"{Path(model).stem} states")
        timings["decode on Dask"] = time.perf_counter() - t
        t = time.perf_counter()
        spectrum = model_spectrum(counts, document, opened.client, moments, quiet)
        timings["spectrum (moment store)" if moments else "spectrum (moments on Dask)"] = time.perf_counter() - t
        t = time.perf_counter()
        diff = differential_states(hmm.methylation_, diff_threshold)
        figures = _figures(counts, document, hmm, decoded, spectrum, where, stage / "segments.bed", diff,
                           diff_threshold, region_sets)
        with progress_stage("report: figures", len(figures), quiet=quiet, unit="figures") as progress:
            for done, (name, _, draw) in enumerate(figures, 1):
                draw(stage / name)
                progress(done)
        timings["figures"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - start
        page = render_page(counts, document, model, hmm, decoded, figures, where, max_gap, diff, timings)
        (stage / "index.html").write_text(page)
        write_marker(stage, ["index.html", "segments.bed", *(n for n, _, _ in figures)])
        put_report_in_place(stage, output)
    return ReportResult(output / "index.html", [name for name, _, _ in figures], timings)


def _figures(counts, document, hmm, decoded, spectrum, where: Region, bed, diff, diff_threshold,
             region_sets=()) -> list:
    """(file name, caption, draw(path)) of each figure the report holds."""
    samples, labels = document.samples, document.labels
    figures = [
        ("methylation.png", "Methylation level by state and sample. States are ordered from least to most "
                            f"methylated; differential states (levels differ by more than {diff_threshold:g} "
                            "across samples) are marked *.",
         lambda path: plot_methylation(path, hmm.methylation_, samples, diff, labels)),
        ("transmat.png", "Transition probabilities (row: from, column: to), states in the same order.",
         lambda path: plot_transmat(path, hmm.transmat_, hmm.methylation_)),
        ("spectrum.png", "Singular values of the normalized P13 moment. The chosen number of states m is "
                         "marked; the spectrum check needs the m-th value above the noise level.",
         lambda path: plot_spectrum(path, spectrum, hmm.n_components)),
        ("occupancy.png", "Fraction of covered bins decoded to each state, per chromosome (its covered bins "
                          "in brackets"
                          + (f"; the {OCCUPANCY_ROWS - 1} chromosomes with the most covered bins, the other "
                             f"{len(decoded.chromosome_state_bins) - OCCUPANCY_ROWS + 1:,} in one row"
                             if len(decoded.chromosome_state_bins) > OCCUPANCY_ROWS else "") + ").",
         lambda path: plot_occupancy(path, decoded.chromosome_state_bins, hmm.methylation_, labels)),
        ("track.png", f"{where}: methylation fraction per covered bin and sample (point size grows with "
                      "coverage), and the decoded states below"
                      + "".join(f"; {name}: its regions in their BED colours" for name, _ in region_sets) + ".",
         lambda path: plot_track(path, counts, samples, where, bed, hmm.methylation_, labels, region_sets)),
    ]
    if document.methylation_ci is not None:
        figures.append(("bootstrap.png", "Block-bootstrap 95% intervals of each state's levels.",
                        lambda path: plot_bootstrap(path, hmm.methylation_, document.methylation_ci, samples)))
    if document.loglik_history is not None:
        figures.append(("loglik.png", "EM log-likelihood per iteration.",
                        lambda path: plot_history(path, document.loglik_history)))
    return figures


def model_spectrum(counts, document, client, moments=None, quiet: bool = False) -> dict:
    """P13's leading singular values and the spectrum check's noise level, from a moment
    store with the model's samples and D if given, else from one moment pass on Dask."""
    n_bins = document.n_bins
    if moments is not None:
        read_manifest(moments).check_request(moments, document.samples, FeatureSpec(n_bins=n_bins),
                                             "the model's samples")
        total = load_total(moments)[0]
    else:
        # no block statistics: the spectrum needs the sums alone, so the chunks of short contigs go in batches
        graph = moments_graph(counts, document.samples, n_bins=n_bins, block_size=None)
        total = compute(client, graph.total, quiet=quiet, what=f"the moments of {counts.path}",
                        parts=graph.partials, unit="chunks")
    m = document.n_states
    spectrum = whiten(total, m, check_spectrum=False)
    return {"p13_singular_values": spectrum.p13_singular_values[:max(2 * m, m + 6)].tolist(),
            "noise_level": spectrum.noise_floor}


def read_region_sets(paths) -> list:
    """(name, BedItems) of each BED file, its name without .bed."""
    return [(Path(path).name.removesuffix(".bed"), read_bed(path)) for path in paths]


def _region_around(counts, region_set) -> Region:
    """A view centred on the highest-scoring region of (name, BedItems) on a chromosome of the
    store (of equal scores the longest, then the first: scores saturate, a DMR's at 1000, and
    the longest shows the most): REGION_BINS bins, or three times the region if longer."""
    name, items = region_set
    on_store = [item for item in items if item.chrom in counts.chromosomes]
    if not on_store:
        raise ValueError(f"{name}.bed has no region on the chromosomes of {counts.path} "
                         f"({first_few(counts.chromosomes, 5)})")
    best = max(on_store, key=lambda item: (item.score, item.end - item.start))  # max keeps the first of equals
    width = max(REGION_BINS * counts.bin_size, 3 * (best.end - best.start))
    start = max((best.start + best.end) // 2 - width // 2, 0)
    return Region(best.chrom, start, start + width)


def _checked_view(counts, samples, where: Region) -> Region:
    """The view on the store's bins of its chromosome (from the start of its first bin to the
    end of the last), refused (before any work) when it holds no covered bin of the samples."""
    last = counts.n_bins(where.chrom) * counts.bin_size
    if where.start >= last:
        raise ValueError(f"region {where}: starts after the last bin of {where.chrom} in {counts.path}, which ends "
                         f"at {last:,}")
    view = Region(where.chrom, where.start // counts.bin_size * counts.bin_size, min(where.end, last))
    lo, hi = view.start // counts.bin_size, -(-view.end // counts.bin_size)
    for ref in counts.chunk_refs(view.chrom, samples):
        if ref.start < hi and ref.stop > lo:
            _, cov = ref.read()
            if cov[max(lo - ref.start, 0):hi - ref.start].any():
                return view
    raise ValueError(f"region {where}: no bin of {where.chrom} there has reads of {', '.join(samples)[:200]}; "
                     f"choose another --region")


def _default_region(counts, samples) -> Region:
    """REGION_BINS bins from the first covered bin of the first chromosome."""
    chrom = counts.chromosomes[0]
    ref = counts.chunk_refs(chrom, samples)[0]
    _, cov = ref.read()
    first = int(ref.positions([np.flatnonzero(cov.sum(axis=1))[0]])[0])
    return Region(chrom, first, first + REGION_BINS * counts.bin_size)
