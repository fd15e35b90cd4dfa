"""A block of text parsed into typed columns by pyarrow, and a line pyarrow cannot parse
found and explained."""

from __future__ import annotations

import re

import numpy as np

from .rows import Layout, decoded, pa, pcsv, quoted


def normalized(data: bytes) -> bytes:
    """Runs of tabs and spaces as one tab; no blanks at line starts and ends; LF ends."""
    data = re.sub(rb"[ \t]+", b"\t", data.replace(b"\r\n", b"\n"))
    data = data.replace(b"\t\n", b"\n").replace(b"\n\t", b"\n")
    return data[1:] if data.startswith(b"\t") else data


class Parser:
    """pyarrow's CSV reader set up for one layout."""

    def __init__(self, layout: Layout):
        self.layout = layout
        names = [f"f{i}" for i in range(layout.n_fields)]
        self.types = layout.types()
        self.read = pcsv.ReadOptions(column_names=names, use_threads=True, block_size=1 << 19)
        self.parse_options = pcsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False,
                                               escape_char=False, newlines_in_values=False, ignore_empty_lines=True)
        self.convert = pcsv.ConvertOptions(column_types={names[i]: t for i, t in self.types.items()},
                                           include_columns=[names[i] for i in sorted(self.types)],
                                           null_values=[], strings_can_be_null=False,
                                           quoted_strings_can_be_null=False, check_utf8=True)

    def __call__(self, data) -> dict[int, pa.Array]:
        table = pcsv.read_csv(pa.py_buffer(data), self.read, self.parse_options, self.convert)
        if b"0x" in data or b"0X" in data:  # rare: a name's, or a count pyarrow read as hexadecimal
            self._refuse_hexadecimal(data)
        return {i: table.column(f"f{i}").combine_chunks() for i in self.types}

    def _refuse_hexadecimal(self, data: bytes) -> None:
        """pyarrow reads 0x10 in an integer column as 16 (a helper's audit stored such counts):
        ArrowInvalid, as for any field it cannot parse, so that the line is found and explained."""
        integers = [i for i, kind in self.types.items() if kind == pa.int64()]
        for line in data.split(b"\n"):
            if b"0x" in line or b"0X" in line:
                fields = line.split(b"\t")
                if any(i < len(fields) and HEXADECIMAL.match(fields[i]) for i in integers):
                    raise pa.ArrowInvalid("a hexadecimal integer")

    def columns(self, data: bytes) -> tuple[dict[int, pa.Array], bytes]:
        """Columns of a block and the text they came from; a line that does not parse is a
        FormatError (found by bisection, then explained)."""
        if b" " in data:
            data = normalized(data)
        try:
            return self(data), data
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        data = normalized(data)  # empty fields (runs of tabs) and blank-only lines
        try:
            return self(data), data
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            reason = str(exc)
        lines = data.split(b"\n")
        lo, hi = 0, len(lines)  # invariant: lines[:lo] parse, lines[:hi] do not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                self(b"\n".join(lines[:mid]) + b"\n")
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                hi, reason = mid, str(exc)
        raise BadLine(lo, reason, lines)


class BadLine(Exception):
    """Line ``index`` of a (normalized) block does not parse."""

    def __init__(self, index: int, reason: str, lines: list[bytes]):
        self.index, self.reason, self.lines = index, reason, lines


INTEGER = re.compile(rb"-?[0-9]+")
HEXADECIMAL = re.compile(rb"0[xX]")
INT64_DIGITS = 19  # more digits are out of int64's range whatever they are (and int() refuses 4,301)


def explain(line: bytes, layout: Layout, reason: str, variable: bool = False) -> str:
    """Why pyarrow could not parse ``line``, in the user's terms."""
    fields = line.split(b"\t")
    if len(fields) != layout.n_fields:
        changed = f" (the number of columns changed: the first data line has {layout.n_fields})" if variable else ""
        return f"expected {layout.n_fields} fields, found {len(fields)}{changed}"
    for i, kind in sorted(layout.types().items()):
        field = fields[i]
        what = f"field {i + 1} ({quoted(decoded(field))})"
        if kind == pa.string():
            try:
                field.decode("utf-8")
            except UnicodeDecodeError:
                return f"{what}: invalid UTF-8"
        elif kind == pa.int64() and HEXADECIMAL.match(field):
            return f"{what}: hexadecimal, not a decimal integer"
        elif kind == pa.int64() and not INTEGER.fullmatch(field):
            return f"{what}: {'not an integer' if _is_number(field) else 'not a number'}"
        elif kind == pa.int64() and (len(field.lstrip(b"-")) > INT64_DIGITS or not -2 ** 63 <= int(field) < 2 ** 63):
            return f"{what}: {'negative' if field.startswith(b'-') else 'too large'}"
        elif kind == pa.float64() and not _is_number(field):
            return f"{what}: not a number"
    return f"cannot parse ({reason.splitlines()[0]})"


def _is_number(field: bytes) -> bool:
    try:
        float(field)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------- checks


def chars(arr: pa.Array, count: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The lengths of the strings and their first ``count`` bytes (0 past the end), read
    from the raw buffers: vectorized, without Python strings."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    values = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    values = np.r_[values, np.zeros(count, np.uint8)]  # reads past the last string stay in bounds
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    return lengths, [np.where(lengths > k, values[starts + k], 0) for k in range(count)]


NUMPY_TYPES = {"int64": np.dtype(np.int64), "double": np.dtype(np.float64)}


def numbers(arr: pa.Array) -> np.ndarray:
    """A numeric column (no nulls: the parser takes none) as a read-only numpy view of its
    buffer (pyarrow's to_numpy would import pandas: 0.5 s of a command)."""
    dtype = NUMPY_TYPES[str(arr.type)]
    return np.frombuffer(arr.buffers()[1], dtype, len(arr), arr.offset * dtype.itemsize)


def changes(arr: pa.Array) -> np.ndarray:
    """The rows whose string differs from the row before (row 0 always), read from the raw
    buffers (pyarrow.compute would cost a command 0.1-0.2 s to import)."""
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4).astype(np.int64)
    values = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    differs = np.r_[True, lengths[1:] != lengths[:-1]]
    same = np.flatnonzero(~differs)  # rows as long as the one before: compare their bytes
    for k in range(int(lengths[same].max(initial=0))):
        same = same[lengths[same] > k]
        differs[same] |= values[offsets[same] + k] != values[offsets[same - 1] + k]
    return np.flatnonzero(differs)


def code_table(pairs) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables for one-character values: valid[byte], value[byte]."""
    valid, value = np.zeros(256, bool), np.zeros(256, np.int64)
    for text, v in pairs:
        valid[ord(text)], value[ord(text)] = True, v
    return valid, value


C, G, H = ord("C"), ord("G"), ord("H")
BASE = np.zeros(256, bool)
BASE[list(b"ACGTN")] = True
UPPER = np.arange(256, dtype=np.uint8)
UPPER[ord("a"):ord("z") + 1] -= ord("a") - ord("A")


def upper_chars(arr: pa.Array, count: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """chars() in upper case: a context's or strand's letters in either case (soft-masked bases
    are lower)."""
    n, first = chars(arr, count)
    return n, [UPPER[c] for c in first]


def contexts(arr: pa.Array, kind: str, strand: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, str]:
    """Per row: 0 = CG, 1 = CHG, 2 = CHH, and whether the value is valid (plus what a
    valid value looks like, for the message)."""
    if kind in ("name", "tri", "name-or-tri"):
        n, (c0, c1, c2) = upper_chars(arr, 3)
        named = (c0 == C) & np.where(n == 2, c1 == G, (n == 3) & (c1 == H) & ((c2 == G) | (c2 == H)))  # CG/CHG/CHH
        bases = (n == 3) & (c0 == C) & BASE[c1] & BASE[c2]  # the C and the two bases after it
        ok, looks = {"name": (named, "CG, CHG or CHH"), "tri": (bases, "C and two bases (ACGTN)"),
                     "name-or-tri": (named | bases, "CG, CHG, CHH, or a C and two bases (ACGTN)")}[kind]
        # a name reads as a C and two bases does (H is no base): CG's second letter is G, CHG's third
        return np.where(c1 == G, 0, np.where(c2 == G, 1, 2)), ok, looks
    # bsmap: 5 bases of the + strand centred on the position: a C (+ strand) or G (- strand)
    n, (c0, c1, c2, c3, c4) = upper_chars(arr, 5)
    plus = strand > 0
    ok = (n == 5) & np.where(plus, c2 == C, c2 == G) & BASE[c0] & BASE[c1] & BASE[c3] & BASE[c4]
    cg = np.where(plus, c3 == G, c1 == C)
    chg = np.where(plus, c4 == G, c0 == C)
    return np.where(cg, 0, np.where(chg, 1, 2)), ok, "5 bases (ACGTN) centred on the C (+) or G (-)"


CONTEXT_INDEX = {"CG": 0, "CHG": 1, "CHH": 2}
