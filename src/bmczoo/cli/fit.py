"""``bmczoo fit``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

from . import loading, outputs, topn
from .components import make_likelihood, make_prior, parse_hyper, priors
from .errors import CLIError
from .interrupts import INTERRUPTS
from .options import given_settings, option_flag, option_setting
from .paths import check_checkpoint, check_out_dir, check_save

_FEATURE_SIDES = {
    "rows": ("row_features",),
    "cols": ("col_features",),
    "both": ("row_features", "col_features"),
}


def _check_link_options(args, prior) -> None:
    """``--features`` / ``--implicit`` need a prior with feature links (the Normal-Wishart
    prior: the link is one of its components); checked before the data is read."""
    if args.features is None and args.implicit is None:
        return
    if not prior.link_sites:
        given = " and ".join(
            f"--{o}" for o in ("features", "implicit") if getattr(args, o) is not None
        )
        linked = " or ".join(name for name, cls in sorted(priors().items()) if cls.link_sites)
        raise CLIError(
            f"{given} need --prior {linked} (the feature link of its rows' prior mean: the "
            f"documentation's Priors page, 'Side information, implicit feedback and cold "
            f"start'), got --prior {args.prior}"
        )


def _link_keywords(args, train) -> dict:
    """The feature-link keywords (``row_features``, ``col_features``, ``implicit``) of
    ``--features`` (the data's side tables) and ``--implicit``; ``CLIError`` when a
    requested side has no table."""
    if args.features is None and args.implicit is None:
        return {}
    kw = {}
    if args.features is not None:
        names = {"row_features": "rows (users)", "col_features": "columns (items)"}
        if args.features == "auto":
            sides = tuple(n for n in names if getattr(train, n) is not None)
            if not sides:
                raise CLIError(
                    "--features: the data has no feature tables (the MovieLens loaders read the "
                    "side files beside the ratings: u.user/u.item, users.dat/movies.dat, "
                    "movies.csv); for implicit feedback only, use --implicit"
                )
        else:
            sides = _FEATURE_SIDES[args.features]
            missing = [names[n] for n in sides if getattr(train, n) is None]
            if missing:
                have = [
                    a
                    for a, n in (("rows", "row_features"), ("cols", "col_features"))
                    if getattr(train, n) is not None
                ]
                raise CLIError(
                    f"--features {args.features}: the data has no feature table for its "
                    f"{' and '.join(missing)}"
                    + (
                        f"; it has one for its {', '.join(have)}: --features {' '.join(have)}"
                        if have
                        else ""
                    )
                )
        kw.update({n: True for n in sides})
    if args.implicit is not None:
        kw["implicit"] = True if args.implicit == "both" else args.implicit
    return kw


def _biases(args, link: dict):
    """``bmc.fit``'s ``biases=``: ``--biases`` (True/False), or with ``--bias-features``
    biases whose prior means are linear in the link's features (the same sides)."""
    if not getattr(args, "bias_features", False):
        return args.biases
    import bmczoo as bmc

    return bmc.offsets.Biases(**link)


class _Paths(NamedTuple):
    """The output paths of ``fit`` (None: not asked for), checked before the data is read."""

    out: Path | None
    save: Path | None


def _check_arguments(args):
    """``(prior, likelihood, method options)`` of the command line; every cheap argument is
    checked before the data is read."""
    import numpy as np

    prior = make_prior(args.prior, parse_hyper(args.hyper))
    _check_link_options(args, prior)
    if getattr(args, "bias_features", False) and args.features is None and args.implicit is None:
        raise CLIError(
            "--bias-features needs --features and/or --implicit (the features of the biases' "
            "prior means are those of the prior's link)"
        )
    likelihood = make_likelihood(
        args.likelihood, parse_hyper(args.likelihood_opt, option="--likelihood-opt")
    )
    if not 0.0 < args.test_fraction < 1.0:
        raise CLIError(f"--test-fraction must be in (0, 1), got {args.test_fraction:g}")
    _check_split(args)
    if args.K < 1:
        raise CLIError(f"-K (the latent dimension) must be at least 1, got {args.K}")
    if args.seed < 0:
        raise CLIError(f"--seed must be >= 0, got {args.seed}")
    if args.binarize is not None and not np.isfinite(args.binarize):
        raise CLIError(f"--binarize THRESHOLD must be a finite number, got {args.binarize:g}")
    return prior, likelihood, _method_settings(args, prior)


def _check_split(args) -> None:
    """``--split``, ``--test-count`` and ``--split-seed``, before the data is read."""
    if args.test_count is not None:
        if args.split != "per-user":
            raise CLIError("--test-count N (pairs held out per user) needs --split per-user")
        if args.test_count < 1:
            raise CLIError(f"--test-count must be at least 1, got {args.test_count}")
    if args.split_seed < 0:
        raise CLIError(f"--split-seed must be >= 0, got {args.split_seed}")
    if args.data.startswith("sim:") and (args.split != "uniform" or args.test_count is not None):
        raise CLIError(
            "--split per-user splits ratings data; the simulator (sim:M) is scored on the "
            "whole matrix"
        )


def _split(args) -> loading.Split:
    """The test split of ``--split``, ``--test-fraction``, ``--test-count``, ``--split-seed``."""
    return loading.Split(
        args.test_fraction, args.split == "per-user", args.test_count, args.split_seed
    )


def _check_paths(args) -> _Paths:
    """Every output path, checked before the data is read and the fit runs."""
    out = Path(args.out).expanduser() if args.out else None
    if out is not None:
        check_out_dir(out, args.overwrite)
    if args.checkpoint:
        check_checkpoint(Path(args.checkpoint).expanduser(), args.overwrite)
    save_path = Path(args.save).expanduser() if args.save else None
    if save_path is not None:
        check_save(save_path, args.overwrite)
    return _Paths(out, save_path)


def _read_data(args) -> loading.Loaded:
    """The data of ``--data``, binarized when ``--binarize`` is given."""
    loaded = loading.load(
        args.data,
        args.seed,
        _split(args),
        side_info=args.features is not None,
        context=_context_groups(args),
        time_bins=getattr(args, "time_bins", None),
    )
    if args.binarize is not None:
        loaded = loaded._replace(
            train=loading.binarize(loaded.train, args.binarize),
            test=loading.binarize(loaded.test, args.binarize),
        )
    return loaded


def _context_groups(args) -> tuple[str, ...]:
    """The time groups of ``--context`` (empty without it)."""
    from ..data import TIME_GROUPS

    if args.context is None:
        return ()
    if args.data.startswith("sim:"):
        raise CLIError("--context needs ratings with timestamps; the simulator has none")
    if args.method not in ("gibbs", "vb", "nuts"):
        raise CLIError(
            f"--context is fitted by --method gibbs, vb and nuts only, not {args.method}"
        )
    groups = TIME_GROUPS if args.context == "time" else tuple(args.context.split(","))
    bad = [g for g in groups if g not in TIME_GROUPS]
    if bad or not groups:
        raise CLIError(
            f"--context {args.context}: choose 'time' or groups among {', '.join(TIME_GROUPS)}"
        )
    return groups


def _check_binary(likelihood, train) -> None:
    """A binary likelihood needs ratings 0/1."""
    import numpy as np

    if likelihood.binary:
        vals = np.asarray(train.values)
        if not np.all((vals == 0) | (vals == 1)):
            raise CLIError(
                "--likelihood probit needs binary ratings 0/1; add --binarize THRESHOLD (e.g. "
                "--binarize 4: ratings >= 4 become 1, the others 0)"
            )


def _announce(args, prior, likelihood, loaded: loading.Loaded) -> None:
    """The ``data:`` and ``prior:`` lines printed before the fit."""
    train, test = loaded.train, loaded.test
    print(
        f"data: {train!r} train"
        + (f", {test!r} test ({_split(args).describe()})" if test is not None else "")
    )
    model = "".join(
        [
            f", likelihood: {likelihood.name}" if args.likelihood != "tempered" else "",
            ", biases" if args.biases and not getattr(args, "bias_features", False) else "",
            ", feature-driven biases" if getattr(args, "bias_features", False) else "",
            f", context: {args.context}" if args.context is not None else "",
        ]
    )
    print(
        f"prior: {prior}, K={args.K}, method={args.method}{model}"
        + (f", binarized at >= {args.binarize:g}" if args.binarize is not None else "")
    )


def _run_fit(args, prior, likelihood, loaded: loading.Loaded, given: dict, biases):
    """``bmc.fit`` with the command line's model and method options; the simulator's fit
    predicts every entry (its metric is over the whole matrix)."""
    import numpy as np

    import bmczoo as bmc

    predict = None
    if loaded.sim is not None:
        m = loaded.sim.theta.shape[0]
        predict = np.divmod(np.arange(m * m), m)
    return bmc.fit(
        loaded.train,
        K=args.K,
        prior=prior,
        method=args.method,
        seed=args.seed,
        test=loaded.test,
        predict=predict,
        progress_bar=not args.quiet,
        dtype=args.dtype,
        likelihood=likelihood,
        biases=biases,
        context=args.context is not None,
        **given,
    )


def _metric(args, fit, loaded: loading.Loaded, spec) -> tuple[str, object]:
    """Print the metrics before the last line and return ``(last line, top-N result)``:
    the simulator's ``theta_rmse``; for ratings, the level metrics, the top-N metrics
    (``spec``, None: none) and ``test_rmse``, or ``test_ndcg@K`` for a likelihood that
    reads every pair (one-class: the held-out pairs are all 1, their RMSE no measure)."""
    if loaded.sim is not None:
        return f"theta_rmse={fit.rmse_theta(loaded.sim.theta):.4f}", None
    outputs.print_level_metrics(fit, loaded.test)
    ranks = fit.info.likelihood.all_pairs and spec is not None
    result = None
    if spec is not None:
        try:
            result = topn.evaluate(fit, loaded.train, loaded.test, spec, args.seed)
        except ValueError as e:  # e.g. factor draws not kept (--store-factors auto)
            raise CLIError(f"--top-n: {' '.join(str(e).split())}") from None
        topn.print_lines(result, skip="ndcg" if ranks else None)
    if ranks:
        return topn.headline(result), result
    return f"test_rmse={fit.rmse(loaded.test):.4f}", result


def cmd_fit(args) -> int:
    """Run ``bmczoo fit``: check the arguments and paths, read the data, fit, print the
    metrics and write the outputs."""
    prior, likelihood, given = _check_arguments(args)
    spec = topn.resolve(args, likelihood, given)
    paths = _check_paths(args)
    loaded = _read_data(args)
    topn.check_items(spec, loaded.train)
    link = _link_keywords(args, loaded.train)
    prior = dataclasses.replace(prior, **link) if link else prior
    _check_binary(likelihood, loaded.train)
    _announce(args, prior, likelihood, loaded)
    from ..inference.errors import SettingsError

    try:
        fit = _run_fit(args, prior, likelihood, loaded, given, _biases(args, link))
    except SettingsError as e:  # a setting checked by the fit itself, as the options spell it
        raise CLIError(settings_line(e)) from None
    metric, ranking = _metric(args, fit, loaded, spec)
    INTERRUPTS.phase, INTERRUPTS.metric = "outputs", metric
    if paths.save is not None:  # first: the fit itself is what a later failure must not lose
        outputs.save_model(fit, paths.save, loaded, metric)
        print(f"wrote {paths.save}")
    if paths.out is not None:
        outputs.write_outputs(fit, paths.out, loaded, metric, ranking, _split(args))
        print(f"wrote {paths.out}/")
    print(metric)
    return 0


def _method_settings(args, prior) -> dict:
    """``bmc.fit``'s method options given on the command line (those left out keep the
    method's defaults), checked before the data is read, with ``prior`` (what the Gibbs
    options need of it): an option of another method or a bad value is one ``CLIError``
    naming the option as the command line spells it."""
    from ..inference.errors import SettingsError
    from ..inference.settings import settings_for

    given = given_settings(args)
    try:
        settings_for(args.method, **given).for_prior(prior)
    except SettingsError as e:
        raise CLIError(settings_line(e)) from None
    return given


def settings_line(e) -> str:
    """The error line of a :class:`~bmczoo.inference.errors.SettingsError`, built from its
    fields (``param``, ``value``, ``reason``, ``methods``...) with the options' spelling:
    the flag comes from the settings fields (:mod:`bmczoo.cli.options`), never from the message's wording."""
    from ..inference.errors import WrongMethodError

    if isinstance(e, WrongMethodError):
        return (
            f"{option_flag(e.param)} applies to --method {' or '.join(e.methods)}, "
            f"not to --method {e.method}"
        )
    return " ".join(e.describe(name=option_flag, setting=option_setting).split())
