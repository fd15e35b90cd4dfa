"""`python -m streambhmm`: the command line."""

from .app.cli import run

run()
