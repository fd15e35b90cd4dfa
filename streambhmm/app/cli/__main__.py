"""`python -m streambhmm.app.cli`: the command line."""

from . import main

main()
