"""The report's directory: checked before any work, written into a locked staging directory
renamed into place when complete, a previous report replaced, and what killed runs left
removed; only ever the files a report writes (listed in its marker) are deleted."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from ..io.outputs import check_output_dir, directory_lock_now, is_plain, is_temporary_of, temporary_path
from ..io.rows import first_few
from ..io.storage import Location, put_in_place

REPORT_MARKER = "streambhmm-report.json"  # in every report directory: the files the report wrote
REPORT_FORMAT = "streambhmm-report"
FIGURES = ("methylation.png", "transmat.png", "spectrum.png", "occupancy.png", "track.png", "bootstrap.png",
           "loglik.png")
REPORT_FILES = ("index.html", "segments.bed", *FIGURES)  # every name a report may write besides its marker


def check_report_output(output, store, model, moments=None, region_files=()) -> Path:
    """``output`` as a report directory, refused before any work (naming it) when its parent
    cannot take it, when it is a symbolic link, when it holds or lies inside the counts
    store, the model or the moment store, or holds a --regions file (real paths compared), or
    when it exists and is neither empty nor a previous report holding only what that report
    wrote."""
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
    for path in region_files:
        if real in Path(os.path.realpath(path)).parents:
            raise ValueError(f"{output}: holds the --regions file {path}, and a report replaces its directory; "
                             f"copy the file elsewhere first, or choose another directory")
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
        document = json.loads(marker.read_text()) if is_plain(marker) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        document = None
    written = document.get("files") if isinstance(document, dict) and document.get("format") == REPORT_FORMAT \
        else None
    if not isinstance(written, list) or not all(isinstance(n, str) and n in REPORT_FILES for n in written):
        raise ValueError(f"{directory}: exists and is not a streambhmm report (no valid {REPORT_MARKER}); a report "
                         f"replaces its directory, so give a new directory, an empty one or a previous report's")
    foreign = sorted(name for name, entry in entries.items()
                     if name != REPORT_MARKER and (name not in written or not is_plain(entry)))
    if foreign:
        raise ValueError(f"{directory}: a previous report, but it also holds what the report did not write "
                         f"({first_few(foreign, 5)}); move that away or choose another directory")
    return written


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
            if is_plain(stage, stat.S_ISDIR):  # not yet put in place
                _remove_written(stage, REPORT_FILES)
            raise


def put_report_in_place(stage: Path, output: Path) -> None:
    """Rename the complete ``stage`` to ``output`` (io.storage.put_in_place); a previous
    report there (checked again) is set aside first, and then removed file by file."""
    written = previous_report_files(output) if output.exists() else None
    put_in_place(stage, output, replace=written is not None, aside=temporary_path(output, "old"),
                 remove_aside=lambda aside: _remove_written(Path(aside.url), written))


def remove_report_leftovers(output: Path) -> None:
    """Remove what killed runs of this report left beside ``output``: staging directories
    no live run holds, and previous reports set aside; each only of the files a report
    writes (a directory holding anything else is left as it is)."""
    for entry in output.parent.iterdir():
        if is_temporary_of(output, entry) and is_plain(entry, stat.S_ISDIR):
            with contextlib.suppress(BlockingIOError, FileNotFoundError):  # live, or removed meanwhile
                with directory_lock_now(entry):
                    _remove_written(entry, REPORT_FILES)
        elif is_temporary_of(output, entry, "old") and is_plain(entry, stat.S_ISDIR):
            with contextlib.suppress(ValueError, FileNotFoundError):  # not only a report's files, or removed
                _remove_written(entry, previous_report_files(entry))


def _remove_written(directory: Path, names) -> None:
    """Remove from ``directory`` the files ``names``, their temporaries and the marker (links
    themselves, never what they point to), then the directory if nothing else is left."""
    names = {*names, REPORT_MARKER}
    for entry in directory.iterdir():
        ours = entry.name in names or any(is_temporary_of(name, entry) for name in names)
        if ours and not is_plain(entry, stat.S_ISDIR):
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()  # not empty: something the report did not write is kept


def write_marker(stage: Path, names: list[str]) -> None:
    """The marker listing the files the report wrote (``names``, besides itself)."""
    (stage / REPORT_MARKER).write_text(json.dumps({"format": REPORT_FORMAT, "files": names}) + "\n")
