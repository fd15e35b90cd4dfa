"""The options of reading a call file (ReadOptions): contexts, coverage, strands, chromosome
names and, for ``--format columns``, the columns' roles."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .blocks import text_lines
from .inputs import check_input
from .names import CONVENTIONS, NAMING, new_chromosome_name_problem
from .rows import STRANDS, FormatError, Layout, quoted


@dataclass(frozen=True)
class ReadOptions:
    """Reading options beyond the format and context; recorded in the store's provenance."""

    merge_strands: bool = False
    min_coverage: int = 1
    chromosomes: tuple[str, ...] | None = None  # glob patterns to keep (None: all)
    exclude_chromosomes: tuple[str, ...] = ()  # glob patterns to drop
    columns: tuple[tuple[str, int], ...] | None = None  # --columns: role -> 1-based field number
    zero_based: bool = False
    header: bool = False
    chromosome_names: str | None = None  # --chromosome-names: ucsc, ensembl or a mapping file (made absolute)
    chromosome_map: tuple[tuple[str, str], ...] | None = None  # the mapping file's pairs, read once

    def __post_init__(self):
        if self.min_coverage < 0:
            raise ValueError(f"--min-coverage must be >= 0, got {self.min_coverage}")
        if self.columns is None and (self.zero_based or self.header):
            raise ValueError("--zero-based and --header describe a --columns file; named formats have their own "
                             "conventions")
        if self.chromosome_names not in (None, *NAMING) and self.chromosome_map is None:
            path = Path(self.chromosome_names)
            object.__setattr__(self, "chromosome_names", str(path.resolve()))
            object.__setattr__(self, "chromosome_map", read_chromosome_map(path))

    def as_dict(self) -> dict:
        out = asdict(self)
        for key in ("chromosomes", "exclude_chromosomes"):
            out[key] = None if out[key] is None else list(out[key])
        out["columns"] = None if self.columns is None else dict(self.columns)
        if self.chromosome_names is None:  # as recorded before the option existed: a re-ingest is unchanged
            del out["chromosome_names"], out["chromosome_map"]
        elif self.chromosome_map is not None:  # the mapping's digest, not its (long) list
            out["chromosome_map"] = hashlib.sha256(json.dumps(self.chromosome_map).encode()).hexdigest()
        return out

    def renaming(self) -> Callable[[str], str] | None:
        """A chromosome's name in the files -> in the store, or None: names are kept."""
        if self.chromosome_map is not None:
            mapping = dict(self.chromosome_map)
            return lambda name: mapping.get(name, name)
        return None if self.chromosome_names is None else CONVENTIONS[self.chromosome_names]

    @staticmethod
    def parse_patterns(text: str | None) -> tuple[str, ...] | None:
        """'chr1,chr2,chrUn*' -> patterns; None or '' -> None."""
        return tuple(p.strip() for p in text.split(",") if p.strip()) if text else None

    @staticmethod
    def parse_columns(text: str) -> tuple[tuple[str, int], ...]:
        """'chrom=1,pos=2,meth=4,total=3' (or unmeth= for total=; strand= and context= optional)."""
        roles = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = item.partition("=")
            if key not in COLUMN_ROLES or not value.isdigit() or int(value) < 1:
                raise ValueError(f"--columns: {item!r} is not ROLE=N with ROLE one of {', '.join(COLUMN_ROLES)} "
                                 f"and N a column number from 1")
            if key in roles:
                raise ValueError(f"--columns: {key} given twice")
            roles[key] = int(value)
        missing = [k for k in ("chrom", "pos", "meth") if k not in roles]
        if missing or ("total" in roles) == ("unmeth" in roles):
            raise ValueError(f"--columns needs chrom, pos, meth and one of total or unmeth; got {text!r}")
        if len(set(roles.values())) < len(roles):
            raise ValueError(f"--columns: two roles share a column in {text!r}")
        return tuple(roles.items())


COLUMN_ROLES = ("chrom", "pos", "meth", "total", "unmeth", "strand", "context")


def read_chromosome_map(path) -> tuple[tuple[str, str], ...]:
    """The pairs (name in the input files, name in the store) of a --chromosome-names FILE:
    two columns separated by blanks; '#' lines and blank lines are skipped."""
    try:
        check_input(path)
    except FileNotFoundError:
        raise ValueError(f"--chromosome-names {path}: no such file (give ucsc, ensembl or a file of two "
                         f"columns: a name in the input files and its name in the store)") from None
    pairs: dict[str, tuple[str, int, str]] = {}  # name -> (new name, line, text)
    with contextlib.closing(text_lines(path)) as read:
        for number, text, fields in read:
            if not fields or text.startswith("#"):
                continue
            if len(fields) != 2:
                raise FormatError(path, number, text, f"expected 2 columns (a chromosome's name in the input files "
                                                      f"and its name in the store), found {len(fields)}")
            old, new = fields
            problem = new_chromosome_name_problem(new)
            if problem:
                raise FormatError(path, number, text, f"invalid {problem}")
            if old in pairs and pairs[old][0] != new:
                raise FormatError(path, number, text, f"{old} is renamed {pairs[old][0]} at line {pairs[old][1]} "
                                                      f"({quoted(pairs[old][2])})")
            pairs.setdefault(old, (new, number, text))
    if not pairs:
        raise FormatError(path, None, None, "no names to map (expected lines of two columns: a chromosome's name "
                                            "in the input files and its name in the store)")
    return tuple((old, new) for old, (new, _, _) in pairs.items())


def columns_layout(options: ReadOptions, n_fields: int) -> Layout:
    roles = {k: v - 1 for k, v in options.columns}
    if max(roles.values()) >= n_fields:
        raise ValueError(f"--columns names column {max(roles.values()) + 1}, but the first data line has "
                         f"{n_fields} fields")
    return Layout(n_fields, roles["chrom"], roles["pos"], 0 if options.zero_based else 1, meth=roles["meth"],
                  total=roles.get("total"), unmeth=roles.get("unmeth"), strand=roles.get("strand"),
                  strand_codes=STRANDS + (("F", 1), ("R", -1)), context=roles.get("context"),
                  context_kind="name-or-tri")
