"""Command line: ``bmczoo fit`` and ``bmczoo reproduce``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

__all__ = ["main"]

_DEFAULT_PRIOR = "discrete"

_MOVIELENS = {"ml-100k": "100k", "ml-1m": "1m", "ml-10m": "10m", "ml-20m": "20m", "ml-25m": "25m",
              "ml-32m": "32m", "ml-latest-small": "latest-small"}


class CLIError(Exception):
    """An error reported as one line, without a traceback."""


def _priors() -> dict:
    """The zoo's priors by command-line name (:func:`bmczoo.priors.registry`)."""
    from .priors import registry

    return registry()


def _prior_defaults(cls) -> dict:
    """The hyper-parameters ``bmczoo fit --prior NAME`` uses when no ``--hyper`` is given:
    the class's ``cli_defaults`` over its dataclass defaults (None: no default)."""
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        out[f.name] = cls.cli_defaults.get(f.name, default)
    return out


def _fmt_default(v) -> str:
    if v is None:
        return "?"
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _prior_help() -> str:
    """``--prior`` help: each prior of the registry with its default hyper-parameters."""
    parts = []
    for name, cls in sorted(_priors().items()):
        hyper = ", ".join(f"{k}={_fmt_default(v)}" for k, v in _prior_defaults(cls).items())
        parts.append(f"{name} ({hyper})" if hyper else name)
    text = (f"prior on the column scales gamma_h (default {_DEFAULT_PRIOR}), with its default hyper-parameters: "
            + "; ".join(parts))
    return text.replace("%", "%%")  # argparse formats help strings with %


def _make_prior(name: str, hyper: dict[str, float]):
    """The prior ``name`` with its class defaults (``from_cli``) updated by ``hyper``."""
    cls = _priors()[name]
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(hyper) - set(fields))
    if unknown:
        raise CLIError(f"--hyper: the {name} prior has no hyper-parameter {', '.join(unknown)}; "
                       f"it has {', '.join(fields)}")
    return cls.from_cli(**hyper)


def _parse_hyper(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CLIError(f"--hyper expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise CLIError(f"--hyper {name}: {value!r} is not a number") from None
    return out


def _load(spec: str, seed: int):
    """Returns (train, test, truth) for a data spec."""
    from . import datasets

    if spec.startswith("sim:"):
        try:
            m = int(spec[4:])
        except ValueError:
            raise CLIError(f"--data sim:M needs an integer M, got {spec!r}") from None
        sim = datasets.simulate_paper(m, seed=seed)
        return sim.train, None, sim
    name = _MOVIELENS.get(spec, spec if spec in datasets.DATASETS else None)
    if name is not None:
        data = datasets.load_movielens(name)
    else:
        path = Path(spec)
        if not path.exists():
            raise CLIError(f"--data {spec}: no such file or folder (or MovieLens name: {', '.join(_MOVIELENS)})")
        name = {"u.data": "100k", "ratings.dat": "1m", "ratings.csv": "latest-small"}.get(path.name)
        if name is None and path.is_file():
            raise CLIError(f"--data {spec}: expected a MovieLens u.data, ratings.dat or ratings.csv file")
        data = datasets.load_movielens(name or "100k", path=path) if name else _load_folder(path)
    train, test = data.split(0.2, seed=0)
    return train, test, None


def _load_folder(path: Path):
    from . import datasets

    for fname, name in (("u.data", "100k"), ("ratings.dat", "1m"), ("ratings.csv", "latest-small")):
        if (path / fname).exists():
            return datasets.load_movielens(name, path=path / fname)
    raise CLIError(f"--data {path}: no u.data, ratings.dat or ratings.csv in this folder")


def _cmd_fit(args) -> int:
    import numpy as np

    import bmczoo as bmc

    prior = _make_prior(args.prior, _parse_hyper(args.hyper))
    train, test, sim = _load(args.data, args.seed)
    print(f"data: {train!r} train" + (f", {test!r} test" if test is not None else ""))
    print(f"prior: {prior}, K={args.K}, method={args.method}")
    predict = None
    if sim is not None:
        m = sim.theta.shape[0]
        predict = np.divmod(np.arange(m * m), m)
    # only the method settings given on the command line: fit names an option of another method
    given = {name: getattr(args, dest) for name, dest in _METHOD_OPTIONS.items() if getattr(args, dest) is not None}
    fit = bmc.fit(train, K=args.K, prior=prior, method=args.method, seed=args.seed, test=test, predict=predict,
                  progress_bar=not args.quiet, **given)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from . import diagnostics

        fit.to_arviz().to_netcdf(out / "posterior.nc")
        diagnostics.report(fit, out / "report")
        if test is not None:
            np.savetxt(out / "predictions.csv", np.column_stack([test.rows, test.cols, fit.predict(test.rows, test.cols)]),
                       delimiter=",", header="row,col,prediction", comments="", fmt=["%d", "%d", "%.6f"])
        print(f"wrote {out}/")
    if sim is not None:
        print(f"theta_rmse={fit.rmse_theta(sim.theta):.4f}")
    else:
        print(f"test_rmse={fit.rmse(test):.4f}")
    return 0


# bmc.fit's name of each method-specific option -> argparse dest
_METHOD_OPTIONS = {
    "num_warmup": "num_warmup", "num_samples": "num_samples", "thinning": "thinning", "num_chains": "chains",
    "max_iter": "max_iter", "num_steps": "num_steps", "overrelax": "overrelax", "checkpoint": "checkpoint",
    "checkpoint_every": "checkpoint_every",
}


def _cmd_reproduce(args) -> int:
    from .experiments import format_table, run_experiment

    if args.jobs < 1:
        raise CLIError(f"--jobs must be at least 1, got {args.jobs}")
    out = Path(args.out) if args.out else None
    print(f"reproducing {args.experiment}" + (" (quick)" if args.quick else "") + "; each finished fit is cached, "
          "a rerun resumes", flush=True)
    rows = run_experiment(args.experiment, quick=args.quick, out=out, progress=not args.quiet,
                          data_dir=args.data_dir, jobs=args.jobs)
    print()
    print(format_table(rows))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bmczoo",
        description="Bayesian low-rank matrix completion (Alquier, Cottet, Chopin, Rousseau priors) "
        "with conjugate Gibbs sampling on JAX.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser(
        "fit",
        help="fit a model and print the RMSE",
        description="Fit the low-rank model. With MovieLens data the ratings are split 80/20 "
        "(numpy default_rng(0)) and the last line is test_rmse=<float>; with the simulator "
        "(sim:M) the last line is theta_rmse=<float> over all M^2 entries.",
    )
    f.add_argument("--data", default="sim:100",
                   help="ml-100k | ml-1m | ... | PATH to u.data / ratings.dat / ratings.csv | sim:M "
                   "(the paper's simulation with an M x M matrix; default sim:100)")
    f.add_argument("--prior", default=_DEFAULT_PRIOR, choices=sorted(_priors()), help=_prior_help())
    f.add_argument("--hyper", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyper-parameter of the prior, repeatable; the others keep the prior's defaults "
                   "(listed under --prior: the paper's values)")
    f.add_argument("--method", default="gibbs", choices=["gibbs", "vb", "svi", "map", "nuts"],
                   help="gibbs (default), vb (closed-form variational Bayes), svi (NumPyro AutoNormal), "
                   "map (AutoDelta), nuts (NumPyro NUTS: small problems only)")
    f.add_argument("-K", type=int, default=5, help="latent dimension (default 5)")
    # method-specific options default to the method's own settings (bmc.inference.settings)
    f.add_argument("--num-warmup", type=int, default=None, help="gibbs/nuts: warm-up sweeps (default 100)")
    f.add_argument("--num-samples", type=int, default=None, help="gibbs/nuts: sweeps after warm-up (default 900)")
    f.add_argument("--thinning", type=int, default=None, help="gibbs/nuts: keep every N-th draw (default 10)")
    f.add_argument("--chains", type=int, default=None,
                   help="gibbs/nuts: chains; vb: random starts, the best ELBO kept (default 1)")
    f.add_argument("--max-iter", type=int, default=None, help="vb: maximum iterations (default 200)")
    f.add_argument("--num-steps", type=int, default=None, help="svi/map: optimisation steps (default 2000)")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--overrelax", type=float, default=None, metavar="RHO",
                   help="gibbs: over-relaxed row updates, RHO in (-1, 1) (default 0: plain Gibbs; -0.7 mixes "
                   "faster)")
    f.add_argument("--checkpoint", default=None, metavar="FILE.npz",
                   help="gibbs/vb: save the state there every --checkpoint-every iterations and on Ctrl-C; "
                        "rerun the same command to resume")
    f.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="gibbs/vb: iterations between checkpoints (default 100)")
    f.add_argument("--out", default=None, help="folder for posterior.nc (ArviZ), predictions.csv "
                   "(MovieLens data) and report/ (diagnostics figures and summary tables)")
    f.add_argument("--quiet", action="store_true", help="no progress bar")
    f.set_defaults(func=_cmd_fit)

    r = sub.add_parser(
        "reproduce",
        help="rerun one of the paper's experiments and print its table beside ours",
        description="Rerun an experiment of the paper: simulation-m (Tables 2-3), simulation-K (Tables 4-5) "
        "or movielens (Table 6). Hyper-parameters are chosen on a validation split of the training data "
        "(grid x1/2, x1, x2 around the paper's value; for the discrete prior also the Gibbs start, slab or "
        "spike); the paper's own values are run too. Results are cached per fit, so an interrupted run resumes.",
    )
    r.add_argument("experiment", choices=["simulation-m", "simulation-K", "movielens"])
    r.add_argument("--quick", action="store_true", help="small version: one dataset, short chains (minutes)")
    r.add_argument("--out", default=None, help="cache folder (default ~/.cache/bmczoo/experiments)")
    r.add_argument("--data-dir", default=None,
                   help="movielens: folder with the extracted archives (ml-100k/u.data, ml-1m/ratings.dat, ...)")
    r.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run N fits at a time in separate processes (default 1; same results for any N)")
    r.add_argument("--quiet", action="store_true", help="print only the final table")
    r.set_defaults(func=_cmd_reproduce)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CLIError, ValueError, FileNotFoundError, FloatingPointError) as e:
        print(f"bmczoo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        # with --checkpoint the message says where the work was saved
        print(f"bmczoo: interrupted{': ' + str(e) if str(e) else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
