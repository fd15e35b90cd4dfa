"""What the commands share: errors, parameter types, options."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from ...distributed.cluster import IN_PROCESS_ENV, IN_PROCESS_MAX_CELLS, SCHEDULER_ENV, ClusterError
from ...io.formats import CONTEXTS, ReadOptions
from ...io.progress import printed
from ...io.rows import shown  # noqa: F401 (the commands print names with it)
from ...io.outputs import check_output_dir, check_output_file, check_output_prefix, check_parent_directory
from ...io.storage import Location
from ...io.limits import WAIT_ENV, WAIT_TIMEOUT
from ...moments.features import DEFAULT_N_BINS, DEFAULT_PROJECTION_DIM, FEATURES


# StoreError, MomentStoreError, FormatError and SpectrumError are ValueErrors; ClusterError:
# the scheduler lost or unreachable, a computation stalled, workers dying on a task, a sweep's
# worker process lost
USER_ERRORS = (ValueError, FileNotFoundError, ClusterError)
# --chrom-sizes: "-" is standard input (read once, as a pipe is: distributed.tracks.ChromSizes)
CHROM_SIZES_FILE = click.Path(exists=True, dir_okay=False, allow_dash=True)


def user_errors(fn):
    """Turn expected errors into a one-line message and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


def step_lines(quiet: bool):
    """Where a long command says which step it is on: standard error, above the progress line
    (the results go to standard output); nowhere with --quiet."""
    return (lambda message: None) if quiet else printed(functools.partial(click.echo, err=True))


class StoreParam(click.ParamType):
    """A store: a local directory or an fsspec URL (s3://..., memory://...)."""
    name = "store"

    def __init__(self, exists: bool):
        self.exists = exists

    def convert(self, value, param, ctx):
        location = Location.of(value)
        if location.is_local and Path(location.url).is_file():
            self.fail(f"{value}: is a file, not a store directory", param, ctx)
        blocker = location.file_in_the_way()  # a new store's directories are made: checked before any work
        if blocker is not None:
            self.fail(f"{value}: {blocker} is a file, not a directory", param, ctx)
        if self.exists and not location.exists() and not _awaits_commit(location):
            self.fail(f"{value}: does not exist", param, ctx)
        if not self.exists and location.is_local:
            try:  # a typo must not make a tree of directories (whether it can be written is the lock's to say)
                check_parent_directory(location.url)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            around = _store_around(location)
            if around is not None:  # its files would be taken for the counts store's, or it for a chromosome
                self.fail(f"{value}: is inside the counts store {around}; make the new one beside it", param, ctx)
        return location.url


def _awaits_commit(location: Location) -> bool:
    """Whether a store's first commit was stopped after its commit point (the command's lock
    completes it). io.store is imported here: the command line starts without zarr."""
    from ...io.store import needs_recovery

    return needs_recovery(location)


def _store_around(location: Location) -> str | None:
    from ...io.store.schema import store_around

    return store_around(location.url)


STORE, NEW_STORE = StoreParam(exists=True), StoreParam(exists=False)


class OutputParam(click.ParamType):
    """Where a command writes, checked when the options are read, before any work (io.outputs):
    a ``file``, a ``dir``ectory, a ``prefix`` of files, or a ``store`` (local: as a directory;
    URLs are not checked). Every command refuses a missing or unwritable directory, naming the
    user's path, rather than making it or failing after the work."""

    def __init__(self, kind: str):
        self.kind = kind
        self.name = {"file": "file", "dir": "directory", "prefix": "prefix", "store": "store"}[kind]

    def convert(self, value, param, ctx):
        try:
            if self.kind == "store":
                value = NEW_STORE.convert(value, param, ctx)
                return str(check_output_dir(value)) if Location.of(value).is_local else value
            check = {"file": check_output_file, "dir": check_output_dir, "prefix": check_output_prefix}[self.kind]
            return str(check(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


OUTPUT_FILE, OUTPUT_DIR, OUTPUT_PREFIX, OUTPUT_STORE = (OutputParam(k) for k in ("file", "dir", "prefix", "store"))


def _scheduler_option(default: str):
    return click.option(
        "--scheduler", default=None, metavar="ADDRESS",
        help=f"Dask scheduler to use (default: ${SCHEDULER_ENV}, else {default}). A computation that makes no "
             f"progress for ${WAIT_ENV} seconds ({WAIT_TIMEOUT:g}) stops the command.")


_EMBEDDED = "an embedded LocalCluster on 127.0.0.1 with TLS"
# scheduler_option: the commands that open a counts store (distributed.cluster.store_session decides where
# their work runs); cluster_scheduler_option: batch, which always runs on a cluster
scheduler_option = _scheduler_option(
    f"this process, a thread per core, where EM keeps the counts of a store of at most ${IN_PROCESS_ENV} covered "
    f"bins x samples ({IN_PROCESS_MAX_CELLS:,}, counted at the bin size the command works on); with "
    f"${IN_PROCESS_ENV}=0, {_EMBEDDED}")
cluster_scheduler_option = _scheduler_option(_EMBEDDED)


quiet_option = click.option("--quiet", "-q", is_flag=True,
                            help="No progress (by default a line on a terminal, else a line every few seconds, on "
                                 "standard error, and hmr, pmd and dmr name each step there); the results are "
                                 "printed either way.")


def names(text: str | None, option: str) -> list[str] | None:
    """The comma-separated names of ``option`` (spaces around each ignored); None when the
    option was not given, refused when given with no name."""
    if text is None:
        return None
    listed = [name.strip() for name in text.split(",") if name.strip()]
    if not listed:
        raise click.BadParameter(f"{text!r} names nothing; leave {option} out to take all", param_hint=option)
    return listed


POSITIVE = click.IntRange(min=1)  # every count option is checked before any work


NON_NEGATIVE = click.IntRange(min=0)


bins_option = click.option("--bins", "n_bins", default=DEFAULT_N_BINS, show_default=True, type=POSITIVE,
                           help="Beta-map granularity D.")


bin_size_option = click.option("--bin-size", default=100, show_default=True, type=POSITIVE, help="Bin width in bp.")


context_option = click.option("--context", default="CG", show_default=True, type=click.Choice(CONTEXTS),
                              help="Cytosine context kept, where the format carries one.")


def feature_options(fn):
    """--feature and --projection-dim: which feature the moments are summed of."""
    fn = click.option("--projection-dim", default=DEFAULT_PROJECTION_DIM, show_default=True, type=POSITIVE,
                      help="Dimension K of the projected feature.")(fn)
    return click.option("--feature", default="auto", show_default=True, type=click.Choice(FEATURES),
                        help="beta: the samples' Beta maps side by side (dimension samples x --bins); projected: "
                             "a seeded projection of them to --projection-dim dimensions, whatever the number "
                             "of samples; auto: projected above 64 dimensions (3 or more samples at --bins 30). "
                             "Pooled moments are one sample wide: beta.")(fn)


def read_options(fn):
    """The reading options of ingest and batch, gathered into ``options`` (a ReadOptions)."""
    @click.option("--merge-strands", is_flag=True,
                  help="Add each CpG's minus-strand C (at pos + 1) to its plus-strand C (formats with a strand).")
    @click.option("--min-coverage", default=1, show_default=True, type=NON_NEGATIVE, help="Drop cytosine rows with less coverage.")
    @click.option("--chromosomes", default=None, metavar="LIST", help="Keep only these chromosomes (comma-separated "
                                                                      "glob patterns, e.g. 'chr[0-9]*,chrX').")
    @click.option("--exclude-chromosomes", default=None, metavar="LIST",
                  help="Drop these chromosomes (comma-separated glob patterns, e.g. 'chrM,chrUn*,lambda').")
    @click.option("--columns", default=None, metavar="SPEC",
                  help="Describe any other format: chrom=N,pos=N,meth=N,total=N (or unmeth=N; strand=N and context=N "
                       "optional: CG/CHG/CHH or a C and two bases, for --context), 1-based column numbers. "
                       "Implies --format columns.")
    @click.option("--zero-based", is_flag=True, help="With --columns: positions are 0-based (default 1-based).")
    @click.option("--header", is_flag=True, help="With --columns: the first line is a header (default: skipped "
                                                 "when its fields after the first are not numbers).")
    @click.option("--chromosome-names", default=None, metavar="ucsc|ensembl|FILE",
                  help="Rename chromosomes as they are read: ucsc adds chr to numbered chromosomes, X and Y, and "
                       "makes MT chrM; ensembl removes it (chrM becomes MT); FILE has two columns, a name in the "
                       "files and its name in the store. Other names are kept. --chromosomes and "
                       "--exclude-chromosomes match the new names.")
    @functools.wraps(fn)
    def wrapper(*args, merge_strands, min_coverage, chromosomes, exclude_chromosomes, columns, zero_based, header,
                chromosome_names, **kwargs):
        try:
            kwargs["options"] = ReadOptions(
                merge_strands=merge_strands, min_coverage=min_coverage,
                chromosomes=ReadOptions.parse_patterns(chromosomes),
                exclude_chromosomes=ReadOptions.parse_patterns(exclude_chromosomes) or (),
                columns=ReadOptions.parse_columns(columns) if columns else None, zero_based=zero_based,
                header=header, chromosome_names=chromosome_names)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return fn(*args, **kwargs)
    return wrapper


POOLED_HELP = ("One set of states shared by the samples, each sample its own sequence (replicates, single "
               "cells); cost linear in the number of samples.")
