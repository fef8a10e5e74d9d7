"""``fit --top-n K``: the top-N metrics of the fit's rankings of the held-out pairs
(:func:`bmczoo.evaluation.ranking_metrics`), the posterior of each user's metrics
(:func:`bmczoo.evaluation.metric_posterior`), their lines and their files in ``--out``."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .errors import CLIError

#: the metrics, in the order of :func:`bmczoo.evaluation.per_user_ranking`'s columns
METRICS = ("precision", "recall", "ndcg", "map", "auc")
#: ``--top-n`` of a likelihood that reads every pair (the one-class likelihood), unless given
DEFAULT_K = 10
#: ``--top-n-draws`` unless given
DEFAULT_DRAWS = 20
#: the probability of each user's central posterior interval
INTERVAL = 0.9
#: what ``--out`` receives
FILES = ("topn.json", "topn_per_user.csv")


class TopN(NamedTuple):
    """What ``--top-n`` asks for: the list length ``k`` and the posterior draws per user
    (0: no metric posterior)."""

    k: int
    num_draws: int


class Result(NamedTuple):
    """The top-N evaluation of a fit: ``metrics`` (:func:`ranking_metrics`'s dict),
    ``users`` and ``values`` (:func:`per_user_ranking`'s), and the posterior summary
    (None without draws): ``posterior["summary"][metric]`` the means over the users of
    each user's posterior mean and interval ends, ``posterior["mean"|"lo"|"hi"]`` the
    per-user (U, 5) arrays."""

    spec: TopN
    metrics: dict
    users: object
    values: object
    posterior: dict | None


def name(metric: str, k: int) -> str:
    """The printed name of a metric: ``test_ndcg@10``, ``test_auc`` (AUC has no ``k``)."""
    return "test_auc" if metric == "auc" else f"test_{metric}@{k}"


def resolve(args, likelihood, given: dict) -> TopN | None:
    """The top-N evaluation the command line asks for (None: none), checked before the
    data is read: ``--top-n`` (default :data:`DEFAULT_K` for a likelihood that reads every
    pair, e.g. one-class, on ratings data), ``--top-n-draws``.  A Gibbs fit keeps its
    factor draws (``given["store_factors"]`` set to True unless given; ``no`` is an error).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``fit`` options.
    likelihood : Likelihood
        The fit's likelihood.
    given : dict
        ``bmc.fit``'s method options given on the command line (updated in place).
    """
    sim = args.data.startswith("sim:")
    k = args.top_n
    if k is None and likelihood.all_pairs and not sim:
        k = DEFAULT_K
    if k is None:
        if args.top_n_draws is not None:
            raise CLIError("--top-n-draws needs --top-n K (the metrics whose posterior it draws)")
        return None
    if k < 1:
        raise CLIError(f"--top-n K (the length of each user's list) must be at least 1, got {k}")
    if sim:
        raise CLIError(
            "--top-n needs ratings data with held-out pairs; the simulator (sim:M) has none"
        )
    if getattr(args, "time_bins", None) is not None:
        raise CLIError(
            "--top-n ranks a matrix fit's items; a tensor fit (--time-bins) has no top-N "
            "evaluation yet (TensorFit.recommend ranks the items at a context)"
        )
    draws = DEFAULT_DRAWS if args.top_n_draws is None else args.top_n_draws
    if draws < 0:
        raise CLIError(f"--top-n-draws must be >= 0 (0: no metric posterior), got {draws}")
    if args.method == "map":  # a point: no posterior to draw rankings from
        draws = 0
    if given.get("store_factors", True) is False:
        raise CLIError(
            "--top-n ranks every user's items, which needs the factor draws: drop "
            "--store-factors no (--top-n keeps them)"
        )
    from ..inference.settings import settings_for

    if hasattr(settings_for(args.method), "store_factors"):
        given.setdefault("store_factors", True)
    return TopN(int(k), int(draws))


def check_items(spec: TopN | None, train) -> None:
    """``--top-n K`` is at most the number of items (checked before the fit)."""
    if spec is not None and spec.k > train.shape[1]:
        raise CLIError(
            f"--top-n {spec.k} exceeds the number of items ({train.shape[1]}) of the data"
        )


def evaluate(fit, train, test, spec: TopN, seed: int) -> Result:
    """The metrics of ``fit``'s rankings (posterior mean) at ``spec.k``, the training pairs
    excluded, and with ``spec.num_draws`` the posterior of each user's metrics.

    Parameters
    ----------
    fit : FitResult
        The fit.
    train, test : RatingData
        The training pairs (excluded) and the held-out pairs (relevant).
    spec : TopN
        ``--top-n`` and ``--top-n-draws``.
    seed : int
        Seed of the posterior draws (``--seed``).
    """
    import numpy as np

    from .._ranking import metric_posterior, per_user_ranking, ranking_summary

    users, values = per_user_ranking(fit, train, test, spec.k)
    posterior = None
    if spec.num_draws:
        post = metric_posterior(
            fit, train, test, spec.k, num_draws=spec.num_draws, seed=seed, users=users
        )
        posterior = _summarise(np.asarray(post["draws"]), spec.num_draws)
    return Result(spec, ranking_summary(values, spec.k), users, values, posterior)


def _summarise(draws, num_draws: int) -> dict:
    """Each user's posterior mean and central :data:`INTERVAL` interval of each metric
    (``draws``: (D, U, 5)), and their means over the users where the metric is defined."""
    import numpy as np

    tail = (1.0 - INTERVAL) / 2.0
    per_user = {
        "mean": draws.mean(0),
        "lo": np.quantile(draws, tail, axis=0),
        "hi": np.quantile(draws, 1.0 - tail, axis=0),
    }
    summary = {}
    for j, metric in enumerate(METRICS):
        summary[metric] = {}
        for key, arr in per_user.items():
            col = arr[:, j]
            ok = np.isfinite(col)
            summary[metric][key] = float(col[ok].mean()) if ok.any() else float("nan")
    return {"num_draws": num_draws, "prob": INTERVAL, "summary": summary, **per_user}


def print_lines(result: Result, skip: str | None = None) -> None:
    """Print the metrics, one ``name=value`` line each (``skip``: a metric printed as the
    last line instead), the numbers of users, and the posterior summary.

    Parameters
    ----------
    result : Result
        The evaluation.
    skip : str, optional
        A metric left out here (the last line prints it).
    """
    k, m = result.spec.k, result.metrics
    for metric in METRICS:
        if metric != skip:
            print(f"{name(metric, k)}={m[metric]:.4f}")
    print(f"top-n users: {m['users']} with a held-out pair, {m['auc_users']} for the AUC")
    if result.posterior is None:
        return
    post = result.posterior
    print(
        f"top-n posterior: each user's metric over {post['num_draws']} rankings by one "
        f"posterior draw; its mean and central {INTERVAL:.0%} interval, averaged over the users"
    )
    for metric in METRICS:
        s = post["summary"][metric]
        print(
            f"{name(metric, k)}_posterior: mean={s['mean']:.4f} "
            f"interval=[{s['lo']:.4f}, {s['hi']:.4f}]"
        )


def headline(result: Result) -> str:
    """The last line of a fit judged by its rankings: ``test_ndcg@K=...``."""
    return f"{name('ndcg', result.spec.k)}={result.metrics['ndcg']:.4f}"


def write(out: Path, result: Result | None, user_ids, split) -> None:
    """Write ``topn.json`` (the metrics, the split, the posterior summary) and
    ``topn_per_user.csv`` (each user's metrics, and its posterior mean and interval) into
    ``out``; without a result, remove an earlier fit's (``--overwrite``).

    Parameters
    ----------
    out : pathlib.Path
        The ``--out`` folder.
    result : Result or None
        The evaluation.
    user_ids : array_like or None
        The dataset's id of each row (None: the row indices).
    split : Split
        The test split (:class:`bmczoo.cli.loading.Split`).
    """
    import json

    import numpy as np

    if result is None:
        for f in FILES:
            if (out / f).is_file():
                (out / f).unlink()
        return
    post = result.posterior
    doc = {
        "k": result.spec.k,
        "split": split._asdict(),
        "metrics": result.metrics,
        "posterior": None
        if post is None
        else {key: post[key] for key in ("num_draws", "prob", "summary")},
    }
    (out / FILES[0]).write_text(json.dumps(doc, indent=2) + "\n")
    ids = np.asarray(result.users) if user_ids is None else np.asarray(user_ids)[result.users]
    cols, header = [ids, result.values], ["user_id"] + [name(m, result.spec.k) for m in METRICS]
    if post is not None:
        for key in ("mean", "lo", "hi"):
            cols.append(post[key])
            header += [f"{name(m, result.spec.k)}_{key}" for m in METRICS]
    np.savetxt(
        out / FILES[1],
        np.column_stack(cols),
        delimiter=",",
        header=",".join(header),
        comments="",
        fmt=["%d"] + ["%.10g"] * (len(header) - 1),
    )
