"""Numerical diagnostics on rotation- and label-invariant quantities.

``M``, ``N`` and the individual ``gamma_h`` are not identified (the posterior is invariant
under ``M -> M R``, ``N -> N R^{-T}`` for rotations R mixing columns with equal gamma, and
under permuting the columns together with gamma), so ESS and R-hat are computed on
``theta`` entries, sorted gamma, ``||theta||_F`` and the effective rank.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import numpy as np

from .._checks import check_real
from ..priors.base import indicator_above
from .convert import (
    INVARIANT_VARS,
    _lacks_column_scales,
    _prior_of,
    _require_column_scales,
    _vb_q_gamma,
    fit_kind,
    to_arviz,
)

__all__ = [
    "summary",
    "rank_posterior",
    "theta_rank_posterior",
    "theta_sv_draws",
    "rank_mixing",
    "autocorrelation",
    "gamma_threshold",
    "prob_gamma_above",
    "RankMixingWarning",
]

#: R-hat of the number of active columns above which the chains are said to disagree
RHAT_ACTIVE_MAX = 1.05

#: fewest draws of a single chain for which its split R-hat (its two halves) is given
MIN_DRAWS_SPLIT_RHAT = 8

#: what ``r_hat`` measures for a single MCMC chain (``summary(...).attrs["r_hat"]``)
SPLIT_RHAT_NOTE = (
    "one chain: R-hat of its two halves (split R-hat); it sees drift within the chain "
    "but not a dependence on the starting point: run several chains for that"
)


class RankMixingWarning(UserWarning):
    """The chains of an MCMC fit disagree on the number of active columns."""


def _is_arviz_data(obj) -> bool:
    """ArviZ data (a ``posterior`` group and none of a fit's draws or ``q``)."""
    if not hasattr(obj, "posterior"):
        return False
    try:
        fit_kind(obj)
    except TypeError:
        return True
    return False


class _DropShapeNotice(logging.Filter):
    def filter(self, record):
        return not record.getMessage().startswith("Shape validation failed")


@contextlib.contextmanager
def _single_chain_quiet(num_chains: int):
    """With one chain ArviZ logs a shape notice for R-hat (which is then NaN): drop it."""
    if num_chains >= 2:
        yield
        return
    flt = _DropShapeNotice()
    import arviz as az

    # ArviZ 0.x logs through its own Logger instance ``arviz._log``
    loggers = [logging.getLogger("arviz")] + [
        lg for lg in [getattr(az, "_log", None)] if lg is not None
    ]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


def summary(
    fit,
    *,
    var_names=None,
    kind: str = "all",
    entries=None,
    num_draws: int = 500,
    seed: int = 0,
    round_to=None,
):
    """``az.summary`` of the invariant quantities of a fit: a pandas ``DataFrame`` with
    mean, sd, HDI, MCSE, ESS bulk/tail and R-hat per scalar (``theta[i,j]``,
    ``gamma_sorted[h]``, ``num_active`` (the number of active columns, MCMC draws of
    gamma), ``theta_fro``, ``eff_rank`` where available).

    ``theta[i,j]`` is reported on the data's scale: the centring offset (the training
    mean, ``theta_offset``) is added to its mean and HDI, so they match ``fit.predict``
    before clipping (sd, MCSE, ESS and R-hat do not change under the shift); the table's
    ``attrs["theta_scale"]`` says so.

    Parameters
    ----------
    fit : a fit result, or ArviZ data from :func:`~bmczoo.diagnostics.to_arviz`
    var_names : list of str, optional
        Default: those of ``theta``, ``gamma_sorted``, ``theta_fro``, ``eff_rank`` present.
        Names of :func:`~bmczoo.diagnostics.extra_var_names` (stored draws outside the
        default conversion) are converted for the table.
    kind : {"all", "stats", "diagnostics"}
        As in ``az.summary``.  With fewer than 4 draws in all (MAP) only the mean is given.
        Quantities constant over all draws get NaN diagnostics.
    entries, num_draws, seed :
        Passed to :func:`~bmczoo.diagnostics.to_arviz` (VB: draws from q, one chain: the
        ESS then measures those independent draws).  R-hat compares chains: for a
        single MCMC chain (``bmc.fit``'s default) it is the split R-hat of the chain's
        two halves (the table's ``attrs["r_hat"]`` says so): it flags drift within the
        chain, not a dependence on the starting point, which only several chains show.
        NaN for the independent draws of VB and SVI and for a chain of fewer than 8 draws.
    round_to : int, optional
        Passed to ``az.summary``.
    """
    import arviz as az

    if _is_arviz_data(fit):
        idata = fit
    else:  # names outside the default conversion (the link's lam_B_M, a bias vector) are requested
        from .convert import extra_var_names

        extra = [v for v in (var_names or ()) if v in extra_var_names(fit)]
        idata = to_arviz(
            fit, var_names=extra or None, entries=entries, num_draws=num_draws, seed=seed
        )
    post = idata.posterior
    if var_names is None:
        var_names = [v for v in INVARIANT_VARS if v in post.data_vars]
    else:
        var_names = list(var_names)
        missing = [v for v in var_names if v not in post.data_vars]
        if missing:
            raise ValueError(
                f"no posterior variable {missing}; available: {sorted(post.data_vars)}"
            )
    # a quantity constant over all draws (e.g. a sorted gamma of the discrete prior that
    # stays in the slab) has undefined ESS/MCSE: NaN, without numpy's 0/0 warnings
    with _single_chain_quiet(post.sizes["chain"]), np.errstate(divide="ignore", invalid="ignore"):
        if post.sizes["chain"] * post.sizes["draw"] < 4:
            return _theta_on_data_scale(_mean_table(post, var_names), post)
        # unrounded, so that the offset is added before the rounding (not to rounded values)
        table = az.summary(idata, var_names=var_names, kind=kind, round_to="none")
        if "r_hat" in table.columns and _split_rhat_applies(post):
            split = az.summary(
                az.InferenceData(posterior=_split_halves(post)),
                var_names=var_names,
                kind="diagnostics",
                round_to="none",
            )
            table["r_hat"] = split["r_hat"].reindex(table.index).values
            table.attrs["r_hat"] = SPLIT_RHAT_NOTE
        # ArviZ gives a constant quantity (a chain stuck at one count) ESS = the number of
        # draws, which reads as perfect mixing: its ESS, MCSE and R-hat are undefined
        diag = [c for c in table.columns if c.startswith(("ess_", "mcse_")) or c == "r_hat"]
        if diag:
            # exact test (a float sd of equal values need not be 0): the range over all
            # draws, through ArviZ so that the labels are its own
            spread = az.summary(
                idata,
                var_names=var_names,
                stat_funcs={"ptp": np.ptp},
                extend=False,
                round_to="none",
            )["ptp"]
            table.loc[(spread.reindex(table.index) == 0).values, diag] = np.nan
    return _round_like_arviz(_theta_on_data_scale(table, post), round_to)


def _split_rhat_applies(post) -> bool:
    """One chain of MCMC draws (not VB's or a guide's independent draws), long enough to halve."""
    return (
        post.sizes["chain"] == 1
        and post.sizes["draw"] >= MIN_DRAWS_SPLIT_RHAT
        and post.attrs.get("representation") == "mcmc draws"
    )


def _split_halves(post):
    """The one chain's first and second halves as two chains (an odd last draw dropped):
    ArviZ's R-hat of these is the split R-hat of the chain (Gelman et al., BDA3 11.4)."""
    import xarray as xr

    n = post.sizes["draw"] // 2
    first = post.isel(draw=slice(0, n))
    second = post.isel(draw=slice(n, 2 * n)).assign_coords(
        draw=first["draw"].values, chain=first["chain"].values + 1
    )
    return xr.concat([first, second], dim="chain")


def _round_like_arviz(table, round_to):
    """``az.summary``'s rounding: ``round_to`` decimals, by default 3 (2 for R-hat, 0 for the ESS)."""
    if round_to in ("None", "none"):
        return table
    if round_to is not None:
        return table.round(round_to)
    return table.round(
        {c: 2 if c == "r_hat" else 0 if c in ("ess_bulk", "ess_tail") else 3 for c in table.columns}
    )


def _theta_on_data_scale(table, post):
    """Add the centring offset to the location columns (mean, HDI) of the theta rows."""
    offset = float(post.attrs.get("theta_offset", 0.0) or 0.0)
    is_theta = table.index.str.startswith("theta[")
    if is_theta.any():
        cols = [c for c in table.columns if c == "mean" or c.startswith("hdi_")]
        if offset != 0.0 and cols:
            table.loc[is_theta, cols] = table.loc[is_theta, cols] + offset
        table.attrs["theta_scale"] = f"data (offset {offset:g} added to mean and HDI)"
    return table


def _mean_table(post, var_names):
    """The posterior means alone, labelled like ``az.summary`` (``theta[0,1]``)."""
    import pandas as pd

    labels, means = [], []
    for v in var_names:
        da = post[v].mean(("chain", "draw"))
        for idx in np.ndindex(da.shape):
            coords = [str(da[d].values[i]) for d, i in zip(da.dims, idx)]
            labels.append(f"{v}[{','.join(coords)}]" if coords else v)
            means.append(float(da.values[idx]))
    return pd.DataFrame({"mean": means}, index=labels)


def _poisson_binomial(p) -> np.ndarray:
    """Law of the number of successes of independent Bernoulli(p_h) trials, h over the
    last axis: (..., K) -> (..., K+1), vectorised over the leading axes.

    For probabilities that are all 0 or 1 the result is exactly the one-hot vector of the
    number of ones (every step multiplies by 0 or 1 and adds 0).
    """
    p = np.asarray(p, np.float64)
    K = p.shape[-1]
    out = np.zeros(p.shape[:-1] + (K + 1,))
    out[..., 0] = 1.0
    for k in range(K):
        ph = p[..., k, None]
        out[..., 1 : k + 2] = out[..., 1 : k + 2] * (1.0 - ph) + out[..., : k + 1] * ph
        out[..., 0] *= 1.0 - p[..., k]
    return out


def _check_threshold(threshold) -> float:
    return check_real("threshold", threshold)


def _vb_prob_above(fit, threshold: float) -> np.ndarray:
    """``q(gamma_h > threshold)`` (K,) of a VB fit: its prior's ``q_prob_above``."""
    prior = _prior_of(fit)
    if prior is None:
        raise ValueError("this VB fit records no prior: its q(gamma) cannot be evaluated")
    K = np.shape(fit.m)[-1]
    p = np.asarray(prior.q_prob_above(_vb_q_gamma(fit), threshold), np.float64)
    return np.array(np.broadcast_to(p, (K,)))


def _draws_prob_above(fit, threshold: float) -> np.ndarray:
    """``P(gamma_h > threshold | draw)`` for every draw of an MCMC or SVI fit: (S, K), S
    the draws of all chains (the prior's ``prob_above``; for a fit that records no prior,
    the base rule: the indicator of the drawn ``gamma_h``)."""
    kind = fit_kind(fit)
    draws = fit.samples if kind == "mcmc" else fit.draws
    prior = _prior_of(fit)
    prob_above = prior.prob_above if prior is not None else indicator_above
    try:
        p = np.asarray(prob_above(draws, threshold), np.float64)
    except ValueError as e:
        if kind == "svi":
            raise ValueError(
                f"{e} (a MAP fit, or a guide that integrates gamma out, keeps no draws of it)"
            ) from None
        raise
    return p.reshape(-1, p.shape[-1])


def prob_gamma_above(fit, threshold: float) -> np.ndarray:
    """``P(gamma_h > threshold)`` for each h (array of K).

    VB: exactly under ``q(gamma_h)`` (the prior's
    :meth:`~bmczoo.priors.Prior.q_prob_above`).  MCMC and SVI: the average over the draws
    of ``P(gamma_h > threshold | draw)`` (:meth:`~bmczoo.priors.Prior.prob_above`: the
    indicator of the drawn ``gamma_h``, or its exact conditional probability for a model
    that integrates gamma out).  ``ValueError`` for a prior without column scales.
    """
    threshold = _check_threshold(threshold)
    _require_column_scales(fit, "prob_gamma_above")
    if fit_kind(fit) == "vb":
        return _vb_prob_above(fit, threshold)
    return _draws_prob_above(fit, threshold).mean(axis=0)


#: default threshold of :func:`theta_rank_posterior`, relative to the posterior mean of the
#: largest singular value of theta
SV_RELATIVE_THRESHOLD = 0.01


def theta_sv_draws(fit, *, num_draws: int = 500, seed: int = 0) -> np.ndarray:
    """Singular values of ``theta = M N^T`` (S, K), decreasing, for every draw of the fit:
    MCMC and SVI draws (from the K x K Gram roots of the factors, without forming theta;
    a saved fit keeps them for every draw), ``num_draws`` draws from a VB fit's ``q``
    (``default_rng(seed)``), MAP's point.

    Parameters
    ----------
    fit : FitResult
        Any fit that holds draws (or the variational posterior) of the factors.
    num_draws : int
        VB: how many draws of ``q`` to take (MCMC and SVI use their own draws).
    seed : int
        VB: seed of those draws.

    Returns
    -------
    numpy.ndarray
        (S, K) singular values per draw, decreasing along the last axis.
    """
    from .convert import fit_arrays

    post = fit_arrays(fit, num_draws=num_draws, seed=seed).groups["posterior"]
    if "theta_sv" not in post:
        raise ValueError(
            "the rank of theta needs the draws of the factors M, N, which this fit does not hold "
            "(refit with store_factors=True)"
        )
    sv = np.asarray(post["theta_sv"], np.float64)
    return sv.reshape(-1, sv.shape[-1])


def theta_rank_posterior(
    fit, threshold: float | None = None, *, num_draws: int = 500, seed: int = 0
) -> np.ndarray:
    """Posterior probabilities of the effective rank of theta, ``#{k: s_k(theta) >
    threshold}`` = 0..K (array of K+1), ``s_k`` the singular values of ``theta = M N^T``
    (centred scale, biases not included) of each draw (:func:`theta_sv_draws`): the
    frequency of each count over the draws.  ``threshold`` defaults to
    ``SV_RELATIVE_THRESHOLD`` (1%) of the posterior mean of the largest singular value.
    Defined for every prior; :func:`rank_posterior` answers with it for a prior without
    column scales (e.g. :class:`~bmczoo.priors.NormalWishart`).

    Parameters
    ----------
    fit : FitResult
        Any fit that holds draws (or the variational posterior) of the factors.
    threshold : float, optional
        A singular value above it counts; default 1% of the posterior mean of the largest.
    num_draws, seed : int
        VB: number and seed of the draws of ``q`` (see :func:`theta_sv_draws`).

    Returns
    -------
    numpy.ndarray
        K + 1 probabilities of the effective rank 0..K.
    """
    sv = theta_sv_draws(fit, num_draws=num_draws, seed=seed)
    if threshold is None:
        threshold = SV_RELATIVE_THRESHOLD * float(np.mean(sv[:, 0]))
    t = _check_threshold(threshold)
    counts = np.sum(sv > t, axis=-1)
    return np.bincount(counts, minlength=sv.shape[-1] + 1) / counts.size


def rank_posterior(
    fit, threshold: float | None = None, *, num_draws: int = 500, seed: int = 0
) -> np.ndarray:
    """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K (array of K+1);
    ``threshold`` defaults to :func:`gamma_threshold`.

    VB: exact under the mean-field ``q`` (independent ``q(gamma_h)``: the Poisson-binomial
    law of the tail probabilities :meth:`~bmczoo.priors.Prior.q_prob_above`).  MCMC and
    SVI: the average over all draws of the Poisson-binomial law of the per-draw
    probabilities :meth:`~bmczoo.priors.Prior.prob_above`; where these are 0 or 1 (gamma
    drawn) that is exactly the frequency of each count over the draws.

    ``num_draws`` and ``seed`` serve only a prior without column scales fitted by VB (the
    draws of ``q`` that give its singular values, below); with column scales the result is
    exact given the fit.  With several MCMC chains, a :class:`RankMixingWarning` is
    issued when they disagree on the number of active columns (:func:`rank_mixing`:
    R-hat above 1.05, or chains each stuck at a different count): the pooled law then
    reflects the starting points rather than the posterior.

    A prior without column scales (``has_column_scales = False``, e.g.
    :class:`~bmczoo.priors.NormalWishart`) has no gamma: the answer is then the posterior
    of the effective rank of theta, the number of its singular values above
    ``threshold`` (:func:`theta_rank_posterior`; default threshold 1% of the posterior
    mean of the largest singular value).
    """
    if _lacks_column_scales(fit):
        return theta_rank_posterior(fit, threshold, num_draws=num_draws, seed=seed)
    threshold = gamma_threshold(fit) if threshold is None else _check_threshold(threshold)
    if fit_kind(fit) == "vb":
        return _poisson_binomial(_vb_prob_above(fit, threshold))
    if fit_kind(fit) == "mcmc":
        mix = rank_mixing(fit, threshold)
        if mix is not None and mix["disagree"]:
            warnings.warn(
                f"the {mix['num_chains']} chains disagree on the number of active columns "
                f"(threshold {threshold:.4g}): R-hat {mix['r_hat']:.3g}, most frequent count per chain "
                f"{mix['chain_modes']}; the rank posterior reflects the starting points (run longer, with "
                "the column moves on: bmc.fit's default, column_moves=None)",
                RankMixingWarning,
                stacklevel=2,
            )
    return _poisson_binomial(_draws_prob_above(fit, threshold)).mean(axis=0)


def rank_mixing(fit, threshold: float | None = None) -> dict | None:
    """Convergence of the number of active columns ``#{h: gamma_h > threshold}`` of an
    MCMC fit (per draw ``sum_h P(gamma_h > threshold | draw)``): a dict with
    ``num_chains``, ``ess_bulk``, ``ess_tail``, ``r_hat`` (ArviZ, on the (chain, draw)
    array; for one chain the split R-hat of its two halves; NaN where undefined, e.g. a
    constant count or a chain of fewer than 8 draws), ``r_hat_kind`` (``"chains"`` or
    ``"split one chain"``), ``chain_modes`` (the most frequent rounded count of each
    chain), ``chain_means``, ``disagree`` (several chains: R-hat > 1.05, or, where R-hat
    is undefined because every chain is constant, chain modes that differ) and ``drifts``
    (one chain: its split R-hat > 1.05).  None for a fit without MCMC draws of gamma.
    ``threshold`` defaults to :func:`gamma_threshold`."""
    import arviz as az

    from .convert import num_active_draws

    if fit_kind(fit) != "mcmc" or "gamma" not in fit.samples or np.ndim(fit.samples["gamma"]) != 3:
        return None
    _require_column_scales(fit, "rank_mixing")
    t = gamma_threshold(fit) if threshold is None else _check_threshold(threshold)
    x = num_active_draws(fit, fit.samples, t)  # (chain, draw)
    C = x.shape[0]
    r_hat_kind = "chains" if C >= 2 else "split one chain"
    if np.ptp(x) == 0:  # constant count: ESS and R-hat undefined (ArviZ would give the draw count)
        return {
            "num_chains": C,
            "threshold": t,
            "ess_bulk": float("nan"),
            "ess_tail": float("nan"),
            "r_hat": float("nan"),
            "r_hat_kind": r_hat_kind,
            "chain_modes": [int(np.rint(x[0, 0]))] * C,
            "chain_means": [float(x[0, 0])] * C,
            "disagree": False,
            "drifts": False,
        }
    with (
        _single_chain_quiet(C),
        np.errstate(divide="ignore", invalid="ignore"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", RuntimeWarning)
        ess_bulk = float(az.ess(x, method="bulk")) if x.size >= 4 else float("nan")
        ess_tail = float(az.ess(x, method="tail")) if x.size >= 4 else float("nan")
        # what R-hat compares: the chains, or one chain's two halves (an odd last draw dropped)
        groups = x if C >= 2 else x[:, : 2 * (x.shape[1] // 2)].reshape(2, -1)
        defined = x.shape[1] >= (4 if C >= 2 else MIN_DRAWS_SPLIT_RHAT)
        r_hat = float(az.rhat(groups)) if defined else float("nan")
    if (C >= 2 or defined) and np.all(np.ptp(groups, axis=1) == 0):
        # every group constant, at different counts: no within-group variance, R-hat is
        # infinite (ArviZ's rank-normalised estimate returns ~1e15 from rounding)
        r_hat = float("inf")
    modes = [int(np.bincount(np.rint(row).astype(np.int64)).argmax()) for row in x]
    # R-hat is NaN or inf when every chain is constant: then differing values are disagreement
    disagree = C >= 2 and (r_hat > RHAT_ACTIVE_MAX if np.isfinite(r_hat) else len(set(modes)) > 1)
    drifts = C == 1 and r_hat > RHAT_ACTIVE_MAX  # NaN (too short) is not drift
    return {
        "num_chains": C,
        "threshold": t,
        "ess_bulk": ess_bulk,
        "ess_tail": ess_tail,
        "r_hat": r_hat,
        "r_hat_kind": r_hat_kind,
        "chain_modes": modes,
        "chain_means": [float(v) for v in x.mean(axis=1)],
        "disagree": bool(disagree),
        "drifts": bool(drifts),
    }


def gamma_threshold(fit) -> float:
    """A default threshold for counting "active" columns: the prior's
    :meth:`~bmczoo.priors.Prior.active_threshold` (e.g. ``sqrt(C eps)`` for the discrete
    prior) where it has one; otherwise 1% of the largest posterior mean of gamma (a
    relative cut).  ``ValueError`` for a prior without column scales."""
    _require_column_scales(fit, "gamma_threshold")
    prior = _prior_of(fit)
    t = prior.active_threshold() if prior is not None else None
    if t is not None:
        return float(t)
    kind = fit_kind(fit)
    if kind == "mcmc" and "gamma" in fit.samples:
        g = np.asarray(fit.samples["gamma"])
    elif kind == "svi" and "gamma" in fit.draws:
        g = np.asarray(fit.draws["gamma"])
    elif kind == "vb":
        g = 1.0 / np.asarray(fit.q_gamma["inv_mean"], np.float64)
    else:
        raise ValueError("the fit has no gamma")
    top = float(np.max(np.mean(g.reshape(-1, g.shape[-1]), axis=0)))
    return 0.01 * top


def autocorrelation(
    fit_or_idata, *, var_name: str = "theta", max_lag: int | None = None
) -> np.ndarray:
    """Autocorrelation (``az.autocorr``) of each scalar of ``var_name`` by lag, averaged
    over chains: array (..., max_lag + 1) with the variable's trailing shape first
    (``theta``: (entry, lag)).  Lags count kept draws (after thinning)."""
    import arviz as az

    idata = fit_or_idata if _is_arviz_data(fit_or_idata) else to_arviz(fit_or_idata)
    x = np.asarray(idata.posterior[var_name].values, np.float64)  # (chain, draw, ...)
    C, D = x.shape[:2]
    flat = x.reshape(C, D, -1)
    L = D - 1 if max_lag is None else min(int(max_lag), D - 1)
    out = np.empty((flat.shape[2], L + 1))
    for e in range(flat.shape[2]):
        out[e] = np.mean([az.autocorr(flat[c, :, e])[: L + 1] for c in range(C)], axis=0)
    return out.reshape(x.shape[2:] + (L + 1,))
