"""The ``tl-leadterms`` command: one subcommand per task, each with ``--help`` (examples of every
one: docs/guides/command-line.md). Exit codes: 0 success, 2 bad arguments or input."""

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from tl_leadterms.cli import decompose, demo, report, stats, sweep, top
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.filesystem import no_space_error, out_of_space
from tl_leadterms.signals import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    sigterm_received,
    terminate_as_interrupt,
)

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``tl-leadterms`` parser: one subparser per module of this package."""
    from tl_leadterms.cli.help import Formatter, VersionAction

    parser = argparse.ArgumentParser(
        prog="tl-leadterms",
        description="Corpus statistics and gradient leading terms of transformer weights.",
        epilog="example:\n  tl-leadterms demo\n  tl-leadterms COMMAND --help",
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in (demo, stats, top, decompose, sweep, report):
        command.add_parser(sub)
    return parser


def _interrupt_ends_the_process(command: str) -> None:
    """From now on Ctrl-C (while Python shuts down: atexit functions, threads joined) prints
    the one line and ends the process with status 130, instead of a traceback under status 0."""

    def stop(signum: int, frame: object) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os.write(2, f"tl-leadterms {command}: interrupted\n".encode())
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGINT, stop)


def main(argv: list[str] | None = None) -> int:
    """Run ``tl-leadterms`` with ``argv`` (default: the command line); the exit code."""
    args = build_parser().parse_args(argv)
    # text that is not UTF-8 (lone surrogates from file names or hostile JSON) is printed as
    # \udXXX escapes instead of ending the command in a UnicodeEncodeError
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    try:
        return _run(args)
    finally:
        if argv is None:  # this process's own command line, not a call from Python
            _interrupt_ends_the_process(args.command)


def _run(args: argparse.Namespace) -> int:
    try:
        with terminate_as_interrupt():  # SIGTERM cleans up as Ctrl-C does
            return args.func(args)
    except KeyboardInterrupt as err:  # SIGINT, or SIGTERM as Terminated (see signals)
        if isinstance(err, Terminated) or sigterm_received():
            print(f"tl-leadterms {args.command}: terminated (SIGTERM)", file=sys.stderr)
            return EXIT_TERMINATED  # temporaries and scratch files were removed on the way out
        print(f"tl-leadterms {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED  # temporaries are removed by the atomic writer on the way out
    except BrokenPipeError:  # the reader of stdout went away (| head): files were written
        # before printing; stop quietly, with Python's own flush at exit pointed at nowhere
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (LeadTermsError, OSError, UnicodeDecodeError) as err:
        # bad input and unreadable or unwritable files: one line, whatever the message held
        if isinstance(err, OSError) and out_of_space(err):  # a write outside the atomic writer
            err = no_space_error(Path(err.filename or "."), None, 0, err)
        text = err.cli_message if isinstance(err, LeadTermsError) else str(err)
        message = " ".join(text.split())
        print(f"tl-leadterms {args.command}: error: {message}", file=sys.stderr)
        return 2
