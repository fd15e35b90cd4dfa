"""BED9 lines as the segmentations and regions are written: the track line, the strand, the
states' names and colours."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Strand of every BED line: CpG methylation is strand-symmetric, and BED tools' -s skips '.'
# (bedtools merge -s, intersect -s return nothing), so '+', as DNMTools writes its regions.
BED_STRAND = "+"


@dataclass(frozen=True)
class SegmentStyle:
    """How the states appear in a BED: their names and itemRgb colours."""

    labels: list
    colours: list


def bed_order(chromosomes) -> list[str]:
    """The order BED files list chromosomes in: the names' byte order, as `LC_ALL=C sort
    -k1,1 -k2,2n` sorts them (chr10 before chr2), which bedToBigBed, BEDOPS and bedtools'
    -sorted expect. The store keeps them in natural order (chr2 before chr10)."""
    return sorted(chromosomes)


def track_head(description: bytes) -> re.Pattern:
    """How a BED that one command writes begins (track_line): a whole track line whose
    description matches the pattern ``description``, the command's own ("HMR regions of ...
    (hmr of ...)", "states of ..."). A prefix alone passed a user's UCSC track as ours, and
    one pattern for every command let `hmr -o` replace `pmd`'s regions (helpers' audits)."""
    return re.compile(rb'track name="[^"\n]*" description="' + description + rb'" itemRgb="On"\n')


def track_line(name: str, description: str) -> str:
    """A BED track line: genome browsers colour the items by itemRgb."""
    clean = [v.replace('"', "'").replace("\n", " ") for v in (name, description)]
    return f'track name="{clean[0]}" description="{clean[1]}" itemRgb="On"\n'


def bed9_line(chrom: str, start, end, name: str, score, colour: str) -> str:
    """One BED9 line: BED_STRAND, the whole item thick, ``score`` an integer in 0..1000."""
    return f"{chrom}\t{start}\t{end}\t{name}\t{score}\t{BED_STRAND}\t{start}\t{end}\t{colour}\n"


@dataclass(frozen=True)
class BedItem:
    """One region of a BED file (BED3 to BED9+): ``score`` 0 and ``colour`` None where absent."""

    chrom: str
    start: int
    end: int
    name: str
    score: float
    colour: tuple | None  # itemRgb as (r, g, b) in 0..255


def read_bed(path) -> list[BedItem]:
    """The regions of a BED file (track, browser and # lines skipped); a line that is not BED
    raises ValueError naming the file, the line and (the start of) its text."""
    items = []
    with open(path, errors="replace") as bed:  # undecodable bytes fail as text that is not BED
        for number, line in enumerate(bed, 1):
            if not line.strip() or line.startswith(("#", "track", "browser")):
                continue
            fields, text = line.rstrip("\n").split("\t"), line.rstrip()[:200]
            try:
                start, end = int(fields[1]), int(fields[2])
                score = float(fields[4]) if len(fields) > 4 and fields[4] not in ("", ".") else 0.0
                colour = tuple(int(v) for v in fields[8].split(",")) if len(fields) > 8 and fields[8] not in (
                    "", "0", ".") else None
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{number}: not BED (chrom, start, end, tab-separated): {text!r}") from None
            problem = ("its start is not before its end" if not 0 <= start < end else
                       "its itemRgb is not R,G,B" if colour is not None and (
                           len(colour) != 3 or not all(0 <= v <= 255 for v in colour)) else None)
            if problem:
                raise ValueError(f"{path}:{number}: {problem}: {text!r}")
            items.append(BedItem(fields[0], start, end, fields[3] if len(fields) > 3 else "", score, colour))
    return items
