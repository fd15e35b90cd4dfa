"""`streambhmm report`: an HTML page with PNG figures of a model on a counts store.

The segmentation is computed on Dask (posterior decoding, exact across chunks) and kept
as DIR/segments.bed; the page and figures are written into a staging directory that is
renamed to DIR only when complete. DIR/streambhmm-report.json lists the files the report
wrote: an existing DIR is replaced only when it is such a report holding nothing else (or
is empty), and the old report is removed file by file, so nothing the report did not write
is ever deleted.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import platform
import re
import stat
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np

from ..learn.evaluate import differential_states
from .modelio import model_for_store, model_labels
from ..learn.states import state_colours as rgb_colours
from ..learn.states import state_order
from ..io.outputs import check_output_dir, directory_lock_now, is_temporary_of, temporary_path
from ..io.storage import Location
from ..io.store import locked

REGION_BINS = 500  # default track width, in bins
REPORT_MARKER = "streambhmm-report.json"  # in every report directory: the files the report wrote
REPORT_FORMAT = "streambhmm-report"
FIGURES = ("methylation.png", "transmat.png", "spectrum.png", "occupancy.png", "track.png", "bootstrap.png",
           "loglik.png")
REPORT_FILES = ("index.html", "segments.bed", *FIGURES)  # every name a report may write besides its marker
VERSIONED = ("streambhmm", "numpy", "scipy", "numba", "dask", "distributed", "zarr", "xarray", "matplotlib")


@dataclass
class Region:
    chrom: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.chrom}:{self.start:,}-{self.end:,}"


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


def write_report(store, model, output, client, region: str | None = None, max_gap: int = 1000,
                 diff_threshold: float = 0.3, moments=None, progress=None) -> ReportResult:
    """Decode ``store`` with ``model`` and write DIR/index.html, its PNGs and segments.bed,
    holding the store's exclusive lock throughout (decoding may write into it, and the
    figures read it). ``output`` is refused before any work unless it can be replaced
    (:func:`check_report_output`)."""
    output = check_report_output(output, store, model, moments)
    with locked(store):
        return _write_report(store, model, output, client, region, max_gap, diff_threshold, moments, progress)


def _write_report(store, model, output, client, region, max_gap, diff_threshold, moments, progress) -> ReportResult:
    import matplotlib

    matplotlib.use("Agg")
    from ..distributed.storehmm import decode_store

    start = time.perf_counter()
    timings = {}
    counts, document, hmm = model_for_store(store, model)
    if document.pooled:
        raise ValueError(f"{model} is a pooled model; the report draws joint models only (decode a pooled "
                         f"model with `streambhmm decode`)")
    samples = document.samples
    labels = model_labels(document)
    where = parse_region(region) if region else _default_region(counts, samples)
    if where.chrom not in counts.chromosomes:
        raise ValueError(f"region {where}: {counts.path} has no chromosome {where.chrom}")
    remove_report_leftovers(output)
    with staged_report(output) as stage:
        t = time.perf_counter()
        decoded = decode_store(counts, hmm, client, stage / "segments.bed", samples, max_gap, progress=progress,
                               labels=labels, track=f"{Path(model).stem} states", lock=False)
        timings["decode on Dask"] = time.perf_counter() - t
        t = time.perf_counter()
        spectrum = model_spectrum(counts, document, client, moments)
        timings["spectrum (moment store)" if moments else "spectrum (moments on Dask)"] = time.perf_counter() - t
        t = time.perf_counter()
        diff = differential_states(hmm.methylation_, diff_threshold)
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
            ("occupancy.png", "Fraction of covered bins decoded to each state, per chromosome.",
             lambda path: plot_occupancy(path, decoded.chromosome_state_bins, hmm.methylation_, labels)),
            ("track.png", f"{where}: methylation fraction per covered bin and sample (point size grows with "
                          "coverage), and the decoded states below.",
             lambda path: plot_track(path, counts, samples, where, stage / "segments.bed", hmm.methylation_,
                                     labels)),
        ]
        if "methylation_ci" in document:
            figures.append(("bootstrap.png", "Block-bootstrap 95% intervals of each state's levels.",
                            lambda path: plot_bootstrap(path, hmm.methylation_, document["methylation_ci"],
                                                        samples)))
        if "loglik_history" in document:
            figures.append(("loglik.png", "EM log-likelihood per iteration.",
                            lambda path: plot_history(path, document["loglik_history"])))
        for name, _, draw in figures:
            draw(stage / name)
        timings["figures"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - start
        page = render_page(counts, document, model, hmm, decoded, figures, where, max_gap, diff, timings)
        (stage / "index.html").write_text(page)
        (stage / REPORT_MARKER).write_text(json.dumps(
            {"format": REPORT_FORMAT, "files": ["index.html", "segments.bed", *(n for n, _, _ in figures)]}) + "\n")
        put_in_place(stage, output)
    return ReportResult(output / "index.html", [name for name, _, _ in figures], timings)


# -- the report directory ---------------------------------------------------------------------
def check_report_output(output, store, model, moments=None) -> Path:
    """``output`` as a report directory, refused before any work (naming it) when its parent
    cannot take it, when it is a symbolic link, when it holds or lies inside the counts
    store, the model or the moment store (real paths compared), or when it exists and is
    neither empty nor a previous report holding only what that report wrote."""
    output = check_output_dir(output)
    if output.is_symlink():
        raise ValueError(f"{output}: is a symbolic link; give the directory itself")
    real = Path(os.path.realpath(output))
    inputs = {"the counts store": store, "the model": model, "the moment store": moments}
    for what, path in inputs.items():
        if path is None or not Location.of(path).is_local:
            continue
        other = Path(os.path.realpath(path))
        if real == other or real in other.parents:
            relation = "is" if real == other else "holds"
            raise ValueError(f"{output}: {relation} {what} {path}, and a report replaces its directory; choose "
                             f"another")
        if other in real.parents:
            raise ValueError(f"{output}: is inside {what} {path}; choose a directory outside it")
    if output.exists():
        previous_report_files(output)
    return output


def previous_report_files(directory: Path) -> list[str]:
    """The files a previous report in ``directory`` wrote (none for an empty directory);
    ValueError when ``directory`` is not a report or holds anything else."""
    entries = {entry.name: entry for entry in directory.iterdir()}
    if not entries:
        return []
    marker = directory / REPORT_MARKER
    try:
        document = json.loads(marker.read_text()) if _is_plain_file(marker) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        document = None
    written = document.get("files") if isinstance(document, dict) and document.get("format") == REPORT_FORMAT \
        else None
    if not isinstance(written, list) or not all(isinstance(n, str) and n in REPORT_FILES for n in written):
        raise ValueError(f"{directory}: exists and is not a streambhmm report (no valid {REPORT_MARKER}); a report "
                         f"replaces its directory, so give a new directory, an empty one or a previous report's")
    foreign = sorted(name for name, entry in entries.items()
                     if name != REPORT_MARKER and (name not in written or not _is_plain_file(entry)))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ValueError(f"{directory}: a previous report, but it also holds what the report did not write "
                         f"({shown}); move that away or choose another directory")
    return written


def _is_plain_file(path: Path) -> bool:
    """A regular file itself, not a symbolic link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def staged_report(output: Path):
    """A new staging directory beside ``output``, locked while the report is written (so
    another run does not take it for a leftover) and removed, with what the report wrote
    into it, unless it was put in place."""
    stage = temporary_path(output)
    stage.mkdir()
    with directory_lock_now(stage):  # new: nobody else holds it
        try:
            yield stage
        except BaseException:
            if _is_plain_dir(stage):  # not yet put in place
                _remove_written(stage, REPORT_FILES)
            raise


def put_in_place(stage: Path, output: Path) -> None:
    """Rename the complete ``stage`` to ``output``; a previous report there (checked again)
    is set aside first and then removed file by file."""
    if not output.exists():
        os.rename(stage, output)
        return
    written = previous_report_files(output)
    aside = temporary_path(output, "old")
    os.rename(output, aside)
    try:
        os.rename(stage, output)
    except BaseException:
        os.rename(aside, output)  # the previous report stays
        raise
    _remove_written(aside, written)


def remove_report_leftovers(output: Path) -> None:
    """Remove what killed runs of this report left beside ``output``: staging directories
    no live run holds, and previous reports set aside; each only of the files a report
    writes (a directory holding anything else is left as it is)."""
    for entry in output.parent.iterdir():
        if is_temporary_of(output, entry) and _is_plain_dir(entry):
            with contextlib.suppress(BlockingIOError, FileNotFoundError):  # live, or removed meanwhile
                with directory_lock_now(entry):
                    _remove_written(entry, REPORT_FILES)
        elif is_temporary_of(output, entry, "old") and _is_plain_dir(entry):
            with contextlib.suppress(ValueError, FileNotFoundError):  # not only a report's files, or removed
                _remove_written(entry, previous_report_files(entry))


def _is_plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove_written(directory: Path, names) -> None:
    """Remove from ``directory`` the files ``names``, their temporaries and the marker (links
    themselves, never what they point to), then the directory if nothing else is left."""
    names = {*names, REPORT_MARKER}
    for entry in directory.iterdir():
        ours = entry.name in names or any(is_temporary_of(name, entry) for name in names)
        if ours and not _is_plain_dir(entry):
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()  # not empty: something the report did not write is kept


def model_spectrum(counts, document, client, moments=None) -> dict:
    """P13's leading singular values and the spectrum check's noise level, from a moment
    store with the model's samples and D if given, else from one moment pass on Dask."""
    from ..moments.momentstore import load_total, read_manifest
    from ..moments.spec import FeatureSpec
    from ..distributed.cluster import compute
    from ..moments.pipeline import moments_graph
    from ..learn.spectral import whiten

    n_bins = document.n_bins
    if moments is not None:
        read_manifest(moments).check_request(moments, document.samples, FeatureSpec(n_bins=n_bins),
                                             "the model's samples")
        total = load_total(moments)[0]
    else:
        total = compute(client, moments_graph(counts, document.samples, n_bins=n_bins).total,
                        what=f"the moments of {counts.path}")
    m = document.n_states
    spectrum = whiten(total, m, check_spectrum=False)
    return {"p13_singular_values": spectrum.p13_singular_values[:max(2 * m, m + 6)].tolist(),
            "noise_level": spectrum.noise_floor}


def _default_region(counts, samples) -> Region:
    """REGION_BINS bins from the first covered bin of the first chromosome."""
    chrom = counts.chromosomes[0]
    ref = counts.chunk_refs(chrom, samples)[0]
    _, cov = ref.read()
    first = int(ref.positions([np.flatnonzero(cov.sum(axis=1))[0]])[0])
    return Region(chrom, first, first + REGION_BINS * counts.bin_size)


# -- figures ----------------------------------------------------------------------------------
def state_colours(methylation):
    """The states' colours (states.state_colours, as in the BED files) for matplotlib."""
    return [tuple(v / 255 for v in colour) for colour in rgb_colours(methylation)]


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def plot_methylation(path, methylation, samples, differential, labels) -> None:
    import matplotlib.pyplot as plt

    order = state_order(methylation)
    levels = np.asarray(methylation)[order].T  # samples x states
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * len(order), 1.0 + 0.45 * len(samples)))
    image = ax.imshow(levels, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(levels.shape[0]):
        for j in range(levels.shape[1]):
            ax.text(j, i, f"{levels[i, j]:.2f}", ha="center", va="center",
                    color="white" if levels[i, j] < 0.6 else "black", fontsize=8)
    ax.set_xticks(range(len(order)), [f"{h}{'*' if h in differential else ''} {labels[h]}" for h in order],
                  rotation=30, ha="right", fontsize=7)
    ax.set_yticks(range(len(samples)), samples)
    ax.set_xlabel("state (* differential)")
    fig.colorbar(image, ax=ax, label="methylation level")
    _save(fig, path)


def plot_transmat(path, transmat, methylation) -> None:
    import matplotlib.pyplot as plt

    order = state_order(methylation)
    t = np.asarray(transmat)[np.ix_(order, order)]
    fig, ax = plt.subplots(figsize=(1.5 + 0.6 * len(order), 1.0 + 0.55 * len(order)))
    image = ax.imshow(t, cmap="magma", vmin=0, vmax=1)
    for i in range(len(order)):
        for j in range(len(order)):
            ax.text(j, i, f"{t[i, j]:.2f}", ha="center", va="center", color="white" if t[i, j] < 0.5 else "black",
                    fontsize=7)
    ax.set_xticks(range(len(order)), order)
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("to state")
    ax.set_ylabel("from state")
    fig.colorbar(image, ax=ax, label="probability")
    _save(fig, path)


def plot_spectrum(path, spectrum: dict, m: int) -> None:
    import matplotlib.pyplot as plt

    values = np.asarray(spectrum["p13_singular_values"], dtype=float)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    index = np.arange(1, len(values) + 1)
    ax.semilogy(index, np.maximum(values, 1e-300), "o-", color="tab:gray")
    ax.semilogy(index[:m], np.maximum(values[:m], 1e-300), "o", color="tab:blue", label=f"the m = {m} kept")
    ax.axvline(m + 0.5, color="tab:blue", linestyle=":")
    ax.axhline(spectrum["noise_level"], color="tab:red", linestyle="--", label="noise level")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value of P13")
    ax.legend()
    _save(fig, path)


def plot_occupancy(path, chromosome_state_bins: dict, methylation, labels) -> None:
    import matplotlib.pyplot as plt

    chroms = list(chromosome_state_bins)
    counts = np.array([chromosome_state_bins[c] for c in chroms], dtype=float)
    fractions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    colours = state_colours(methylation)
    fig, ax = plt.subplots(figsize=(7.5, 1.0 + 0.3 * len(chroms)))
    left = np.zeros(len(chroms))
    for h in state_order(methylation):
        ax.barh(chroms, fractions[:, h], left=left, color=colours[h], edgecolor="white", linewidth=0.5,
                label=f"{h} {labels[h]}")
        left += fractions[:, h]
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of covered bins")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _save(fig, path)


def region_segments(bed_path, region: Region, labels: list[str]):
    """(start, end, state) of the BED runs (named by the states' ``labels``) overlapping ``region``."""
    state_of = {label: h for h, label in enumerate(labels)}
    out = []
    with open(bed_path) as bed:
        for line in bed:
            if line.startswith(("#", "track", "browser")):
                continue
            chrom, start, end, name = line.split("\t", 4)[:4]
            if chrom == region.chrom and int(end) > region.start and int(start) < region.end:
                out.append((max(int(start), region.start), min(int(end), region.end), state_of[name]))
    return out


def plot_track(path, counts, samples, region: Region, bed_path, methylation, labels) -> None:
    import matplotlib.pyplot as plt

    ds = counts.dataset(region.chrom).sel(sample=samples, position=slice(region.start, region.end - 1))
    meth = ds.methylated.values.astype(float)
    cov = ds.coverage.values.astype(float)
    pos = ds.position.values + counts.bin_size / 2
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 2.2 + 0.25 * len(samples)), sharex=True,
                                      gridspec_kw={"height_ratios": [4, 1]})
    for s, name in enumerate(samples):
        covered = cov[:, s] > 0
        size = 4 + 12 * np.sqrt(cov[covered, s] / max(cov[:, s].max(), 1))
        top.scatter(pos[covered], meth[covered, s] / cov[covered, s], s=size, alpha=0.6, label=name)
    top.set_ylim(-0.03, 1.03)
    top.set_ylabel("methylation\nfraction")
    top.legend(fontsize=7, loc="upper right", ncol=len(samples))
    colours = state_colours(methylation)
    for start, end, state in region_segments(bed_path, region, labels):
        bottom.broken_barh([(start, end - start)], (0, 1), color=colours[state])
        if end - start > (region.end - region.start) / 40:
            bottom.text((start + end) / 2, 0.5, str(state), ha="center", va="center", fontsize=7)
    bottom.set_yticks([])
    bottom.set_ylabel("state")
    bottom.set_xlim(region.start, region.end)
    bottom.set_xlabel(f"{region.chrom} position (bp)")
    _save(fig, path)


def plot_bootstrap(path, methylation, methylation_ci, samples) -> None:
    import matplotlib.pyplot as plt

    order = state_order(methylation)
    ci = np.asarray(methylation_ci)
    levels = np.asarray(methylation)
    fig, ax = plt.subplots(figsize=(1.5 + 0.7 * len(order), 3.2))
    width = 0.8 / len(samples)
    for s, name in enumerate(samples):
        x = np.arange(len(order)) + (s - (len(samples) - 1) / 2) * width
        y = levels[order, s]
        err = np.abs(np.vstack([y - ci[order, s, 0], ci[order, s, 1] - y]))
        ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, label=name)
    ax.set_xticks(range(len(order)), order)
    ax.set_xlabel("state")
    ax.set_ylabel("methylation level (95% interval)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    _save(fig, path)


def plot_history(path, history) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.plot(range(len(history)), history, "o-")
    ax.set_xlabel("EM iteration")
    ax.set_ylabel("log-likelihood")
    _save(fig, path)


# -- page ---------------------------------------------------------------------------------------
def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def render_page(counts, document, model_path, hmm, decoded, figures, region, max_gap, differential, timings) -> str:
    e = html.escape
    samples = document.samples
    weight = hmm.startprob_  # the model's weights, as in its JSON and fit's table
    occupancy = decoded.state_bins / max(decoded.n_bins, 1)
    head = "".join(f"<th>{e(s)}</th>" for s in samples)
    rows = []
    colours, labels = rgb_colours(hmm.methylation_), model_labels(document)
    for h in state_order(hmm.methylation_):
        label = labels[h]
        cells = "".join(f"<td>{v:.3f}</td>" for v in hmm.methylation_[h])
        swatch = f'<span style="color:rgb{tuple(colours[h])}">&#9632;</span>'
        rows.append(f"<tr><td>{h}{' *' if h in differential else ''}</td><td>{swatch} {e(label)}</td>{cells}"
                    f"<td>{weight[h]:.3f}</td><td>{hmm.transmat_[h, h]:.3f}</td><td>{occupancy[h]:.1%}</td></tr>")
    inputs = []
    for name in samples:
        prov = counts.attrs["samples"].get(name, {})
        files = "<br>".join(f"{e(str(f.get('path', '')))} <small>sha256 {e(str(f.get('sha256', ''))[:16])}…</small>"
                            for f in prov.get("files", []))
        inputs.append(f"<tr><td>{e(name)}</td><td>{e(str(prov.get('format', '')))}</td>"
                      f"<td>{e(str(prov.get('context', '')))}</td><td>{files}</td></tr>")
    versions = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in _versions().items())
    settings = {
        "store": str(counts.path), "bin size": f"{counts.bin_size} bp", "model": str(model_path),
        "method": document["method"], "states": document["n_states"], "feature": str(document["feature"]),
        "triples": f"{document['n_triples']:,}", "model created by": document["created_by"],
        "log-likelihood": f"{document['loglik']:.6g}" if "loglik" in document else "not recorded (FTD)",
        "decoding": "posterior (most probable state per bin)", "max gap": f"{max_gap} bp",
        "track region": str(region), "segments": f"{decoded.n_segments:,}",
        "covered bins": f"{decoded.n_bins:,}",
    }
    setting_rows = "".join(f"<tr><td>{e(k)}</td><td>{e(str(v))}</td></tr>" for k, v in settings.items())
    timing_rows = "".join(f"<tr><td>{e(k)}</td><td>{v:.2f} s</td></tr>" for k, v in timings.items())
    figure_html = "\n".join(f'<figure><img src="{name}" alt="{e(name)}"><figcaption>{e(caption)}</figcaption></figure>'
                            for name, caption, _ in figures)
    diff_text = ", ".join(map(str, differential)) if differential else "none"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>streambhmm report: {e(str(counts.path.name))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; font-size: 0.9em; }}
td:first-child, th:first-child {{ text-align: left; }}
figure {{ margin: 1em 0 2em; }} figure img {{ max-width: 100%; }}
figcaption {{ font-size: 0.9em; color: #555; }}
</style></head><body>
<h1>streambhmm report</h1>
<p>{e(str(counts.path))}: {len(samples)} sample(s), {len(counts.chromosomes)} chromosome(s), {decoded.n_bins:,}
covered bins in {decoded.n_segments:,} segments (<a href="segments.bed">segments.bed</a>).
Differential states: {e(diff_text)}.</p>
<h2>States</h2>
<table><tr><th>state</th><th>label</th>{head}<th>weight</th><th>stay</th><th>decoded bins</th></tr>
{''.join(rows)}</table>
<h2>Figures</h2>
{figure_html}
<h2>Provenance</h2>
<h3>Inputs</h3>
<table><tr><th>sample</th><th>format</th><th>context</th><th>files</th></tr>{''.join(inputs)}</table>
<h3>Settings</h3><table>{setting_rows}</table>
<h3>Versions</h3><table>{versions}</table>
<h3>Timings</h3><table>{timing_rows}</table>
</body></html>
"""
