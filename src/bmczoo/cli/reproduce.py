"""``bmczoo reproduce``: one of the paper's experiments."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .errors import CLIError
from .paths import probe_writable


def cmd_reproduce(args) -> int:
    """Run ``bmczoo reproduce``: the experiment's fits (cached) and its table."""
    from ..experiments import format_table, run_experiment

    if args.jobs < 1:
        raise CLIError(f"--jobs must be at least 1, got {args.jobs}")
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:  # a cache folder: its finished fits are reused, never overwritten
        if out.exists() and not out.is_dir():
            raise CLIError(f"--out {out}: an existing file; --out names the cache folder")
        probe_writable(out, "--out", out)
    print(
        f"reproducing {args.experiment}"
        + (" (quick)" if args.quick else "")
        + "; each finished fit is cached, "
        "a rerun resumes",
        flush=True,
    )
    settings = None
    if not args.column_moves:
        from ..experiments.tasks import FULL, QUICK

        settings = dataclasses.replace(QUICK if args.quick else FULL, column_moves=False)
    priors = [p.strip() for p in args.priors.split(",")] if args.priors else None
    # a bad --priors is the runner's ValueError (it names the rows there are): one line
    rows = run_experiment(
        args.experiment,
        quick=args.quick,
        out=out,
        progress=not args.quiet,
        data_dir=args.data_dir,
        jobs=args.jobs,
        settings=settings,
        priors=priors,
    )
    print()
    print(format_table(rows))
    return 0
