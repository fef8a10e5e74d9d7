"""The model-comparison groups of the ArviZ conversion: ``log_likelihood``,
``posterior_predictive`` and ``observed_data`` at a set of ratings, from the draws of
theta (and tau, or the cut points) at those ratings that the fit's
``_ratings_theta_tau`` and ``_drawn_cuts`` hooks give (the rules:
:mod:`bmczoo.diagnostics.convert`)."""

from __future__ import annotations

import numpy as np

from ..._arviz import FitArrays
from .levels import level_log_probs_np

__all__ = ["add_predictive_groups", "check_bound", "draw_step"]


def ll_ratings(fit, log_likelihood):
    """The ratings (RatingData) of the log-likelihood groups."""
    from ...data import RatingData

    if log_likelihood is True:
        rows, cols = getattr(fit, "seen_rows", None), getattr(fit, "seen_cols", None)
        values = getattr(fit, "seen_values", None)
        if rows is None or values is None:
            raise ValueError(
                "this fit does not hold its training ratings (a loaded fit, or one not made by "
                "bmc.fit): pass them, to_arviz(log_likelihood=train)"
            )
        context = getattr(fit, "seen_context", None)
        return RatingData(rows, cols, values, shape=tuple(fit.shape), context=context)
    if not isinstance(log_likelihood, RatingData):
        raise TypeError(
            f"log_likelihood must be True, False or a RatingData of ratings, got "
            f"{type(log_likelihood).__name__}"
        )
    if tuple(log_likelihood.shape) != tuple(fit.shape):
        raise ValueError(
            f"log_likelihood: the ratings have shape {log_likelihood.shape}, the fit {tuple(fit.shape)}"
        )
    return log_likelihood


def check_bound(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def rating_subsample(n: int, max_ratings: int, seed: int) -> np.ndarray:
    """Positions of the ratings kept: all, or ``max_ratings`` drawn uniformly without
    replacement with ``default_rng(seed)`` (sorted): a function of ``n`` and the seed."""
    if n <= max_ratings:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_ratings, replace=False))


def draw_step(C: int, D: int, max_draws: int) -> int:
    """Every how many draws of each chain the groups keep (at most ``max_draws`` in all)."""
    return max(1, -(-C * D // max_draws))


def arviz_cuts(fit, lik, shape, step: int) -> np.ndarray:
    """Cut points (chain, draw, L-1) matching theta's draws: the fixed ones, else the
    fit's learned ones (its ``_drawn_cuts``)."""
    fixed = lik.fixed_cuts()
    if fixed is not None:
        return np.broadcast_to(np.asarray(fixed, np.float64), tuple(shape) + (len(fixed),))
    return fit._drawn_cuts(lik, shape, step)


def add_level_groups(fa: FitArrays, fit, lik, theta, y, step: int, rng) -> None:
    """``log_likelihood`` (log P(Y = y | theta, c)) and ``posterior_predictive`` (a level
    drawn from those probabilities) of a probit / ordered-probit fit."""
    cuts = arviz_cuts(fit, lik, theta.shape[:2], step)
    logp = level_log_probs_np(theta, cuts[..., None, :])  # (chain, draw, rating, L)
    idx = lik.level_index(y)
    fa.groups["log_likelihood"] = {
        "y": np.take_along_axis(logp, idx[None, None, :, None], axis=-1)[..., 0]
    }
    cdf = np.cumsum(np.exp(logp), axis=-1)
    u = rng.random(theta.shape)[..., None]
    pick = np.minimum(np.sum(cdf < u * cdf[..., -1:], axis=-1), lik.num_levels - 1)
    fa.groups["posterior_predictive"] = {"y": np.asarray(lik.level_values, np.float64)[pick]}


def add_gaussian_groups(fa: FitArrays, fit, theta, tau, y, rng) -> str:
    """``log_likelihood`` and ``posterior_predictive`` of a Gaussian likelihood: the draws'
    tau of a learned noise, else the fixed tau of the tempered likelihood.  Returns how
    the noise was taken."""
    if tau is None:
        fixed = getattr(fit.info, "tau", None)
        if fixed is None:
            raise ValueError("the fit records no noise precision tau")
        var = np.full(theta.shape[:2] + (1,), 1.0 / float(fixed))
        noise = f"fixed tau = {float(fixed):.6g} of the tempered likelihood"
    else:
        var = (1.0 / np.asarray(tau, np.float64))[..., None]
        noise = "the draws of the learned tau"
    mean = theta + float(fit.info.shift.offset)
    lik = fit.info.likelihood
    fa.groups["log_likelihood"] = {"y": lik.log_density(y, mean, var)}
    fa.groups["posterior_predictive"] = {"y": mean + lik.noise_draws(rng, mean.shape, var)}
    return noise


def add_predictive_groups(
    fa: FitArrays, fit, log_likelihood, num_draws: int, seed: int, bounds: tuple[int, int]
) -> None:
    """Add ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` to ``fa``;
    ``bounds``: the checked ``(max_draws, max_ratings)``."""
    max_draws, max_ratings = bounds
    data = ll_ratings(fit, log_likelihood)
    pos = rating_subsample(data.n, max_ratings, seed)
    rows = np.asarray(data.rows, np.int64)[pos]
    cols = np.asarray(data.cols, np.int64)[pos]
    y = np.asarray(data.values, np.float64)[pos]
    rng = np.random.default_rng([int(seed), 13])
    # a fit with sampled offsets reads the ratings' per-rating table
    kw = (
        {"context": data.context.take(pos)} if fit.info.offsets and data.context is not None else {}
    )
    theta, tau, how = fit._ratings_theta_tau(rows, cols, num_draws, max_draws, rng, **kw)
    lik = fit.info.likelihood
    if lik.latent:
        add_level_groups(fa, fit, lik, theta, y, how["draw_step"], rng)
        noise = f"{lik.name} likelihood (levels {list(lik.level_values)})"
    else:
        noise = add_gaussian_groups(fa, fit, theta, tau, y, rng)
    fa.groups["observed_data"] = {"y": y}
    fa.dims["y"] = ("rating",)
    fa.coords["rating"] = ("rating", pos)
    fa.coords["rating_row"] = ("rating", rows)
    fa.coords["rating_col"] = ("rating", cols)
    info = {
        "num_ratings_total": int(data.n),
        "num_ratings": int(pos.size),
        "max_ratings": max_ratings,
        "max_draws": max_draws,
        "rating_subsample": (
            "all ratings"
            if pos.size == data.n
            else f"uniform without replacement, default_rng({int(seed)})"
        ),
        "noise": noise,
        "scale": "data (offset added, unclipped)",
        **how,
    }
    for g in ("log_likelihood", "posterior_predictive", "observed_data"):
        fa.group_attrs[g] = dict(info)
