"""Bounds every layer checks against, read without opening a store or a cluster: the largest
position a counts store takes, and how long a computation may go without progress."""

from __future__ import annotations

import os

import numpy as np

POSITION_MAX = 1 << 35  # bp (34 Gb), the largest position a store takes: above any chromosome assembled
COUNT_MAX = int(np.iinfo(np.uint32).max)  # the largest count: the counts store holds uint32
WAIT_ENV = "STREAMBHMM_WAIT_TIMEOUT"
# Seconds a computation may go without any of its tasks finishing: a chunk task takes
# seconds, so this much silence means a stopped, hung or swapping worker.
WAIT_TIMEOUT = 300.0


def wait_timeout() -> float:
    """Seconds a computation may go without any of its tasks finishing ($STREAMBHMM_WAIT_TIMEOUT)."""
    value = os.environ.get(WAIT_ENV, "")
    try:
        seconds = float(value) if value else WAIT_TIMEOUT
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"${WAIT_ENV} must be a positive number of seconds, got {value!r:.100}")
    return seconds
