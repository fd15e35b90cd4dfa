"""The `streambhmm` command: thin click commands over the Python API, one module per
command group (common.py holds what they share)."""

import signal

import click

from ... import __version__
from .calls import hmr, pmd
from .dmr import dmr
from .fit import fit
from .moments import moments
from .runs import batch, demo
from .segments import decode, regions, report, score, tracks
from .store import info, ingest, upgrade


@click.group()
@click.version_option(__version__, prog_name="streambhmm")
def main():
    """Learn Binomial HMMs of DNA methylation by the method of moments."""


for command in (ingest, info, upgrade, moments, fit, score, decode, regions, hmr, pmd, dmr, tracks, report, batch, demo):
    main.add_command(command)


def run() -> None:
    """The console script (and ``python -m streambhmm``): a SIGTERM (a batch scheduler's time
    limit, ``kill``) unwinds the command as Ctrl-C does, so its temporaries, scratch stores and
    embedded cluster go with it."""
    signal.signal(signal.SIGTERM, _terminated)
    main()


def _terminated(signum, frame):
    raise SystemExit(128 + signum)
