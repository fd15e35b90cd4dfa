"""`python -m streambhmm`: the command line."""

from .app.console import run

run()
