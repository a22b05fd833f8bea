"""``python -m tl_leadterms.cli``: the ``tl-leadterms`` command."""

import sys


def run() -> int:
    """:func:`tl_leadterms.cli.main`, and Ctrl-C outside its own handler (while Python imports
    the command's modules, before it parses the arguments) as one line and exit status 130."""
    try:
        from tl_leadterms.cli import main

        return main()
    except KeyboardInterrupt:
        from tl_leadterms.signals import EXIT_INTERRUPTED

        words = [a for a in sys.argv[1:2] if not a.startswith("-")]
        print(" ".join(["tl-leadterms", *words]) + ": interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(run())
