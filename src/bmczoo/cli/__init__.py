"""Command line: ``bmczoo fit``, ``predict``, ``recommend``, ``reproduce`` and ``info``.

Importing this package imports no JAX (``bmczoo --help`` stays fast, and the console command
installs its Ctrl-C handling before the long imports): the subcommands import the library
inside their functions.
"""

from __future__ import annotations

import os
import sys

from .errors import error_line
from .interrupts import INTERRUPTS, interrupted_line
from .parser import build_parser

__all__ = ["main", "build_parser"]


def _enable_compilation_cache(args) -> None:
    """The persistent compilation cache for this command, unless turned off or configured
    already (JAX_COMPILATION_CACHE_DIR / ``jax.config``: that folder is kept)."""
    if not getattr(args, "compilation_cache", False):
        return
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    from .._cache import enable_compilation_cache

    try:
        enable_compilation_cache()
    except OSError as e:  # an unwritable cache folder costs time, not the run
        print(f"bmczoo: note: compilation cache off ({e})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, 2 on any error, 130 on Ctrl-C).

    Every error is one line on stderr, ``bmczoo: error: ...``, without a traceback (an
    error in the arguments ends with ``(see 'bmczoo SUBCOMMAND --help')``), unless
    ``--debug`` is given or ``BMCZOO_DEBUG`` is set to a non-empty value other than 0.
    Called without ``argv`` (the console command), Ctrl-C ends the process from a watcher
    thread (:class:`Interrupts`): one line and exit code 130 at any moment."""
    debug = os.environ.get("BMCZOO_DEBUG", "") not in ("", "0")
    if argv is None:
        INTERRUPTS.install()
    INTERRUPTS.args, INTERRUPTS.phase, INTERRUPTS.metric = None, "start", ""
    args = None
    try:
        args = build_parser().parse_args(argv)
        INTERRUPTS.args = args
        debug = debug or getattr(args, "debug", False)
        _enable_compilation_cache(args)
        return args.func(args)
    except KeyboardInterrupt as e:
        line = interrupted_line(e)
        if INTERRUPTS.installed:  # no teardown racing XLA's threads
            INTERRUPTS.exit(line)
        print(f"bmczoo: {line}", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the command line never ends in a traceback
        if debug:
            raise
        print(f"bmczoo: error: {error_line(e, _help_command(args))}", file=sys.stderr)
        return 2


def _help_command(args) -> str | None:
    """The subcommand whose ``--help`` an error line points to: the one run, until its
    outputs are being written (an error then is not about the arguments)."""
    if args is None or INTERRUPTS.phase == "outputs":
        return None
    return getattr(args, "command", None)
