"""Seconds to write and to read one partial of a moment store: streambhmm's write_partial and
read_partial (all of a partial's arrays at once on Zarr's event loop) against the same arrays
written and read one at a time with Zarr's synchronous API, in the same run (the baseline neither syncs, renames nor verifies: it is the lower bound of
the code before, which did all three).

    python scripts/bench_partials.py MOMENTS [--repeats 15]

MOMENTS: a moment store (`streambhmm moments compute STORE -o MOMENTS`); its first partial is
timed. The medians and their ratios are printed."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

from streambhmm.io.storage import Location
from streambhmm.moments.partials import read_partial, write_partial


def arrays_of(path: Path) -> tuple[dict, dict]:
    group = zarr.open_group(str(path), mode="r")
    return dict(group.attrs), {name: group[name][...] for name in group.array_keys()}


def write_one_at_a_time(path: Path, arrays: dict, attrs: dict) -> None:
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    for name, data in arrays.items():
        group.create_array(name, data=data, chunks=tuple(max(n, 1) for n in data.shape) or None)
    group.attrs.update(attrs)


def median_seconds(action, repeats: int, before=lambda: None) -> float:
    times = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("moments", type=Path)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    entry = json.loads((args.moments / "manifest.json").read_text())["partials"][0]
    source = args.moments / entry["path"]
    partial, sha256 = read_partial(Location.of(source))
    attrs, arrays = arrays_of(source)
    with tempfile.TemporaryDirectory() as scratch:
        ours, naive = Path(scratch) / "ours" / "chr" / source.name, Path(scratch) / "naive"

        def clear():
            shutil.rmtree(Path(scratch) / "ours", ignore_errors=True)
            shutil.rmtree(naive, ignore_errors=True)

        write = median_seconds(lambda: write_partial(Location.of(ours), partial, {"chromosome": "chr"}, sha256),
                               args.repeats, clear)
        write_naive = median_seconds(lambda: write_one_at_a_time(naive, arrays, attrs), args.repeats, clear)
        write_partial(Location.of(ours), partial, {"chromosome": "chr"}, sha256)
        write_one_at_a_time(naive, arrays, attrs)
        read = median_seconds(lambda: read_partial(Location.of(ours)), args.repeats)
        read_naive = median_seconds(lambda: arrays_of(naive), args.repeats)
        assert all(np.array_equal(arrays_of(naive)[1][name], value) for name, value in arrays.items())
    size = sum(value.nbytes for value in arrays.values())
    print(f"partial {source.name}: {len(arrays)} arrays, {size / 2**20:.1f} MiB; median of {args.repeats}")
    print(f"write: {write:.3f} s (write_partial, which also syncs the partial to disk and renames it into "
          f"place) against {write_naive:.3f} s one array at a time: {write_naive / write:.2f}x")
    print(f"read:  {read:.3f} s (read_partial, which also verifies its checksum) against {read_naive:.3f} s one "
          f"array at a time: {read_naive / read:.2f}x")


if __name__ == "__main__":
    main()
