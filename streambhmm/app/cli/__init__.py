"""The `streambhmm` command: thin click commands over the Python API, one module per
command group (common.py holds what they share)."""

import signal
import sys

import click

from ... import __version__
from .calls import hmr, pmd
from .dmr import dmr
from .fit import fit
from .moments import moments
from .runs import batch, demo
from .segments import decode, regions, report, score, tracks
from .store import info, ingest, upgrade


class Commands(click.Group):
    """The command group; Ctrl-C ends a command with the shell's status for SIGINT (130),
    as an interrupted program should, where click exits 1 (a script cannot tell a stop
    from a failure)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            _store_is_an_argument(exc)
            raise
        except KeyboardInterrupt:
            _aborted()
        except Exception as exc:  # a signal wrapped by what it interrupted (_signal_behind)
            stop = _signal_behind(exc)
            if stop is None:
                raise
            if isinstance(stop, SystemExit):  # SIGTERM (app.console)
                sys.exit(stop.code)
            _aborted()


def _store_is_an_argument(exc: click.NoSuchOption) -> None:
    """`--store` given to a command whose store is its first argument (only `ingest` takes
    the option): the message says so."""
    command = exc.ctx.command if exc.ctx else None
    if exc.option_name == "--store" and command is not None and \
            any(isinstance(p, click.Argument) and p.name == "store" for p in command.params):
        exc.message = (f"No such option '--store': the store is the first argument of `{exc.ctx.command_path}` "
                       f"(`{exc.ctx.command_path} STORE ...`); only `ingest` takes --store")
        exc.possibilities = None  # not "Did you mean '--seed'?"


def _aborted():
    click.echo(file=sys.stderr)  # closes the terminal's ^C echo
    click.echo("Aborted!", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)


def _signal_behind(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or SystemExit (SIGTERM) behind ``exc``: a signal that comes while
    compiled code (numba) runs Python surfaces as a SystemError "returned a result with an
    exception set", caused by it (seen on Ctrl-C during `dmr`'s EM), and one that comes while
    a class is made (a lazy import of dask's) as a RuntimeError "Error calling __set_name__"
    (a helper's audit: `pmd` stopped 0.4 s in exited 1 with a traceback)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@click.group(cls=Commands)
@click.version_option(__version__, prog_name="streambhmm")
def main():
    """Learn Binomial HMMs of DNA methylation by the method of moments."""


for command in (ingest, info, upgrade, moments, fit, score, decode, regions, hmr, pmd, dmr, tracks, report, batch, demo):
    main.add_command(command)

