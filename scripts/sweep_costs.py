"""What a one-pass sweep (`streambhmm fit MOMENTS --states A-B`) costs per number of states, and
the least wall time any order of its fits can reach on a number of cores.

Each number of states is fitted here as one of the sweep's worker processes fits it (the
refined fit and its held-out folds, one thread; learn.selection.sweep_fit), one after
another, and timed. The sweep hands whole numbers of states to its processes, so on P cores it
cannot end before the largest fit, nor before the total divided by P; the table gives both, and
the time of the longest-first order (each fit to the process free first).

    python scripts/sweep_costs.py MOMENTS [--states 2-8] [--cores 2]
"""

from __future__ import annotations

import argparse
import heapq
import time

import click
from threadpoolctl import threadpool_limits

from streambhmm.app.cli.fit import parse_states
from streambhmm.distributed.fitdata import load_moments
from streambhmm.distributed.fitting import default_emission
from streambhmm.learn.refine import limit_fit_threads
from streambhmm.learn.selection import sweep_fit
from streambhmm.moments.spec import FeatureSpec


def makespan(costs: list[float], cores: int) -> float:
    """The end of the last fit when they start in the order given, each in the process free first."""
    free = [0.0] * cores
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


def states(text: str) -> list[int]:
    try:
        return parse_states(text)
    except click.BadParameter as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("moments", help="a moment store (streambhmm moments)")
    parser.add_argument("--states", default="2-8", type=states, help="as fit --states: M, M1-M2 or M1,M2,...")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = load_moments(args.moments, None, FeatureSpec(), None, quiet=True, want_blocks=True)
    limit_fit_threads(1)  # as in a sweep's process
    costs = []
    print("M  seconds (fit and held-out folds, one thread)")
    with threadpool_limits(1, user_api="blas"):
        for m in args.states:
            start = time.perf_counter()
            fit = sweep_fit(data.moments, data.blocks, m, args.seed, False, default_emission("refined"))
            costs.append(time.perf_counter() - start)
            print(f"{m}  {costs[-1]:.1f}" + (f"  (refused: {fit.refused[:80]})" if fit.refused else ""), flush=True)
    total = sum(costs)
    print(f"\nall: {total:.1f} s on one core")
    print(f"on {args.cores} cores: at least {max(max(costs), total / args.cores):.1f} s; "
          f"{makespan(sorted(costs, reverse=True), args.cores):.1f} s largest first; "
          f"{makespan(costs, args.cores):.1f} s in the sweep's order, ascending M (start-up, loading and writing "
          f"not counted)")


if __name__ == "__main__":
    main()
