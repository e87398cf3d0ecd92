"""The ``tractable`` command line: ``tractable <command> [options]``.

Each command lives in its own module under :mod:`tractable.commands` exposing
``HELP: str``, ``add_arguments(parser)`` and ``run(args) -> int``; a command whose module is
missing (an optional part not installed) is simply not listed.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main"]

# command name -> module under tractable.commands
COMMANDS = {
    "compile": "compile",
    "demo": "demo",
    "distill": "distill",
    "sample": "sample",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tractable",
        description="Constraints compiled to token-level NFAs; budget-aware constrained decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod_name in COMMANDS.items():
        try:
            mod = importlib.import_module(f"tractable.commands.{mod_name}")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("tractable.commands"):
                continue
            raise
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
