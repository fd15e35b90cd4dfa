"""Checks on user-supplied counts: every error names what is wrong and where."""

from __future__ import annotations

import numpy as np


def _first_index(mask: np.ndarray) -> tuple[int, ...]:
    """Index of the first True entry of ``mask`` (row-major)."""
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


# reads per bin and sample: the emission tables index (coverage, methylated) pairs by
# c (c + 1) / 2 + mu in int64, exact far beyond any real coverage
MAX_COUNT = 2**31 - 1


def _as_count_array(name: str, values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold integer counts, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            idx = _first_index(bad)
            raise ValueError(f"{name} must hold integer counts; {name}[{_fmt(idx)}] = {arr[idx].item()!r}")
    huge = arr > MAX_COUNT
    if huge.any():  # before the conversion, which would wrap them around
        idx = _first_index(huge)
        raise ValueError(f"{name}[{_fmt(idx)}] = {arr[idx].item()!r}: counts above {MAX_COUNT:,} reads are not "
                         f"supported")
    if arr.dtype.kind == "f" and (arr < -MAX_COUNT).any():
        idx = _first_index(arr < -MAX_COUNT)
        raise ValueError(f"negative count: {name}[{_fmt(idx)}] = {arr[idx].item()!r}")
    return arr.astype(np.int64, copy=False)


def _fmt(idx: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in idx)


def validate_counts(methylated, coverage, lengths=None):
    """Return ``(methylated, coverage, lengths)`` as int64 arrays of shape (n, S), (n, S), (k,).

    ``methylated`` and ``coverage`` have shape (n,) for one sample or (n, S) for S samples.
    ``lengths`` lists the lengths of the independent sequences (hmmlearn convention) and
    must sum to n; ``None`` means one sequence.
    """
    mu = _as_count_array("methylated", methylated)
    cov = _as_count_array("coverage", coverage)
    if mu.shape != cov.shape:
        raise ValueError(f"methylated has shape {mu.shape} but coverage has shape {cov.shape}")
    if mu.ndim == 1:
        mu, cov = mu[:, None], cov[:, None]
    elif mu.ndim != 2:
        raise ValueError(f"counts must have shape (n,) or (n, n_samples), got {mu.shape}")
    if mu.shape[1] == 0:
        raise ValueError("counts have zero samples (shape (n, 0))")
    for name, arr in (("methylated", mu), ("coverage", cov)):
        neg = arr < 0
        if neg.any():
            idx = _first_index(neg)
            raise ValueError(f"negative count: {name}[{_fmt(idx)}] = {arr[idx]}")
    over = mu > cov
    if over.any():
        idx = _first_index(over)
        raise ValueError(
            f"methylated > coverage at index [{_fmt(idx)}]: methylated = {mu[idx]}, coverage = {cov[idx]}"
        )
    return mu, cov, validate_lengths(lengths, mu.shape[0])


def validate_lengths(lengths, n: int) -> np.ndarray:
    if lengths is None:
        return np.array([n], dtype=np.int64)
    arr = np.asarray(lengths)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.astype(np.int64)  # no sequences: their sum, 0, is checked below
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"lengths must be a 1-D sequence of integers, got {arr!r}")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        i = int(np.argmax(arr < 0))
        raise ValueError(f"lengths[{i}] = {arr[i]} is negative")
    if int(arr.sum()) != n:
        raise ValueError(f"lengths sum to {int(arr.sum())} but the counts have {n} rows")
    return arr


def refuse_without_reads(coverage: np.ndarray) -> None:
    """A fit needs reads: refuse validated counts without any (no bins, or every bin empty)."""
    if not coverage.any():
        what = "there are no bins" if coverage.shape[0] == 0 else f"all {coverage.shape[0]:,} bins have coverage 0"
        raise ValueError(f"no reads to fit: {what}")
