"""Numerical diagnostics on rotation- and label-invariant quantities.

``M``, ``N`` and the individual ``gamma_h`` are not identified (the posterior is invariant
under ``M -> M R``, ``N -> N R^{-T}`` for rotations R mixing columns with equal gamma, and
under permuting the columns together with gamma), so ESS and R-hat are computed on
``theta`` entries, sorted gamma, ``||theta||_F`` and the effective rank.  The rank
posterior and the chains' agreement on it are computed by the results layer on the fit's
arrays (:mod:`bmczoo.inference.results.rank`); they are re-exported here.
"""

from __future__ import annotations

import numpy as np

from ..inference.results.rank import (
    MIN_DRAWS_SPLIT_RHAT,
    RHAT_ACTIVE_MAX,
    SV_RELATIVE_THRESHOLD,
    RankMixingWarning,
    gamma_threshold,
    prob_gamma_above,
    rank_mixing,
    rank_posterior,
    single_chain_quiet,
    theta_rank_posterior,
    theta_sv_draws,
)
from .. import _arviz
from .convert import INVARIANT_VARS, extra_var_names, to_arviz

__all__ = [
    "summary",
    "loo",
    "compare",
    "rank_posterior",
    "theta_rank_posterior",
    "theta_sv_draws",
    "rank_mixing",
    "autocorrelation",
    "gamma_threshold",
    "prob_gamma_above",
    "RankMixingWarning",
    "RHAT_ACTIVE_MAX",
    "SV_RELATIVE_THRESHOLD",
]

#: what ``r_hat`` measures for a single MCMC chain (``summary(...).attrs["r_hat"]``)
SPLIT_RHAT_NOTE = (
    "one chain: R-hat of its two halves (split R-hat); it sees drift within the chain "
    "but not a dependence on the starting point: run several chains for that"
)


def _is_arviz_data(obj) -> bool:
    """ArviZ data (a ``posterior`` group), not a fit result (which converts itself)."""
    return not hasattr(obj, "to_arviz") and _arviz.group(obj) is not None


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
    post = _arviz.group(_summary_data(fit, var_names, entries, num_draws, seed))
    var_names = _summary_var_names(post, var_names)
    # a quantity constant over all draws (e.g. a sorted gamma of the discrete prior that
    # stays in the slab) has undefined ESS/MCSE: NaN, without numpy's 0/0 warnings
    with single_chain_quiet(post.sizes["chain"]), np.errstate(divide="ignore", invalid="ignore"):
        if post.sizes["chain"] * post.sizes["draw"] < 4:
            return _theta_on_data_scale(_mean_table(post, var_names), post)
        # unrounded, so that the offset is added before the rounding (not to rounded values)
        table = _arviz.summary_table(post, var_names, kind)
        if "r_hat" in table.columns and _split_rhat_applies(post):
            split = _arviz.summary_table(_split_halves(post), var_names, "diagnostics")
            table["r_hat"] = split["r_hat"].reindex(table.index).values
            table.attrs["r_hat"] = SPLIT_RHAT_NOTE
        _undefined_when_constant(table, post, var_names)
    return _round_like_arviz(_theta_on_data_scale(table, post), round_to)


def _loglik_data(fit_or_data, **kwargs):
    """ArviZ data with a ``log_likelihood`` group: given, or converted from a fit with
    ``to_arviz(log_likelihood=True, **kwargs)``."""
    if _is_arviz_data(fit_or_data):
        return fit_or_data
    return to_arviz(fit_or_data, log_likelihood=kwargs.pop("log_likelihood", True), **kwargs)


def loo(fit_or_data, *, pointwise: bool = False, **kwargs) -> _arviz.Loo:
    """PSIS-LOO (``az.loo``) of a fit or of its ArviZ data, under ArviZ 0.x or 1.x.

    Parameters
    ----------
    fit_or_data : FitResult or ArviZ data
        A fit (converted with ``to_arviz(log_likelihood=True, **kwargs)``: its training
        ratings) or data with a ``log_likelihood`` group.
    pointwise : bool
        Also return the pointwise values and Pareto k.
    **kwargs
        Passed to :func:`~bmczoo.diagnostics.to_arviz` for a fit (``log_likelihood=`` a
        RatingData, ``max_ratings``, ``max_draws``, ``seed``, ``num_draws``).

    Returns
    -------
    bmczoo._arviz.Loo
        ``elpd_loo``, ``se``, ``p_loo``, ``loo_i``, ``pareto_k`` and ArviZ's own
        ``result`` (whose attribute names differ between ArviZ 0.x and 1.x).
    """
    return _arviz.loo(_loglik_data(fit_or_data, **kwargs), pointwise=pointwise)


def compare(fits, **kwargs):
    """``az.compare`` by PSIS-LOO of ``{name: fit or ArviZ data}``: a DataFrame with the
    columns ``rank``, ``elpd_loo``, ``p_loo``, ``elpd_diff`` (>= 0: how far below the
    best), ``weight``, ``se``, ``dse`` (ArviZ 0.x's names and signs, under ArviZ 1.x too),
    best first.
    Fits are converted with ``to_arviz(log_likelihood=True, **kwargs)``: with the same
    ``seed`` and ``max_ratings`` they use the same ratings, so the comparison is valid.

    Parameters
    ----------
    fits : mapping of str to FitResult or ArviZ data
        The members to compare.
    **kwargs
        Passed to :func:`~bmczoo.diagnostics.to_arviz` for the fits.
    """
    datas = {name: _loglik_data(f, **kwargs) for name, f in fits.items()}
    return _arviz.compare(datas)


def _summary_data(fit, var_names, entries, num_draws: int, seed: int):
    """The ArviZ data :func:`summary` reads: ``fit`` itself when it is ArviZ data, else its
    conversion, with the names of ``var_names`` outside the default conversion (the link's
    ``lam_B_M``, a bias vector) requested."""
    if _is_arviz_data(fit):
        return fit
    extra = [v for v in (var_names or ()) if v in extra_var_names(fit)]
    return to_arviz(fit, var_names=extra or None, entries=entries, num_draws=num_draws, seed=seed)


def _summary_var_names(post, var_names) -> list[str]:
    """The default invariant variables present, or ``var_names`` checked against ``post``."""
    if var_names is None:
        return [v for v in INVARIANT_VARS if v in post.data_vars]
    var_names = list(var_names)
    missing = [v for v in var_names if v not in post.data_vars]
    if missing:
        raise ValueError(f"no posterior variable {missing}; available: {sorted(post.data_vars)}")
    return var_names


def _undefined_when_constant(table, post, var_names) -> None:
    """NaN diagnostics for quantities constant over all draws: ArviZ gives a constant
    quantity (a chain stuck at one count) ESS = the number of draws, which reads as
    perfect mixing, while its ESS, MCSE and R-hat are undefined."""
    diag = [c for c in table.columns if c.startswith(("ess_", "mcse_")) or c == "r_hat"]
    if not diag:
        return
    # exact test (a float sd of equal values need not be 0): the range over all draws of
    # each scalar, in the table's order (variables in turn, each in C order, as ArviZ lists them)
    constant = np.concatenate(
        [
            np.ravel(post[v].max(("chain", "draw")).values == post[v].min(("chain", "draw")).values)
            for v in var_names
        ]
    )
    if constant.size != len(table):  # pragma: no cover - ArviZ changed its rows
        raise RuntimeError("the summary's rows do not match the posterior's scalars")
    table.loc[constant, diag] = np.nan


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
        labels += [f"{v}[{lab}]" if da.ndim else v for lab in _arviz.scalar_labels(da)]
        means += np.ravel(da.values).astype(float).tolist()
    return pd.DataFrame({"mean": means}, index=labels)


def autocorrelation(
    fit_or_idata, *, var_name: str = "theta", max_lag: int | None = None
) -> np.ndarray:
    """Autocorrelation (``az.autocorr``) of each scalar of ``var_name`` by lag, averaged
    over chains: array (..., max_lag + 1) with the variable's trailing shape first
    (``theta``: (entry, lag)).  Lags count kept draws (after thinning)."""
    idata = fit_or_idata if _is_arviz_data(fit_or_idata) else to_arviz(fit_or_idata)
    x = np.asarray(_arviz.group(idata)[var_name].values, np.float64)  # (chain, draw, ...)
    C, D = x.shape[:2]
    flat = x.reshape(C, D, -1)
    L = D - 1 if max_lag is None else min(int(max_lag), D - 1)
    out = np.empty((flat.shape[2], L + 1))
    for e in range(flat.shape[2]):
        out[e] = np.mean([_arviz.autocorr(flat[c, :, e])[: L + 1] for c in range(C)], axis=0)
    return out.reshape(x.shape[2:] + (L + 1,))
