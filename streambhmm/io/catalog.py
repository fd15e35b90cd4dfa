"""Methylation call formats: each format's columns and coordinate convention (FORMATS), and
the content each fits, for detection."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .rows import Layout

CONTEXTS = ("CG", "CHG", "CHH", "all")
DETECT_LINES = 100
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
INT = re.compile(r"-?\d+")
CONTEXT_NAMES = ("CG", "CHG", "CHH")


@dataclass(frozen=True)
class Format:
    """A named format: its layouts (one per number of fields), its header line of column
    names if it has one, what its rows are per strand, and how detection recognizes a
    data line (``fits``)."""

    name: str
    columns: str  # for messages and the README: the columns and the convention
    layouts: tuple[Layout, ...]
    strands: str  # "stranded": a strand column; "merged": one row per CpG; "unknown": per-C rows, strand not given
    headers: tuple[tuple[str, ...], ...] = ()  # accepted header lines (lowercased names); required when set
    fits: Callable[[list[str]], bool] | None = None  # a data line of this format (formats without a header)

    @property
    def has_context(self) -> bool:
        return any(layout.context is not None for layout in self.layouts)

    def layout(self, n_fields: int) -> Layout | None:
        return next((la for la in self.layouts if la.n_fields == n_fields), None)


def _ints(fields, *indexes) -> bool:
    return all(INT.fullmatch(fields[i]) for i in indexes)


def _nums(fields, *indexes) -> bool:
    return all(NUMBER.fullmatch(fields[i]) for i in indexes)


def _bed_span(fields, allowed) -> bool:
    return _ints(fields, 1, 2) and int(fields[2]) - int(fields[1]) in allowed


def _fits_cov(f):
    return len(f) == 6 and _bed_span(f, (0, 1)) and _nums(f, 3) and _ints(f, 4, 5)


def _fits_dackel(f):
    return len(f) == 6 and _bed_span(f, (1, 2)) and _nums(f, 3) and _ints(f, 4, 5)


def _fits_report(f):
    return len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 3, 4) and f[5].upper() in CONTEXT_NAMES and f[6].isalpha()


def _fits_allc(f):
    return (len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 4, 5, 6)
            and re.fullmatch("C[ACGTN]{2}", f[3].upper()) is not None)


def _fits_methylpipe(f):
    return len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 4, 5, 6) and f[3].upper() in CONTEXT_NAMES


def _fits_bedmethyl(f):
    return len(f) in (11, 14) and _ints(f, 1, 2, 9) and f[5] in ("+", "-", ".") and _nums(f, 10) and \
        (len(f) == 11 or _ints(f, 11, 12, 13))


def _fits_modkit(f):
    return len(f) == 18 and _ints(f, 1, 2, 9, 11, 12, 13, 14, 15, 16, 17) and _nums(f, 10)


def _fits_cgmap(f):
    return (len(f) == 8 and f[1].upper() in ("C", "G") and _ints(f, 2, 6, 7) and f[3].upper() in CONTEXT_NAMES
            and _nums(f, 5))


# biscuit mergecg's sixth column: each strand's base, beta and coverage (C:0.670:3,G:1.000:7)
MERGECG_STRANDS = re.compile(r"[CG]:[-+.0-9eE]+:\d+(,[CG]:[-+.0-9eE]+:\d+)*")


def _fits_biscuit(f):
    return (len(f) == 5 or len(f) == 6 and MERGECG_STRANDS.fullmatch(f[5]) is not None) and _bed_span(f, (1, 2)) \
        and _nums(f, 3) and 0 <= float(f[3]) <= 1 and _ints(f, 4)


def _fits_methylseekr(f):  # chr pos T M: the total comes first, so T >= M
    return len(f) == 4 and _ints(f, 1, 2, 3) and int(f[2]) >= int(f[3])


def _fits_methrix(f):
    return len(f) == 4 and _ints(f, 1, 2, 3)


ONE = (("+", 1), ("-", -1))
# an allc header line: only older methylpy wrote one, and the one such file checked against its
# genome is 0-based, while headerless allc files are 1-based: detection names both
METHYLPY = ("chrom", "pos", "strand", "mc_class", "methylated_bases", "total_bases", "methylation_call")
BSMAP = ("chr", "pos", "strand", "context", "ratio", "eff_ct_count", "c_count", "ct_count", "rev_g_count",
         "rev_ga_count")
FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("bismark-cov", "chrom start end pct meth unmeth; 1-based start, end = start (or start + 1 for a CpG "
                          "merged by coverage2cytosine --merge_CpG)",
           (Layout(6, 0, 1, 1, meth=4, unmeth=5, end=2, end_offsets=(0, 1), percent=3),), "unknown", fits=_fits_cov),
    Format("bismark-report", "chrom pos strand meth unmeth context trinucleotide; 1-based",
           (Layout(7, 0, 1, 1, meth=3, unmeth=4, strand=2, strand_codes=ONE, context=5, context_kind="name"),),
           "stranded", fits=_fits_report),
    Format("allc", "chrom pos strand context(C + 2 bases) mc cov flag; 1-based",
           (Layout(7, 0, 1, 1, meth=4, total=5, strand=2, strand_codes=ONE, context=3, context_kind="tri"),),
           "stranded", headers=(METHYLPY,), fits=_fits_allc),
    Format("allc-0based", "allc with 0-based positions, as in older methylpy files with a header line",
           (Layout(7, 0, 1, 0, meth=4, total=5, strand=2, strand_codes=ONE, context=3, context_kind="tri"),),
           "stranded", headers=(METHYLPY,)),
    Format("methylpipe", "chrom pos strand context(CG/CHG/CHH) meth unmeth score; 1-based",
           (Layout(7, 0, 1, 1, meth=4, unmeth=5, strand=2, strand_codes=ONE, context=3, context_kind="name"),),
           "stranded", fits=_fits_methylpipe),
    Format("cgmap", "BS-Seeker2 CGmap: chrom C/G pos context dinucleotide level meth total; 1-based; G = minus "
                    "strand",
           (Layout(8, 0, 2, 1, meth=6, total=7, strand=1, strand_codes=(("C", 1), ("G", -1)), context=3,
                   context_kind="name"),), "stranded", fits=_fits_cgmap),
    Format("bsmap", "BSMAP methratio, with its header: chr pos strand context(5 bases) ratio eff_CT_count "
                    "C_count CT_count ...; 1-based",
           tuple(Layout(n, 0, 1, 1, meth=6, total=7, strand=2, strand_codes=ONE, context=3, context_kind="bsmap")
                 for n in (10, 12)), "stranded", headers=(BSMAP, BSMAP + ("ci_lower", "ci_upper"))),
    Format("bedmethyl", "ENCODE bedMethyl, 11 columns (coverage, percent), or modbam2bed's 14 (+ n_canonical "
                        "n_modified n_filtered); 0-based start",
           (Layout(11, 0, 1, 0, total=9, fraction=10, scale=100, strand=5, end=2),
            Layout(14, 0, 1, 0, meth=12, unmeth=11, strand=5, end=2)), "stranded", fits=_fits_bedmethyl),
    Format("modkit", "modkit bedMethyl, 18 columns; 0-based start; rows with code m or C",
           (Layout(18, 0, 1, 0, meth=11, other_meth=13, total=9, strand=5, end=2, code=3),), "stranded",
           fits=_fits_modkit),
    Format("methyldackel", "MethylDackel bedGraph: chrom start end pct meth unmeth; 0-based start, end = "
                           "start + 1 (or + 2 for merged CpGs)",
           (Layout(6, 0, 1, 0, meth=4, unmeth=5, end=2, end_offsets=(1, 2), percent=3),), "unknown",
           fits=_fits_dackel),
    Format("biscuit", "BISCUIT BED: chrom start end beta coverage; 0-based start (and mergecg's sixth column, "
                      "its strands, which the merged beta and coverage sum)",
           (Layout(5, 0, 1, 0, total=4, fraction=3, end=2, end_offsets=(1, 2)),
            Layout(6, 0, 1, 0, total=4, fraction=3, end=2, end_offsets=(2,))), "unknown", fits=_fits_biscuit),
    Format("tsv", "header chrom pos strand mc cov; 1-based",
           (Layout(5, 0, 1, 1, meth=3, total=4, strand=2),), "stranded",
           headers=(("chrom", "pos", "strand", "mc", "cov"),)),
    Format("dss", "DSS: header chr pos N X (N total, X methylated); 1-based",
           (Layout(4, 0, 1, 1, total=2, meth=3),), "unknown", headers=(("chr", "pos", "n", "x"),)),
    Format("methylkit", "methylKit text: header chrBase chr base strand coverage freqC freqT; 1-based; F/R strand",
           (Layout(7, 1, 2, 1, total=4, fraction=5, scale=100, strand=3, strand_codes=(("F", 1), ("R", -1))),),
           "stranded", headers=(("chrbase", "chr", "base", "strand", "coverage", "freqc", "freqt"),)),
    Format("methylseekr", "MethylSeekR: chrom pos T M, no header (T total, first); 1-based CpG positions",
           (Layout(4, 0, 1, 1, total=2, meth=3),), "merged", fits=_fits_methylseekr),
    Format("methrix", "methrix: chrom pos M U, no header; 1-based",
           (Layout(4, 0, 1, 1, meth=2, unmeth=3),), "unknown", fits=_fits_methrix),
    Format("columns", "described by --columns (1-based column numbers), --zero-based and --header", (), "unknown"),
]}
