"""How every ``tl-leadterms`` subcommand presents itself: each option's default shown after its
help, and an example line under the options."""

import argparse

__all__ = ["Formatter", "VersionAction", "subparser"]


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown (``(default: cpu)``) where an option has one; description and epilog
    printed as written (the example lines keep their layout)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text  # already says it, or there is none to show
        return super()._get_help_string(action)


def subparser(sub, name: str, summary: str, *examples: str) -> argparse.ArgumentParser:
    """The subcommand ``name`` with its one-line ``summary`` and example lines."""
    lines = "\n".join(f"  {line}" for line in examples)
    return sub.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example:\n{lines}" if examples else None,
        formatter_class=Formatter,
    )


class VersionAction(argparse.Action):
    """``--version``: the installed version (looked up only when asked: ``--help`` stays fast)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None) -> None:  # fmt: skip
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from tl_leadterms.version import __version__

        print(f"{parser.prog} {__version__}")
        parser.exit()
