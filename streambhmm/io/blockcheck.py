"""The checks of a methylation call file's blocks, in file order (readers.BlockReader reads
them): typed columns to validated Rows. Here the chromosomes' order and names and the
repeated rows; the fields of each row are checked in fieldchecks.py.

Rows may come in any order within a chromosome (methylKit's files are not sorted by
position); a chromosome's rows must be contiguous. A row repeating the chromosome, position
and strand of an earlier one is refused: in a sorted chromosome neighbours are compared as
the rows are read; when a chromosome turns out unsorted, the file is read a second time
after the first pass, keeping one bit per position and strand of that chromosome (the
chromosome's length, never the file), and a third time only to name the earlier line of a
repeat found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fieldchecks import LEFT_OUT, CheckFailure, Checks, FieldChecks
from .names import new_chromosome_name_problem
from .parser import changes, numbers
from .rows import Layout, Rows, Settings, decoded


@dataclass(frozen=True)
class Block:
    """A block's text as read and as parsed, the number of its first line and the bytes of
    the file read up to its end."""

    data: bytes
    text: bytes  # normalized: the rows pyarrow read are its non-blank lines
    first: int
    offset: int = 0

    def index(self, row: int) -> int:
        """The index of row ``row``'s line in the block: pyarrow skips blank lines, the line
        numbers count them."""
        return [i for i, line in enumerate(self.text.split(b"\n")) if line.rstrip(b"\r")][row]

    def line(self, index: int) -> tuple[int, str]:
        """The number and text (as in the file, not normalized) of line ``index``."""
        return self.first + index, decoded(self.data.split(b"\n", index + 1)[index].rstrip(b"\r"))


@dataclass(frozen=True)
class BlockRow:
    """A row of a block: where an earlier row is, for a message that names its line."""

    block: Block
    row: int


EARLIER = "<earlier line>"  # where a CheckFailure's message names the row it repeats


class RowFound(Exception):
    """The row a search for a (chromosome, key) found (BlockReader.target)."""

    def __init__(self, row: BlockRow):
        self.row = row


class _Order:
    """Chromosomes contiguous, across blocks; the chromosomes whose positions go back; the
    kept rows at the last position, by strand (a repeat of one may start the next block)."""

    def __init__(self):
        self.finished: set[str] = set()
        self.chrom: str | None = None
        self.position = -1  # the last row's position as in the file
        self.last: dict[int, BlockRow] = {}  # strand -> a kept row at ``position`` of ``chrom``
        self.unsorted: set[str] = set()  # chromosomes (as in the file) whose positions go back


class _Seen:
    """The (position, strand) keys of one chromosome's kept rows read so far, one bit each."""

    def __init__(self):
        self.chrom: str | None = None
        self.bits = np.zeros(0, np.uint8)

    def first_repeat(self, chrom: str, keys: np.ndarray):
        """Of ``keys`` (a run of ``chrom``'s kept rows, in file order): (index of the first that
        repeats an earlier key, index of that earlier key in ``keys`` or None when it was in an
        earlier block), or None; the keys are recorded."""
        if chrom != self.chrom:
            self.chrom, self.bits = chrom, np.zeros(0, np.uint8)
        if keys.size == 0:
            return None
        need = int(keys.max() >> 3) + 1
        if need > self.bits.size:
            grown = np.zeros(max(need, 2 * self.bits.size), np.uint8)
            grown[:self.bits.size] = self.bits
            self.bits = grown
        byte, bit = keys >> 3, (keys & 7).astype(np.uint8)
        before = (self.bits[byte] >> bit) & 1
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        again = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1  # later rows of a key met in the run
        found = []
        if before.any():
            found.append((int(np.argmax(before)), None))
        if again.size:
            row = int(order[again].min())
            found.append((row, int(order[np.searchsorted(ordered, keys[row])])))
        np.bitwise_or.at(self.bits, byte, np.left_shift(np.uint8(1), bit))
        return min(found, key=lambda f: (f[0], f[1] is not None)) if found else None


@dataclass(frozen=True)
class _Runs:
    """A block's chromosome runs: their first rows and names, and whether the first run goes on
    from the previous block (whose last chromosome was ``previous``)."""

    starts: np.ndarray
    names: list
    n_rows: int
    previous: str | None

    @property
    def ends(self) -> np.ndarray:
        return np.r_[self.starts[1:], self.n_rows]

    @property
    def continues(self) -> bool:
        return self.names[0] == self.previous

    def backwards(self, values, last):
        """Rows whose value is below the previous row's within a chromosome run."""
        drop = np.r_[last if self.continues else -1, values[:-1]] > values
        drop[self.starts[1:]] = False
        return drop


class BlockChecks:
    """The checks of one file's blocks, read in order: each block's columns become Rows, or
    a CheckFailure names its earliest bad row. What they remember across blocks: the
    chromosomes' order, the keys of ``checked`` chromosomes (the second reading) and the
    names of the chromosomes kept."""

    def __init__(self, layout: Layout, settings: Settings):
        self.layout, self.settings = layout, settings
        self.order = _Order()
        self.checked: set[str] = set()  # chromosomes whose every key is checked (the second reading)
        self.seen = _Seen()
        self.target: tuple | None = None  # (chromosome, key): raise RowFound at its first kept row
        self.names: dict[str, str | None] = {}  # chromosome -> problem with its name (kept ones only)
        self.stored: dict[str, str] = {}  # chromosome as named in the store (--chromosome-names) -> in the file
        self.fields = FieldChecks(layout, settings)
        self.left_out = dict.fromkeys(LEFT_OUT, 0)  # rows of kept chromosomes left out, by reason (LeftOut)
        self.not_selected: dict[str, int] = {}  # rows of chromosomes --chromosomes/--exclude-chromosomes leave out
        self.n_rows = 0
        c, p = layout.chrom + 1, layout.pos + 1
        self.sort_hint = (f"a chromosome's rows must be contiguous, e.g. sorted with sort -k{c},{c} -k{p},{p}n, "
                          f"the header line kept first")

    def stored_name(self, name: str) -> str:
        """``name`` as the store will name it (--chromosome-names)."""
        return name if self.settings.rename is None else self.settings.rename(name)

    def validated(self, col, block: Block) -> list[Rows]:
        """Rows of one block's columns, or a CheckFailure naming the earliest bad row. Each
        check first asks a cheap question of the whole block (a min, a max, an any) and
        builds its row mask only when that fails."""
        lay, settings, order = self.layout, self.settings, self.order
        n = len(col[lay.chrom])
        if n == 0:
            return []
        self.n_rows += n
        chrom = col[lay.chrom]
        starts = changes(chrom)
        runs = _Runs(starts, [chrom[int(start)].as_py() for start in starts], n, order.chrom)
        pos = numbers(col[lay.pos])
        checks = Checks()  # the first check at the earliest row is reported
        kept_run, stored, finished = self._chromosome_runs(runs, checks)
        self.fields.positions(col, pos, checks)
        meth, cov = self.fields.counts(col, checks.check)
        strand = self.fields.strand(col, checks)
        keep, is_cg, left_out = self.fields.kept(col, cov, strand, checks)
        pos0 = pos - lay.base
        if settings.merge_strands and strand is not None and not checks.failures:
            pos0 = self.fields.merged(pos0, strand, is_cg, checks)
        in_run = np.repeat(kept_run, runs.ends - starts)
        kept = keep & in_run
        repeat, last = self._repeated(block, pos, strand, kept, starts, runs.continues)
        checks.failures += [repeat] if repeat else []
        if (self.checked or self.target) and not checks.failures:
            checks.failures += self._repeated_anywhere(block, pos, strand, kept, runs)
        if checks.failures:
            raise min(checks.failures, key=lambda f: f.row)
        self._note_unsorted(pos, runs)
        for reason in LEFT_OUT:
            mask = getattr(left_out, reason)
            if mask is not None:
                self.left_out[reason] += int(np.count_nonzero(mask & in_run))
        order.finished, order.chrom = finished, runs.names[-1]
        order.position, order.last = int(pos[-1]), last
        out = []
        for r, (start, end) in enumerate(zip(starts, runs.ends)):
            if not kept_run[r]:
                self.not_selected[stored[r]] = self.not_selected.get(stored[r], 0) + int(end - start)
                continue
            sel = keep[start:end]
            if sel.any():
                out.append(Rows(stored[r], pos0[start:end][sel], meth[start:end][sel], cov[start:end][sel],
                                block.offset))
        return out

    def _chromosome_runs(self, runs: "_Runs", checks: "Checks"):
        """Chromosome runs contiguous, with valid names (kept chromosomes only, as the store
        names them): (whether each run is kept, its stored name, the chromosomes finished)."""
        kept_run = np.zeros(len(runs.starts), bool)
        stored = [self.stored_name(name) for name in runs.names]
        previous, finished = self.order.chrom, set(self.order.finished)
        for r, (start, name) in enumerate(zip(runs.starts, runs.names)):
            if name != previous:
                if name in finished:
                    checks.fail(start, f"chromosome {name} appears again after other chromosomes ({self.sort_hint})")
                    break
                if previous is not None:
                    finished.add(previous)
                previous = name
            kept_run[r] = self.settings.keeps(stored[r])
            if kept_run[r]:
                problem = self.names.setdefault(stored[r], new_chromosome_name_problem(stored[r]))
                if problem:
                    checks.fail(start, f"invalid {problem}")
                    break
                if self.stored.setdefault(stored[r], name) != name:
                    checks.fail(start, f"chromosomes {self.stored[stored[r]]} and {name} of this file both become "
                                       f"{stored[r]} (--chromosome-names)")
                    break
        return kept_run, stored, finished

    def _note_unsorted(self, pos, runs: "_Runs") -> None:
        """The chromosomes whose positions go back in this block (their repeats are looked
        for by check_unsorted)."""
        if bool((pos[1:] < pos[:-1]).any()) or (runs.continues and pos[0] < self.order.position):
            back = np.flatnonzero(runs.backwards(pos, self.order.position))
            self.order.unsorted.update(runs.names[r] for r in np.unique(
                np.searchsorted(runs.starts, back, side="right") - 1))

    def _repeated_anywhere(self, block: Block, pos, strand, kept, runs: "_Runs") -> list:
        """The second reading (``checked`` chromosomes) and the search for a ``target``: the
        first kept row whose key (position and strand) came before in its chromosome."""
        keys = pos * 3 + (strand + 1) if strand is not None else pos.copy()
        found = []
        for name, start, end in zip(runs.names, runs.starts, runs.ends):
            rows = np.flatnonzero(kept[start:end]) + start
            if self.target is not None and name == self.target[0]:
                hit = np.flatnonzero(keys[rows] == self.target[1])
                if hit.size:
                    raise RowFound(BlockRow(block, int(rows[hit[0]])))
            if name not in self.checked:
                continue
            repeat = self.seen.first_repeat(name, keys[rows])
            if repeat is not None:
                row, earlier = repeat
                what = "chromosome, position and strand" if strand is not None else "chromosome and position"
                found.append(CheckFailure(int(rows[row]), f"repeats the {what} of {EARLIER}: a file may hold each "
                                                      f"cytosine once (its counts would be summed twice)",
                                      (name, int(keys[rows[row]])) if earlier is None else BlockRow(block,
                                                                                                int(rows[earlier]))))
                break
        return found

    def _repeated(self, block: Block, pos, strand, kept, starts, continues: bool):
        """The first kept row with the chromosome, position and strand of an earlier kept row
        (their counts would be summed twice), as a CheckFailure, or None; and the kept rows at the
        block's last position, by strand (the next block may repeat one). The file is sorted
        by position within a chromosome, so repeats are neighbours: in most blocks one
        comparison of neighbouring positions finds none. (In a chromosome that is not sorted,
        repeats that are not neighbours are found by BlockReader.check_unsorted.)"""
        n, order = len(pos), self.order
        strands = np.zeros(n, np.int64) if strand is None else strand
        same = np.empty(n, bool)  # the row's chromosome and position are the previous row's
        same[0] = continues and pos[0] == order.position
        np.equal(pos[1:], pos[:-1], out=same[1:])
        same[starts[1:]] = False
        if not same.any():
            return None, ({int(strands[-1]): BlockRow(block, n - 1)} if kept[-1] else {})
        group = np.cumsum(~same)  # one number per chromosome and position; 0: the previous block's last
        found = []  # (row, the earlier row it repeats)
        rows = np.flatnonzero(kept & (same | np.r_[same[1:], False]))
        by = np.lexsort((rows, strands[rows], group[rows]))
        g, st, r = group[rows][by], strands[rows][by], rows[by]
        twice = np.flatnonzero((g[1:] == g[:-1]) & (st[1:] == st[:-1]))
        if twice.size:
            k = twice[np.argmin(r[twice + 1])]
            found.append((int(r[k + 1]), BlockRow(block, int(r[k]))))
        if same[0] and order.last:
            first_group = np.flatnonzero(kept[:np.argmax(group > 0) if group[-1] > 0 else n])
            hits = first_group[np.isin(strands[first_group], list(order.last))]
            if hits.size:
                found.append((int(hits[0]), order.last[int(strands[hits[0]])]))
        if found:
            row, earlier = min(found, key=lambda f: f[0])
            what = "chromosome, position and strand" if strand is not None else "chromosome and position"
            return CheckFailure(row, f"repeats the {what} of {EARLIER}: a file may hold each cytosine once (its "
                                 f"counts would be summed twice)", earlier), {}
        starts_of_groups = np.flatnonzero(~same)
        last_start = int(starts_of_groups[-1]) if starts_of_groups.size else 0
        last = dict(order.last) if not starts_of_groups.size else {}  # the whole block is at one position
        for i in np.flatnonzero(kept[last_start:]) + last_start:
            last[int(strands[i])] = BlockRow(block, int(i))
        return None, last
