"""`ingest`, `info`, `upgrade`: the counts store."""

from __future__ import annotations

import time

import click

from ...distributed.cluster import store_session
from ...io.progress import printed, stage
from ...io.formats import FORMATS
from .common import (NEW_STORE, POSITIVE, STORE, bin_size_option, context_option, quiet_option, read_options, shown,
                     user_errors)


def layout_options(chunk_help: str):
    """--bin-size, --context and --chunk-size (its help ``chunk_help``): how the counts a
    command ingests are laid out."""
    def decorate(fn):
        return bin_size_option(context_option(click.option("--chunk-size", default=None, type=POSITIVE,
                                                           help=chunk_help)(fn)))
    return decorate


def _rows(n: int) -> str:
    return f"{n:,} row{'' if n == 1 else 's'}"


def _left_out(tally, context: str, options) -> str:
    """'; left out: 5,285 rows without reads, ...' (ReadTally.said), or ''."""
    said = tally.said(context, options.min_coverage)
    return f"; left out: {said}" if said else ""


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--sample", required=True, help="Sample name; all FILES are its replicates.")
@click.option("--store", required=True, type=NEW_STORE, help="Counts store (Zarr directory or fsspec URL).")
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]))
@layout_options("Bins per Zarr chunk of a new store (default 1000000); fixed once the store exists.")
@read_options
@quiet_option
@user_errors
def ingest(files, sample, store, fmt, bin_size, context, chunk_size, quiet, options):
    """Add FILES (replicates of one sample) to a counts store."""
    from ...io.ingest import ingest as run_ingest

    start = time.perf_counter()
    with stage(f"ingest {sample}", quiet=quiet, unit="B", unit_scale=True) as shown:
        report = run_ingest(files, sample, store, fmt=fmt, bin_size=bin_size, context=context,
                            chunk_size=chunk_size, echo=printed(click.echo), progress=shown, options=options)
    if not report.unchanged:
        kind = "file(s) read by --columns" if report.format == "columns" else f"{report.format} file(s)"
        click.echo(f"sample {sample}: {_rows(report.n_rows)} from {len(files)} {kind} -> "
                   f"{report.n_bins:,} bins on {len(report.chromosomes)} chromosome(s) in {store} "
                   f"({time.perf_counter() - start:.1f} s){_left_out(report.left_out, context, options)}")


@click.command()
@click.argument("store", type=STORE)
@user_errors
def info(store):
    """Print a counts store's chromosomes, samples, bins and coverage (from its index: no
    counts are read), or what a moment store holds (from its manifest)."""
    from ...io.ingest import deep_chromosomes, methylated_only, unmethylated_rows
    from ...moments.manifest import is_moment_store  # not momentstore: no numba kernels for `info`

    if is_moment_store(store):
        _moment_store_info(store)
        return
    # the shared lock completes a commit a killed ingest left, and none lands meanwhile
    with store_session(store, dask=False) as opened:
        st = opened.store
        view = st.overview()
    click.echo(f"{shown(store)}: counts store v{st.meta.format_version}, bin size {st.bin_size} bp, "
               f"chunk size {st.chunk_size:,} bins, written by streambhmm {shown(st.meta.tool_version)}")
    for name in st.samples:
        prov = st.meta.samples[name]
        files = "no input files recorded"
        if "files" in prov:
            kind = "file(s) read by --columns" if prov["format"] == "columns" else f"{shown(prov['format'])} file(s)"
            files = f"{len(prov['files'])} {kind}, context {shown(prov['context'])}"
        counted = unmethylated_rows(st, name)
        rows = f", {counted[0]:,} rows ({counted[1]:,} without a methylated read)" if counted else ""
        click.echo(f"  sample {shown(name)}: {files}{rows}")
        why = methylated_only(st, [name])
        if why:
            click.echo(f"    hmr refuses it: {why}.")
    chromosomes = {shown(c): v for c, v in view.chromosomes.items()}
    width = max(10, *(len(c) for c in chromosomes)) if chromosomes else 10
    # each sample's column as wide as its header, two spaces apart (long names ran into the next)
    heads = [shown(s) + " covered" for s in view.samples]
    columns = [max(len(head), 14) for head in heads]
    click.echo(f"\n{'chromosome':<{width}} {'bins':>11}  " + "  ".join(f"{h:>{w}}" for h, w in zip(heads, columns)))
    for chrom, (n_bins, covered) in chromosomes.items():
        click.echo(f"{chrom:<{width}} {n_bins:>11,}  " + "  ".join(f"{int(c):>{w},}" for c, w in zip(covered, columns)))
    click.echo(f"{'total':<{width}} {view.n_bins:>11,}  "
               + "  ".join(f"{int(c):>{w},}" for c, w in zip(view.covered, columns)))
    click.echo("\ncoverage summary:")
    n_bins = view.n_bins
    deep = []
    for k, (name, covered, reads, meth) in enumerate(zip(view.samples, view.covered, view.coverage,
                                                          view.methylated)):
        click.echo(f"  {shown(name)}: {int(covered):,} of {n_bins:,} bins covered ({covered / max(n_bins, 1):.1%}), "
                   f"mean coverage {reads / max(covered, 1):.1f} per covered bin, "
                   f"pooled methylation {meth / max(reads, 1):.3f}")
        deep.append(deep_chromosomes(shown(name), {c: int(r[k]) for c, r in view.chromosome_reads.items()},
                                     {c: int(v[1][k]) for c, v in view.chromosomes.items()}))
    for said in filter(None, deep):  # the mean coverage above counts them (a deep chrM made it 4 times the rest's)
        click.echo(f"note: {said}")


@click.command()
@click.argument("store", type=STORE)
@quiet_option
@user_errors
def upgrade(store, quiet):
    """Convert a version-1 counts store to the current format, in place (every sample and its
    provenance are kept; the old store is replaced only once the new one is complete)."""
    from ...io.store import upgrade_store

    start = time.perf_counter()
    n = upgrade_store(store, echo=(lambda message: None) if quiet else click.echo)
    click.echo(f"{store}: {n} sample(s) converted to counts store format version 2 "
               f"({time.perf_counter() - start:.1f} s)")


def _stale(store, manifest) -> str | None:
    """What makes a complete moment store out of date with the counts store it was computed
    from, as that is now (None: up to date, or that store is not there to compare)."""
    from ...io.store import locked, open_store
    from ...moments.momentstore import stale_chunks, update_command

    path = manifest.counts_store
    if path is None:
        return None
    try:
        with locked(path, shared=True):  # an ingest's commit lands first
            counts = open_store(path)
            gone = [s for s in manifest.samples if s not in counts.samples]
            if gone:
                return f"{shown(path)} no longer holds {', '.join(shown(s) for s in gone)}"
            if manifest.source.get("bin_size") not in (None, counts.bin_size):
                return f"{shown(path)} now holds {counts.bin_size} bp bins"
            differ = stale_chunks(manifest, counts)
    except Exception:  # noqa: BLE001 - not a readable counts store now (or its lock): nothing to compare with
        return None
    return (f"{differ:,} of the chunks of {shown(path)} differ from its partials; "
            f"{update_command(manifest, counts, store)} updates it") if differ else None


def _moment_store_info(store) -> None:
    """A moment store's feature, samples, source and partials per chromosome."""
    from ...io.store import locked
    from ...moments.manifest import read_manifest

    with locked(store, shared=True):  # a `moments compute` updating it finishes first
        manifest = read_manifest(store)
    feature = manifest.feature
    state = "complete" if manifest.complete else "incomplete (`streambhmm moments compute` resumes it)"
    stale = _stale(store, manifest) if manifest.complete else None
    if stale:
        state = f"complete but stale: {stale}"
    click.echo(f"{shown(store)}: moment store v{manifest.format_version}, {state}, written by "
               f"{shown(manifest.created_by)}, updated {shown(manifest.updated)}")
    kind = (f"projected to {feature['dim']} dimensions (seed {feature['seed']})" if feature.get("kind") == "projected"
            else "concatenated")
    click.echo(f"  feature: Beta map of {feature['n_bins']} bins per sample, {kind}"
               f"{', samples pooled' if feature.get('pooled') else ''}; blocks of {feature['block_size']:,} bp")
    click.echo(f"  samples: {', '.join(shown(s) for s in manifest.samples)}")
    source = manifest.source
    bins = f" ({source['bin_size']} bp bins)" if source.get("bin_size") else ""
    if source.get("counts_store"):
        click.echo(f"  from the counts store {shown(source['counts_store'])}{bins}")
    elif source.get("merged_from"):
        click.echo(f"  merged from {', '.join(shown(m) for m in source['merged_from'])}{bins}")
    per_chromosome = {}
    for entry in manifest.partials:
        parts, triples = per_chromosome.get(entry["chromosome"], (0, 0))
        per_chromosome[entry["chromosome"]] = (parts + 1, triples + entry["n_triples"])
    names = [shown(c) for c in per_chromosome]
    width = max(10, *(len(c) for c in names)) if names else 10
    click.echo(f"\n{'chromosome':<{width}} {'partials':>9} {'triples':>13}")
    for name, (parts, triples) in zip(names, per_chromosome.values()):
        click.echo(f"{name:<{width}} {parts:>9,} {triples:>13,}")
    click.echo(f"{'total':<{width}} {len(manifest.partials):>9,} "
               f"{sum(t for _, t in per_chromosome.values()):>13,}")
