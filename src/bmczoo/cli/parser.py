"""The argument parser: one function per subcommand, and per group of ``fit``'s options."""

from __future__ import annotations

import argparse

from .components import (
    DEFAULT_PRIOR,
    likelihood_help,
    likelihood_opt_help,
    likelihoods,
    prior_help,
    priors,
)
from .errors import CLIError
from .. import __version__
from .fit import cmd_fit
from .info import cmd_info
from .reproduce import cmd_reproduce
from .saved import cmd_predict, cmd_recommend


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``bmczoo: error: ...``, exit code 2)
    like every other error of the command line, instead of argparse's usage block, pointing
    to the help of the subcommand they are about."""

    def error(self, message):
        # prog is "bmczoo" or "bmczoo SUBCOMMAND"
        raise CLIError(message, command=self.prog.partition(" ")[2])

    def parse_args(self, args=None, namespace=None):
        """argparse's, but an unrecognised argument of a subcommand is that subcommand's
        error (argparse reports it from the top-level parser)."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = getattr(self, "commands", {})
            parser = commands.get(getattr(namespace, "command", None), self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: X)`` to every option's help unless the help already states its
    default, or the default is None / False / empty (nothing to show)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        # identity checks: a default of 0 is shown, False (a flag) is not
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or (isinstance(default, list) and not default)
        ):
            return text
        if not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    """The parser of the command line: ``fit``, ``predict``, ``recommend``, ``reproduce``,
    ``info``, and ``--version``."""
    p = _Parser(
        prog="bmczoo",
        description="Bayesian low-rank matrix completion (Alquier, Cottet, Chopin, Rousseau "
        "priors) with conjugate Gibbs sampling on JAX.",
    )
    p.add_argument("--version", action="version", version=f"bmczoo {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_fit, _add_predict, _add_recommend, _add_reproduce, _add_info):
        add(sub)
    p.commands = sub.choices  # the subcommands' parsers by name, for their errors
    return p


def _add_info(sub) -> None:
    """The ``info`` subcommand."""
    i = sub.add_parser(
        "info",
        help="versions, devices, the sweep's hot path and the compiled kernel (for bug reports)",
        description="Print bmczoo's version, Python's and the dependencies', JAX's backend and "
        "devices, the Gibbs sweep's hot path and whether the compiled Gram kernel loaded "
        "(BMCZOO_NATIVE: unset or auto, 0 off, 1 required). The same as bmczoo.show_config().",
        formatter_class=_HelpFormatter,
    )
    _add_debug_option(i)
    i.set_defaults(func=cmd_info)


def _add_debug_option(parser) -> None:
    """``--debug`` and ``--no-compilation-cache``, which every subcommand takes (``parser``:
    the subcommand's parser or one of its argument groups)."""
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the Python traceback of an error (also BMCZOO_DEBUG=1)",
    )
    parser.add_argument(
        "--no-compilation-cache",
        dest="compilation_cache",
        action="store_false",
        help="do not use JAX's persistent compilation cache (default: on, in ~/.cache/bmczoo/jax "
        "or $BMCZOO_CACHE/jax, unless JAX_COMPILATION_CACHE_DIR names another folder)",
    )


# fit's option groups in the order --help shows them: the everyday options first, the
# Gibbs sampler's internals last
_FIT_GROUPS = (
    ("data", None),
    ("model", None),
    ("method and sampling", None),
    ("outputs", "every path is checked before the data is read"),
    (
        "top-N evaluation",
        "the test split, and each user's items without a training pair ranked by the fit, "
        "its held-out pairs the relevant ones (bmczoo.evaluation.ranking_metrics)",
    ),
    ("side information", "--prior normal-wishart: features of the users and items"),
    ("troubleshooting", None),
    (
        "Gibbs sampler internals",
        "every choice samples the same posterior; the defaults are the tested ones",
    ),
)


def _add_fit(sub) -> None:
    """The ``fit`` subcommand, its options in groups (:data:`_FIT_GROUPS`)."""
    f = sub.add_parser(
        "fit",
        help="fit a model and print the RMSE",
        usage="bmczoo fit [--data SPEC] [--prior NAME] [-K K] [--method NAME] [OPTION ...]",
        description="Fit the low-rank model. Ratings data is split into train and test "
        "(--test-fraction, --split) and the last line is test_rmse=<float> (test_ndcg@K=<float> "
        "for --likelihood one-class); with the simulator (sim:M) "
        "the last line is theta_rmse=<float> over all M^2 entries. An error is one line on "
        "stderr and exit code 2.",
        formatter_class=_HelpFormatter,
    )
    data, model, method, out, topn, side, trouble, internals = (
        f.add_argument_group(title, text) for title, text in _FIT_GROUPS
    )
    _fit_data_options(data)
    _fit_model_options(model)
    _fit_method_options(method)
    _fit_output_options(out)
    _fit_topn_options(topn)
    _fit_side_options(side)
    _add_debug_option(trouble)
    _add_settings_flags(internals, "Gibbs sampler internals")
    f.set_defaults(func=cmd_fit)


def _fit_data_options(f) -> None:
    """What is fitted: ``--data``, the test fraction and ``--binarize`` (the rest of the
    split: :func:`_fit_topn_options`)."""
    f.add_argument(
        "--data",
        default="sim:100",
        metavar="SPEC",
        help="ml-100k | ml-1m | ... (downloaded once into the cache) | PATH: a ratings file of "
        "any name (lines user item rating [timestamp], separated by TAB, ',', ';' or '::'; an "
        "optional header), a folder holding u.data / ratings.dat / ratings.csv, or a MovieLens "
        ".zip | sim:M: the paper's simulation, an M x M matrix (default: sim:100)",
    )
    f.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        metavar="F",
        help="ratings data: fraction of the ratings held out as the test set, in (0, 1)",
    )
    f.add_argument(
        "--binarize",
        type=float,
        default=None,
        metavar="THRESHOLD",
        help="replace every rating by 1 if >= THRESHOLD, else 0 (train and test), for --likelihood "
        "probit (default: none, ratings as given)",
    )


def _fit_model_options(f) -> None:
    """The prior, the latent dimension, the observation model and the biases."""
    f.add_argument("--prior", default=DEFAULT_PRIOR, choices=sorted(priors()), help=prior_help())
    f.add_argument(
        "--hyper",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a hyper-parameter of the prior, repeatable; default: the prior's (under --prior)",
    )
    f.add_argument("-K", type=int, default=5, help="latent dimension (default 5)")
    f.add_argument(
        "--likelihood",
        default="tempered",
        choices=sorted(likelihoods()),
        help=likelihood_help(),
    )
    f.add_argument(
        "--likelihood-opt",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=likelihood_opt_help(),
    )
    f.add_argument(
        "--biases",
        action="store_true",
        help="add row and column biases b_i + c_j with inverse-gamma variances",
    )


def _fit_side_options(f) -> None:
    """The Normal-Wishart prior's feature links, feature-driven biases and the ratings'
    time context."""
    f.add_argument(
        "--features",
        nargs="?",
        const="auto",
        default=None,
        choices=["rows", "cols", "both", "auto"],
        help="link the users' (rows) and/or items' (cols) prior means to the data's side tables "
        "(Macau): the MovieLens side files beside the ratings; auto (also the flag alone): "
        "every side that has a table (default: no features)",
    )
    f.add_argument(
        "--implicit",
        default=None,
        choices=["rows", "cols", "both"],
        help="implicit-feedback features of the same link (SVD++): for a user the items it "
        "rated, for an item the users who rated it (default: none)",
    )
    f.add_argument(
        "--bias-features",
        action="store_true",
        help="biases (implies --biases) whose prior means are linear in the features of "
        "--features / --implicit, so that a user or item without ratings gets the bias its "
        "features predict",
    )
    f.add_argument(
        "--context",
        nargs="?",
        const="time",
        default=None,
        metavar="GROUPS",
        help="gibbs: per-rating time effects from the ratings' timestamps (a 4th, integer "
        "column of the ratings file), each group with its own precision: 'time' (also the "
        "flag alone) for all of time_bin, item_time_bin, user_day, user_dev, or a "
        "comma-separated list of them (default: none)",
    )
    f.add_argument(
        "--time-bins",
        type=int,
        default=None,
        metavar="B",
        help="time as a mode: the user x item x time-bin array (the timestamps, a 4th column, "
        "cut into B equal-count bins) and the CP tensor model (default: the matrix)",
    )


def _fit_method_options(f) -> None:
    """The method, its options, the seed and the precision."""
    f.add_argument(
        "--method",
        default="gibbs",
        choices=["gibbs", "vb", "svi", "map", "nuts"],
        help="gibbs (default), vb (closed-form variational Bayes), svi (NumPyro AutoNormal), "
        "map (AutoDelta), nuts (NumPyro NUTS: small problems only)",
    )
    _add_settings_flags(f, "method and sampling")
    f.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the simulation and of the fit"
    )
    f.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default=None,
        help="floating-point precision (default: float32, or float64 when JAX_ENABLE_X64 is "
        "set); float64 is slower but avoids the failed Cholesky factorisations float32 can hit",
    )


def _fit_output_options(f) -> None:
    """``--out``, ``--save``, checkpoints, what is kept for them and the progress bar."""
    f.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="folder for posterior.nc (ArviZ), predictions.csv (the test ratings with their "
        "predictions, in the dataset's ids) and report/ (diagnostics figures and tables) "
        "(default: none, nothing written)",
    )
    f.add_argument(
        "--save",
        default=None,
        metavar="FILE.npz",
        help="save the fitted model there (no pickle) for bmczoo predict / recommend, which "
        "then give exactly the fit's predictions (default: none)",
    )
    _add_settings_flags(f, "outputs")
    f.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the outputs of an earlier fit in --out, an existing --save file, and a "
        "--checkpoint file that is not a bmczoo checkpoint (a checkpoint is always resumed)",
    )
    f.add_argument("--quiet", action="store_true", help="no progress bar")


def _fit_topn_options(f) -> None:
    """The per-user test split (``--split``, ``--test-count``, ``--split-seed``),
    ``--top-n`` and ``--top-n-draws``."""
    f.add_argument(
        "--split",
        default="uniform",
        choices=["uniform", "per-user"],
        help="ratings data: uniform holds out --test-fraction of all the ratings; per-user "
        "--test-fraction (or --test-count) of each user's pairs, at most all but one (the "
        "split of top-N evaluation)",
    )
    f.add_argument(
        "--test-count",
        type=int,
        default=None,
        metavar="N",
        help="--split per-user: hold out N pairs of each user instead of a fraction (default: "
        "none, --test-fraction)",
    )
    f.add_argument(
        "--split-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the test split (apart from --seed: fits of other seeds share the split)",
    )
    f.add_argument(
        "--top-n",
        type=int,
        default=None,
        metavar="K",
        help="print precision, recall, NDCG and MAP at K and AUC of the posterior mean's "
        "rankings (and write them to --out: topn.json, topn_per_user.csv); --split per-user "
        "is the usual split for it (default: none; 10 with --likelihood one-class, whose last "
        "line is then test_ndcg@K= instead of test_rmse=)",
    )
    f.add_argument(
        "--top-n-draws",
        type=int,
        default=None,
        metavar="N",
        help="the posterior of each user's metrics from N rankings by one posterior draw "
        "each (bmczoo.evaluation.metric_posterior), its mean and central 90%% interval; 0: "
        "none; --method map has no posterior (default: 20)",
    )


def _add_settings_flags(f, group: str) -> None:
    """The options of the methods' settings shown in ``group``: flag, type, choices, help
    and default read from the settings fields (:func:`bmczoo.cli.options.settings_flags`);
    left out, an option keeps the method's default."""
    from .options import settings_flags

    for flag in settings_flags().values():
        if flag.group != group:
            continue
        kw = dict(default=None, dest=flag.dest, help=flag.help.replace("%", "%%"))
        if flag.kind == "switch":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw.update(type=flag.kind, metavar=flag.metavar, choices=flag.choices)
        f.add_argument(flag.flag, **kw)


def _add_predict(sub) -> None:
    """The ``predict`` subcommand."""
    pr = sub.add_parser(
        "predict",
        help="predict entries with a saved model: mean, sd and interval",
        description="Posterior predictive mean, sd and central --prob interval at the (user, "
        "item) pairs of --entries, with a model written by 'bmczoo fit --save', in the dataset's "
        "own ids. Output: CSV user_id,item_id,mean,sd,loP,hiP on stdout (or --out); a probit "
        "model adds p1 = P(1), an ordered-probit model one column p_LEVEL per level (its "
        "predictive level probabilities). An error is one line on stderr and exit code 2.",
        formatter_class=_HelpFormatter,
    )
    pr.add_argument(
        "--model", required=True, metavar="FILE.npz", help="a model saved by bmczoo fit --save"
    )
    pr.add_argument(
        "--entries",
        required=True,
        metavar="PAIRS.csv",
        help="lines 'user_id item_id' (TAB, ',' or spaces between; an optional header line; "
        "further fields ignored); a model fitted with --context: 'user_id item_id timestamp' "
        "or 'user_id item_id rating timestamp'",
    )
    pr.add_argument(
        "--prob", type=float, default=0.9, help="probability of the central predictive interval"
    )
    pr.add_argument(
        "--out", default=None, metavar="FILE.csv", help="write the CSV there (default: stdout)"
    )
    pr.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    _add_debug_option(pr)
    pr.set_defaults(func=cmd_predict)


def _add_recommend(sub) -> None:
    """The ``recommend`` subcommand."""
    rc = sub.add_parser(
        "recommend",
        help="top-N items of users with a saved model",
        description="The top -n items of each --user (dataset ids in and out), by posterior "
        "mean, upper credible bound (--by upper) or one posterior draw (--by thompson), leaving "
        "out the items the user rated in training. Output: CSV user_id,rank,item_id,score (score "
        "on the data scale, unclipped). Needs the factor draws for Gibbs/NUTS models (fit with "
        "--store-factors yes on large data).",
        formatter_class=_HelpFormatter,
    )
    rc.add_argument(
        "--model", required=True, metavar="FILE.npz", help="a model saved by bmczoo fit --save"
    )
    rc.add_argument(
        "--user",
        required=True,
        type=int,
        action="append",
        metavar="ID",
        help="a user id of the dataset, repeatable",
    )
    rc.add_argument("-n", type=int, default=10, help="number of items per user")
    rc.add_argument(
        "--by",
        choices=["mean", "upper", "thompson", "top-k"],
        default="mean",
        help="ranking score: the posterior mean, the upper end of the --prob interval, one "
        "posterior draw, or the posterior probability of being in the top -n (from "
        "--num-draws draws)",
    )
    rc.add_argument(
        "--prob", type=float, default=0.9, help="--by upper: probability of the central interval"
    )
    rc.add_argument(
        "--seed", type=int, default=0, help="--by thompson / top-k: seed of the posterior draws"
    )
    rc.add_argument(
        "--num-draws", type=int, default=50, help="--by top-k: posterior draws per user"
    )
    rc.add_argument(
        "--include-seen", action="store_true", help="also rank the items the user rated in training"
    )
    _add_debug_option(rc)
    rc.set_defaults(func=cmd_recommend)


def _add_reproduce(sub) -> None:
    """The ``reproduce`` subcommand."""
    r = sub.add_parser(
        "reproduce",
        help="rerun one of the paper's experiments and print its table beside ours",
        description="Rerun an experiment of the paper: simulation-m (Tables 2-3), simulation-K "
        "(Tables 4-5) or movielens (Table 6, plus rows the paper does not have: the "
        "Normal-Wishart prior alone and with learned noise and biases, '—' in the paper column). "
        "Hyper-parameters are chosen on a validation split of the training data (grid x1/2, x1, "
        "x2 around the paper's value; for the discrete prior also the Gibbs start, slab or "
        "spike); the paper's own values are run too. Results are cached per fit, so an "
        "interrupted run resumes.",
        formatter_class=_HelpFormatter,
    )
    r.add_argument("experiment", choices=["simulation-m", "simulation-K", "movielens"])
    r.add_argument(
        "--quick", action="store_true", help="small version: one dataset, short chains (minutes)"
    )
    r.add_argument("--out", default=None, help="cache folder (default ~/.cache/bmczoo/experiments)")
    r.add_argument(
        "--data-dir",
        default=None,
        help="movielens: folder with the extracted archives (ml-100k/u.data, ml-1m/ratings.dat, "
        "...) (default: none, the archives are downloaded once into the cache)",
    )
    r.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run N fits at a time in separate processes (default 1; same results for any N)",
    )
    r.add_argument("--quiet", action="store_true", help="print only the final table")
    r.add_argument(
        "--priors",
        default=None,
        metavar="NAMES",
        help="simulation-m / simulation-K: only these priors' rows, comma-separated, e.g. discrete "
        "(default: all rows)",
    )
    r.add_argument(
        "--column-moves",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the Gibbs fits of the discrete, inverse-gamma and gamma priors end each sweep with "
        "the column moves; --no-column-moves: the paper's plain sweep for every prior, cached "
        "apart from the runs with the moves",
    )
    _add_debug_option(r)
    r.set_defaults(func=cmd_reproduce)
