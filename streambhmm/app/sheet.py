"""The sample sheet of `dmr`: which samples form which groups (the columns ``sample`` and
``group`` of a tab-, blank- or comma-separated file with a header, or another column named for the
groups, as DSS's design tables have ``case`` or ``cell``; in any case, ``Sample``; other columns
are ignored), read and checked before any work."""

from __future__ import annotations

import contextlib
import csv
from dataclasses import dataclass

from ..io.blocks import text_lines
from ..io.inputs import readable_twice
from ..io.names import sample_name_problem
from ..io.rows import sheet_fields
from ..learn.groups import SampleGroups

SHEET_COLUMNS = ("sample", "group")


@dataclass(frozen=True)
class SampleSheet:
    """The samples of a sheet, their groups and the lines they are on."""

    path: str
    samples: tuple
    groups: tuple
    lines: tuple

    def same_files(self, records: dict) -> list[tuple[str, str]]:
        """Pairs of the sheet's samples ingested from the same files (by their SHA-256, as the
        store's provenance ``records`` give them): identical reads, no replicates of each other."""
        seen, pairs = {}, []
        for sample in self.samples:
            files = (records.get(sample) or {}).get("files") or []
            key = tuple(sorted(str(f.get("sha256")) for f in files if isinstance(f, dict)))
            if key and key in seen:
                pairs.append((seen[key], sample))
            seen.setdefault(key, sample)
        return pairs

    def check_samples(self, known: list, store) -> None:
        """Refuse a sample the store does not have, naming the sheet's line."""
        for sample, line in zip(self.samples, self.lines):
            if sample not in known:
                raise ValueError(f"{self.path}, line {line}: sample {sample[:100]!r} is not in the store {store} "
                                 f"(its samples: {', '.join(known)[:200]})")

    def contrast(self, names: list | None) -> "SampleSheet":
        """The sheet's samples of the groups ``names`` (None: every group), in their order."""
        if names is None:
            return self
        present = list(dict.fromkeys(self.groups))
        for name in names:
            if name not in present:
                raise ValueError(f"--contrast: group {name[:100]!r} has no sample in {self.path} (its groups: "
                                 f"{', '.join(present)[:200]})")
        if len(set(names)) != len(names):
            raise ValueError(f"--contrast names a group twice: {','.join(names)[:200]}")
        if len(names) < 2:
            raise ValueError(f"--contrast names one group, {names[0][:100]!r}: a contrast needs two or more, "
                             f"e.g. --contrast A,B")
        keep = [k for name in names for k, g in enumerate(self.groups) if g == name]
        return SampleSheet(self.path, *(tuple(getattr(self, f)[k] for k in keep) for f in ("samples", "groups",
                                                                                            "lines")))

    @property
    def sample_groups(self) -> SampleGroups:
        return SampleGroups.of(self.groups)


def _fields(line: str) -> list:
    """The line's fields (io.rows.sheet_fields), each without the quotes around it that R's
    write.table puts by default (a design table saved from R was refused: no column
    "sample")."""
    return [f[1:-1] if len(f) >= 2 and f[0] == f[-1] and f[0] in "\"'" else f for f in sheet_fields(line)]


MAX_SHEET_BYTES = 16 << 20  # a sheet of 500,000 samples is about 10 MiB (read, it takes 50 times that)


def _too_large(what: str) -> str:
    return (f"{what}: more than {MAX_SHEET_BYTES >> 20} MiB, too large for a sample sheet (a line per sample "
            f"naming its group): is it the sheet?")


def read_sheet(path, group_column: str = SHEET_COLUMNS[1]) -> SampleSheet:
    """Read a sample sheet (see the module docstring; the groups from ``group_column``),
    refusing, with the file and line, a missing or repeated header column, a row of the wrong width, an
    empty or repeated sample, an empty group, and a sheet of fewer than two groups."""
    path = str(path)
    columns = (SHEET_COLUMNS[0], group_column)
    try:  # as ingest reads text: a byte-order mark dropped, CRLF ends, bytes that are not UTF-8 shown escaped
        with readable_twice(path, MAX_SHEET_BYTES, _too_large) as readable, \
                contextlib.closing(text_lines(readable)) as read:
            lines, size = [], 0
            for number, line, _ in read:
                size += len(line) + 1
                if size > MAX_SHEET_BYTES:  # a file that grew after its size was checked
                    raise ValueError(_too_large(path))
                if line.strip() and not line.lstrip().startswith("#"):
                    lines.append((number, line))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the sample sheet ({exc.__class__.__name__}: {exc})") from None
    # comma-separated (R's write.csv, a spreadsheet's CSV) when no line has a tab and the header a comma
    # (a blank-separated header whose sample column stands alone is not: "sample group note,x")
    comma_separated = (bool(lines) and "," in lines[0][1] and not any("\t" in line for _, line in lines)
                       and SHEET_COLUMNS[0] not in (f.casefold() for f in _fields(lines[0][1])))
    rows = [(number, line, next(csv.reader([line], skipinitialspace=True)) if comma_separated else _fields(line))
            for number, line in lines]
    if not rows:
        raise ValueError(f"{path}: the sample sheet is empty; it needs a header with the columns "
                         f"{' and '.join(columns)} and a line per sample")
    number, header, names = rows[0]
    if rows[1:] and all(len(fields) == len(names) + 1 for _, _, fields in rows[1:]):
        # R's write.table writes row names first (row.names = TRUE, its default) and no header
        # for them: read as read.table reads them back
        rows = [rows[0]] + [(n, line, fields[1:]) for n, line, fields in rows[1:]]
    # a header of "Sample Group" means the columns sample and group (a helper's sheet was refused,
    # and --group-column Group then refused it for want of "sample"), unless a name is exactly
    # the column's; two names in other cases are two columns of that name, refused below
    names = [next((c for c in columns if c not in names and n.casefold() == c.casefold()), n) for n in names]
    missing = [c for c in columns if c not in names]
    if missing:
        # (a sheet is comma-separated only when no line has a tab)
        commas = (" Its header is comma-separated and other lines hold tabs: separate its columns one way."
                  if "," in header and len(names) == 1 else "")
        other = [n for n in names if n not in (columns[0], "")]  # "": R's row names
        choose = (f" Name the column of the groups with --group-column (this header's others: "
                  f"{', '.join(other)[:200]})." if group_column in missing and other and not commas else "")
        raise ValueError(f"{path}, line {number}: the header has no column {' or '.join(missing)} (a sample sheet "
                         f"has a header naming the columns {' and '.join(columns)}): {header[:200]!r}.{commas}{choose}")
    twice = [c for c in columns if names.count(c) > 1]
    if twice:  # names.index would take the first of them, whichever the user meant
        raise ValueError(f"{path}, line {number}: the header names the column {twice[0]!r} {names.count(twice[0])} "
                         f"times; which to read is unclear. Rename the others: {header[:200]!r}")
    at = [names.index(c) for c in columns]
    samples, groups, lines, seen = [], [], [], {}
    for number, line, fields in rows[1:]:
        if len(fields) != len(names):
            raise ValueError(f"{path}, line {number}: {len(fields)} field(s) where the header has {len(names)}: "
                             f"{line[:200]!r}")
        sample, group = (fields[k] for k in at)
        if sample.upper() in ("", "NA"):
            raise ValueError(f"{path}, line {number}: no sample named for group {group[:100]!r}: {line[:200]!r}")
        if group.upper() in ("", "NA"):
            raise ValueError(f"{path}, line {number}: sample {sample[:100]!r} has no group: {line[:200]!r}")
        problem = sample_name_problem(group, "group")  # a NUL or an escape made a group of its own (an audit)
        if problem:
            raise ValueError(f"{path}, line {number}: invalid {problem}: "
                             f"{group[:100]!r}; use letters, digits and . _ - + (e.g. case)")
        if sample in seen:
            raise ValueError(f"{path}, line {number}: sample {sample[:100]!r} is listed again (first on line "
                             f"{seen[sample]})")
        seen[sample] = number
        samples.append(sample)
        groups.append(group)
        lines.append(number)
    if len(set(groups)) < 2:
        found = f"one group, {groups[0][:100]!r}" if groups else "no sample"
        raise ValueError(f"{path}: the sheet has {found}; DMRs are found between two groups or more")
    first = {}
    for group, number in zip(groups, lines):
        other = first.setdefault(group.casefold(), (group, number))
        if other[0] != group:
            raise ValueError(f"{path}, line {number}: group {group[:100]!r} differs from {other[0][:100]!r} (line "
                             f"{other[1]}) only in case: a typo would make a group of its own. Name them alike, or "
                             f"otherwise apart")
    return SampleSheet(path, tuple(samples), tuple(groups), tuple(lines))
