"""BED9 lines as the segmentations and regions are written: the track line, the strand, the
states' names and colours."""

from __future__ import annotations

from dataclasses import dataclass

# Strand of every BED line: CpG methylation is strand-symmetric, and BED tools' -s skips '.'
# (bedtools merge -s, intersect -s return nothing), so '+', as DNMTools writes its regions.
BED_STRAND = "+"


@dataclass(frozen=True)
class SegmentStyle:
    """How the states appear in a BED: their names and itemRgb colours."""

    labels: list
    colours: list


def track_line(name: str, description: str) -> str:
    """A BED track line: genome browsers colour the items by itemRgb."""
    clean = [v.replace('"', "'").replace("\n", " ") for v in (name, description)]
    return f'track name="{clean[0]}" description="{clean[1]}" itemRgb="On"\n'


def bed9_line(chrom: str, start, end, name: str, score, colour: str) -> str:
    """One BED9 line: BED_STRAND, the whole item thick, ``score`` an integer in 0..1000."""
    return f"{chrom}\t{start}\t{end}\t{name}\t{score}\t{BED_STRAND}\t{start}\t{end}\t{colour}\n"
