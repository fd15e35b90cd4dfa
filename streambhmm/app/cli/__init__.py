"""The `streambhmm` command: thin click commands over the Python API, one module per
command group (common.py holds what they share)."""

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

