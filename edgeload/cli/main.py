"""Command line: argument parsing and printing only.

Each subcommand lives in the module that owns its work and exposes
``add_arguments(parser)`` and ``run(args) -> int``; this file only registers them,
imported lazily so ``edgeload --help`` stays fast on a Pi.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from .._version import __version__
from ..errors import EdgeloadError, redact

# name -> (module that implements it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("edgeload.cli.probe", "show what this device is and the plan edgeload would use"),
    "demo": ("edgeload.cli.demo", "replay sample clips (or your sources) as live streams"),
    "autotune": (
        "edgeload.cli.autotune",
        "measure the real workload on this device and write the profile every loader uses",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error rule: one line on stderr, exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {redact(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="edgeload",
        description="Data loading for PyTorch on edge devices (Jetson, Raspberry Pi, x86).",
    )
    parser.add_argument("--version", action="version", version=f"edgeload {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        # add_help=False: `edgeload CMD --help` reaches the parser that knows CMD's options.
        sub.add_parser(name, help=help_text, add_help=False).set_defaults(_module=module)
    return parser


def _fail(command: str, exc: BaseException) -> int:
    # The CLI's error rule: one line on stderr naming the problem, exit status 2, no
    # traceback (a traceback is for a bug, not for a bad input), no password.
    text = " ".join(str(exc).split()) or type(exc).__name__
    print(f"edgeload {command}: {redact(text)}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``edgeload`` command line and return its exit status.

    A bad argument, a missing file or a source that cannot be used is printed as one
    line on stderr (``edgeload CMD: what is wrong``) with exit status 2.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    # Parse the command name first, then let its module add its own arguments.
    head, _ = parser.parse_known_args(args_list)
    if head.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(head._module)
    sub_parser = _Parser(prog=f"edgeload {head.command}", description=COMMANDS[head.command][1])
    module.add_arguments(sub_parser)
    args = sub_parser.parse_args(args_list[args_list.index(head.command) + 1 :])
    try:
        return int(module.run(args))
    except (EdgeloadError, ValueError, OSError) as exc:
        # ValueError and OSError: what a user's input causes below edgeload's own checks
        # (a file that cannot be read, a number that is not one).
        if isinstance(exc, BrokenPipeError):
            # `edgeload probe | head`: the reader left; not an error worth a traceback.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        return _fail(head.command, exc)
    except KeyboardInterrupt:
        print(f"edgeload {head.command}: interrupted", file=sys.stderr)
        return 130
