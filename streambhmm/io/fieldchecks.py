"""The checks of one block's fields, row by row (blockcheck.BlockChecks runs them): positions,
counts, strands, the context and modification code of the rows kept, strands merged. Each
check first asks a cheap question of the whole block (a min, a max, an any) and builds its
row mask only when that fails; the earliest row failed is reported."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from .limits import COUNT_MAX, POSITION_MAX
from .parser import CONTEXT_INDEX, chars, code_table, contexts, numbers, upper_chars
from .rows import Layout, Settings

# percent points a percent column may differ from its counts' percent: writers round it (MethylDackel
# to whole percents), and a count cut short moves it further at all but the deepest coverage
PERCENT_TOLERANCE = 1.0

if TYPE_CHECKING:
    from .blockcheck import BlockRow


@dataclass(frozen=True)
class LeftOut:
    """Rows of a block left out, by reason (boolean masks; None: the reason cannot apply)."""

    without_reads: np.ndarray  # coverage 0 (some formats list every C)
    other_context: np.ndarray | None  # not the --context asked for
    other_code: np.ndarray | None  # a modification code other than m or C (modkit's h)
    below_min_coverage: np.ndarray | None  # reads, but fewer than --min-coverage


LEFT_OUT = tuple(f.name for f in fields(LeftOut))


class CheckFailure(Exception):
    """The row that fails a check; ``earlier``: the row it repeats, named after the message
    (a BlockRow, or the (chromosome, key) of a row of an earlier block, found by reading again)."""

    def __init__(self, row: int, message: str, earlier: BlockRow | tuple | None = None):
        self.row, self.message, self.earlier = row, message, earlier


class Checks:
    """The failures of a block's checks; the earliest row's is reported."""

    def __init__(self):
        self.failures: list[CheckFailure] = []

    def fail(self, row, message: str) -> None:
        self.failures.append(CheckFailure(int(row), message))

    def check(self, maybe: bool, mask, message) -> None:
        """``maybe``: a cheap question of the whole block, which may over-report (a decrease
        between chromosomes); only then is the row mask built and its first row failed."""
        if maybe:
            rows = mask()
            if rows.any():
                i = int(np.argmax(rows))
                self.failures.append(CheckFailure(i, message(i)))


class FieldChecks:
    """The checks of the fields of a format's rows (``layout``) read with ``settings``."""

    def __init__(self, layout: Layout, settings: Settings):
        self.layout, self.settings = layout, settings
        self.strand_table = code_table(layout.strand_codes)

    def positions(self, col, pos, checks: Checks) -> None:
        lay, check = self.layout, checks.check
        check(pos.min() < lay.base, lambda: pos < lay.base,
              lambda i: f"position {pos[i]} below {lay.base} ({lay.base}-based positions)")
        check(pos.max() > POSITION_MAX, lambda: pos > POSITION_MAX,
              lambda i: f"position {pos[i]} too large (a counts store takes positions up to {POSITION_MAX:,})")
        if lay.end is not None:
            span = numbers(col[lay.end]) - pos
            if lay.end_offsets is None:
                check(span.min() < 1, lambda: span < 1, lambda i: f"end {pos[i] + span[i]} not after start {pos[i]}")
            else:
                allowed = " or ".join(map(str, lay.end_offsets))
                outside = ~np.isin(span, lay.end_offsets)
                spec = lay.as_columns()
                hint = "" if spec is None else (f"; if each line is one cytosine at its start whatever its end "
                                                f"says, read the file with --columns {spec}")
                check(outside.any(), lambda: outside,
                      lambda i: f"end - start is {span[i]}, expected {allowed} (one cytosine or CpG per line){hint}")

    def strand(self, col, checks: Checks):
        """The rows' strands (+1, -1), or None for a format without them."""
        lay = self.layout
        if lay.strand is None:
            return None
        lengths, (codes,) = upper_chars(col[lay.strand], 1)  # a letter in either case (CGmap's soft-masked c, g)
        valid, value = self.strand_table
        bad = ~valid[codes] | (lengths != 1)
        texts = ", ".join(t for t, _ in lay.strand_codes)
        checks.check(bad.any(), lambda: bad,
                     lambda i: f"strand {col[lay.strand][i].as_py()!r} (expected one of {texts})")
        return value[codes]

    def kept(self, col, cov, strand, checks: Checks):
        """The rows kept, which are CpGs (None without a context column), and why the others
        were left out (LeftOut: each reason's rows, None where none can be)."""
        lay, settings = self.layout, self.settings
        keep = np.ones(cov.size, bool)
        is_cg = other_context = other_code = None
        if lay.context is not None:
            ctx, ok, looks = contexts(col[lay.context], lay.context_kind, strand)
            checks.check(not ok.all(), lambda: ~ok,
                         lambda i: f"context {col[lay.context][i].as_py()!r} (expected {looks})")
            is_cg = ctx == 0
            if settings.context != "all":
                other_context = ctx != CONTEXT_INDEX[settings.context]
                keep &= ~other_context
        if lay.code is not None:  # a modification code of one character, m or C
            lengths, (code,) = chars(col[lay.code], 1)
            other_code = keep & ~((lengths == 1) & ((code == ord("m")) | (code == ord("C"))))
            keep &= ~other_code
        low = keep & (cov > 0) & (cov < settings.min_coverage) if settings.min_coverage > 1 else None
        return keep & (cov >= max(settings.min_coverage, 1)), is_cg, LeftOut(keep & (cov == 0), other_context,
                                                                             other_code, low)

    def merged(self, pos0, strand, is_cg, checks: Checks):
        """--merge-strands: the minus-strand C of a CpG (at pos + 1) joins the plus-strand C at pos."""
        pos0 = pos0 - ((strand < 0) & (is_cg if is_cg is not None else True))
        checks.check(pos0.min() < 0, lambda: pos0 < 0,
                     lambda i: "with --merge-strands this minus-strand row moves before the chromosome start")
        return pos0

    def counts(self, col, check) -> tuple[np.ndarray, np.ndarray]:
        lay = self.layout
        get = {name: numbers(col[i]) for name, i in (("meth", lay.meth), ("total", lay.total),
               ("unmeth", lay.unmeth), ("other", lay.other_meth)) if i is not None}
        for values in get.values():
            check(values.min() < 0, lambda v=values: v < 0, lambda i, v=values: f"negative count {v[i]}")
            check(values.max() > COUNT_MAX, lambda v=values: v > COUNT_MAX,
                  lambda i, v=values: f"count {v[i]} too large (the store holds counts up to {COUNT_MAX:,})")
        if lay.fraction is not None:
            frac = numbers(col[lay.fraction])
            what = "percent" if lay.scale == 100 else "fraction"
            bad = ~np.isfinite(frac) | (frac < 0) | (frac > lay.scale)
            check(bad.any(), lambda: bad, lambda i: f"methylation {what} {frac[i]} outside 0 to {lay.scale:g}")
            cov = get["total"]
            meth = np.round(cov * np.where(bad, 0, frac) / lay.scale).astype(np.int64)
            return meth, cov
        meth = get["meth"] + get["other"] if "other" in get else get["meth"]
        cov = get["total"] if "total" in get else get["meth"] + get["unmeth"]
        check(cov.max() > COUNT_MAX, lambda: cov > COUNT_MAX,
              lambda i: f"coverage {cov[i]} too large (the store holds counts up to {COUNT_MAX:,})")
        over = meth > cov
        check(over.any(), lambda: over, lambda i: f"methylated count {meth[i]} exceeds coverage {cov[i]}")
        if lay.percent is not None:  # a line cut short can still parse: its percent then disagrees
            pct = numbers(col[lay.percent])
            expected = 100.0 * meth / np.maximum(cov, 1)
            off = (cov > 0) & ~(np.abs(pct - expected) <= PERCENT_TOLERANCE)
            check(off.any(), lambda: off,
                  lambda i: f"percent {pct[i]:g} disagrees with the counts, {meth[i]} methylated of {cov[i]} "
                            f"({expected[i]:.2f}%): a truncated or edited line?")
        return meth, cov
