"""Names: the rules for sample and chromosome names, and the two spellings of chromosome
names (UCSC's ``chr1``, ``chrM``; Ensembl's ``1``, ``MT``).

Every command reads names through these rules: ingest refuses a name that breaks them,
and a model's samples are checked with the same rule when it is read (app/modelio.py).
"""

from __future__ import annotations

import re
from typing import Callable

MAX_NAME_BYTES = 255  # a name is also a file or directory name (store groups, decode's BEDs)


def _name_problem(name: str, what: str) -> str | None:
    """Why ``name`` breaks the rule every name follows, or None: 1-255 bytes of printable
    UTF-8 without whitespace, '/' or '\\'."""
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if not 1 <= size <= MAX_NAME_BYTES:
        return f"{what} name of {size} bytes (1 to {MAX_NAME_BYTES} allowed)"
    if not name.isprintable() or any(c.isspace() for c in name):
        return f"{what} name with a control or whitespace character"
    if "/" in name or "\\" in name:
        return f"{what} name with '/' or '\\' (it names a file or directory)"
    return None


def chromosome_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a chromosome of the store (its Zarr group and directory
    name), or None. Valid: 1-255 bytes of printable UTF-8 without whitespace, '/' or
    '\\', not starting with '.' or '__', and not zarr.* (the store's own files)."""
    problem = _name_problem(name, "chromosome")
    if problem:
        return problem
    if name.startswith((".", "__")):
        return "chromosome name starting with '.' or '__' (hidden or reserved by Zarr)"
    if name.lower().startswith("zarr."):
        return "chromosome name starting with 'zarr.' (the store's metadata files are named so)"
    return None


def new_chromosome_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a chromosome that ingest adds to a store, or None: a valid
    chromosome name (chromosome_name_problem) that does not begin as a BED comment or header
    line does ('#', 'track', 'browser'), whose regions BED tools would drop."""
    problem = chromosome_name_problem(name)
    if problem is None and name.startswith(("#", "track", "browser")):
        return ("chromosome name starting with '#', 'track' or 'browser': a BED line of it reads as a comment or "
                "header, and BED tools drop its regions")
    return problem


def sample_name_problem(name, what: str = "sample") -> str | None:
    """Why ``name`` cannot name a sample, or None. Valid: 1-255 bytes of printable UTF-8
    without whitespace (a sample's name is part of its states' labels, BED names that
    cannot hold blanks), '/' or '\\' (decode and tracks name files after it) or ','
    (--samples lists names separated by commas). ``what``: "group" for a sample sheet's
    groups, which label states and head columns alike (--contrast lists them)."""
    if not isinstance(name, str):
        return f"{what} name {name!r:.100} is not text"
    problem = _name_problem(name, what)
    if problem:
        return problem
    if "," in name:
        option = "--samples" if what == "sample" else "--contrast"
        return f"{what} name with ',' ({option} separates names with commas)"
    return None


def check_sample_name(name: str) -> None:
    problem = sample_name_problem(name)
    if problem:
        raise ValueError(f"invalid {problem}: {name!r:.200}; use letters, digits and . _ - + (e.g. H1_rep1)")


# ---------------------------------------------------------------------------- spellings

NAMING = ("ucsc", "ensembl")
_NUMBERED = re.compile(r"[1-9][0-9]*")  # 1, 2, ..., 22 (and beyond, for other genomes)


def ucsc_name(name: str) -> str:
    """UCSC's spelling: chr before numbered chromosomes, X and Y; MT (or M) is chrM; any
    other name is kept."""
    if name in ("MT", "M"):
        return "chrM"
    if name in ("X", "Y") or _NUMBERED.fullmatch(name):
        return f"chr{name}"
    return name


def ensembl_name(name: str) -> str:
    """Ensembl's spelling: UCSC's without chr, chrM is MT; any other name is kept."""
    if name == "chrM":
        return "MT"
    rest = name[3:] if name.startswith("chr") else None
    if rest is not None and (rest in ("X", "Y") or _NUMBERED.fullmatch(rest)):
        return rest
    return name


CONVENTIONS = {"ucsc": ucsc_name, "ensembl": ensembl_name}


def spelling_key(name: str) -> str:
    """What two spellings of one chromosome share: the name without a leading chr (in any
    case), upper case, MT as M (chr21 ~ 21 ~ Chr21; chrM ~ MT)."""
    key = name[3:] if name[:3].lower() == "chr" and len(name) > 3 else name
    key = key.upper()
    return "M" if key == "MT" else key


def naming_advice(name: str, other: str) -> str:
    """How to make ``name`` be spelt as ``other`` is."""
    for convention, convert in CONVENTIONS.items():
        if convert(name) == other:
            return f"pass --chromosome-names {convention} to spell it {other}"
    return f"pass --chromosome-names FILE, FILE listing '{name} {other}' (one name and its new name a line)"


class Spellings:
    """The chromosome names met so far, to refuse one chromosome spelt two ways (chr21 in
    one place and 21 in another would become two chromosomes, each with part of the data).
    ``names`` are the store's; ``holds(name)`` says whether the store's chromosome holds
    data (of a sample other than the one being written): a store's name left without data
    is no clash, and a name the store holds data under is kept as it is."""

    def __init__(self, names=(), where: str = "the store", holds: Callable[[str], bool] = lambda name: True):
        self._where, self._holds = where, holds
        self._store: dict[str, list[str]] = {}  # spelling key -> the store's names
        for name in names:
            self._store.setdefault(spelling_key(name), []).append(name)
        self._met: dict[str, tuple[str, str]] = {}  # spelling key -> (name, where) met in this writing

    def add(self, name: str, where: str) -> None:
        """Note ``name`` (from ``where``); a ValueError if another spelling of it was met."""
        key = spelling_key(name)
        met = self._met.setdefault(key, (name, where))
        others = [(*met, False)] if met[0] != name else []
        others += [(other, self._where, True) for other in self._store.get(key, ()) if other != name]
        if not others or (name in self._store.get(key, ()) and self._holds(name)):
            return
        for other, there, in_store in others:
            if not in_store or self._holds(other):
                also = f"it also has {other}" if there == where else f"{there} spells it {other}"
                raise ValueError(f"{where} has chromosome {name}, but {also}: they would be two chromosomes, each "
                                 f"with part of the data; {naming_advice(name, other)}")
