"""A fit's quantities as plain arrays, for ArviZ (:mod:`bmczoo._arviz`) and the diagnostics.

:func:`fit_arrays` is the one conversion of a fit, the same for every result class (its
keywords are those of every ``to_arviz``): it asks the fit for what differs by family
through the result's abstract hooks (``_posterior_arrays``: the default posterior,
sample stats and traces; ``_extra_draws``: stored draws on request; ``_tau_draws``: the
draws of a learned noise precision; ``_ratings_theta_tau`` and ``_drawn_cuts``: theta,
tau and the cut points at given ratings) and assembles the groups as a
:class:`~bmczoo._arviz.FitArrays`, which :func:`bmczoo._arviz.arrays_to_arviz` alone
turns into ArviZ data.  The variables are described in :mod:`bmczoo.diagnostics.convert`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..._arviz import DEFAULT_VARS, FitArrays, assemble
from ...priors import Prior
from ...priors.base import indicator_above
from .loglik import add_predictive_groups, check_bound

__all__ = [
    "Posterior",
    "fit_arrays",
    "extra_var_names",
    "default_entries",
    "active_threshold",
    "num_active_draws",
    "draws_prob_above",
    "MAX_DRAWS",
    "MAX_RATINGS",
]

DEFAULT_NUM_TRACK = 8
MAX_DRAWS = 1000
MAX_RATINGS = 5000


class Posterior(NamedTuple):
    """What a result class's ``_posterior_arrays`` hook returns: the default ``post``
    (posterior), ``stats`` (sample stats) and ``conv`` (per-iteration traces) groups,
    the family's ``attrs`` (its representation and settings), the ``coords`` found with
    the variables and the entries ``rows``, ``cols`` of ``theta``."""

    post: dict
    stats: dict
    conv: dict
    attrs: dict
    coords: dict
    rows: np.ndarray
    cols: np.ndarray


# --------------------------------------------------------------------------- the fit's info
def prior_of(fit) -> Prior | None:
    """The fit's prior (``fit.info.prior``), or None when the fit records none."""
    prior = getattr(fit.info, "prior", None)
    return prior if isinstance(prior, Prior) else None


def setting(fit, name: str):
    """The setting ``name`` of the fit's settings object, or None when its method has no
    such setting."""
    return getattr(fit.info.settings, name, None)


def offset_of(fit) -> float:
    """The centring offset ``fit.info.shift.offset``."""
    return float(fit.info.shift.offset)


def lacks_column_scales(fit) -> bool:
    """Whether the fit's prior has no column scales ``gamma_h`` (``has_column_scales =
    False``, e.g. :class:`~bmczoo.priors.NormalWishart`)."""
    prior = prior_of(fit)
    return prior is not None and not prior.has_column_scales


def require_column_scales(fit, what: str) -> None:
    """``ValueError`` naming the prior when the fit's prior has no column scales gamma."""
    if lacks_column_scales(fit):
        name = prior_of(fit).name
        raise ValueError(
            f"{name} has no column scales gamma: {what} applies only to priors with column "
            f"scales gamma_h (the draws of a {name} fit hold the prior's own state instead)"
        )


# --------------------------------------------------------------------------- entries


def as_entries(entries) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` or a sequence of ``(i, j)`` pairs -> two int arrays."""
    if isinstance(entries, tuple) and len(entries) == 2 and np.ndim(entries[0]) == 1:
        rows, cols = entries
    else:
        arr = np.asarray(entries)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError("entries must be (rows, cols) arrays or a sequence of (i, j) pairs")
        rows, cols = arr[:, 0], arr[:, 1]
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(
            f"entries: rows {rows.shape} and cols {cols.shape} must be 1-D of equal length"
        )
    if rows.size and (rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu"):
        if not (np.all(rows == np.round(rows)) and np.all(cols == np.round(cols))):
            raise ValueError("entries must be integer (row, col) indices")
    return rows.astype(np.int64), cols.astype(np.int64)


def check_in_shape(rows, cols, shape):
    if shape is None:
        return
    m1, m2 = shape
    bad = (rows < 0) | (rows >= m1) | (cols < 0) | (cols >= m2)
    if np.any(bad):
        k = int(np.argmax(bad))
        raise ValueError(
            f"entries: ({rows[k]}, {cols[k]}) at position {k} is outside the {m1} x {m2} matrix"
        )


def default_entries(fit, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The fit's tracked entries (``track_rows``, ``track_cols``) or, where it has none,
    ``8`` distinct entries drawn uniformly from the matrix with ``default_rng(seed)``."""
    tr, tc = getattr(fit, "track_rows", None), getattr(fit, "track_cols", None)
    if tr is not None and tc is not None:
        return np.asarray(tr, np.int64), np.asarray(tc, np.int64)
    m1, m2 = fit.shape
    num = min(DEFAULT_NUM_TRACK, m1 * m2)
    keys = np.sort(np.random.default_rng(seed).choice(m1 * m2, size=num, replace=False))
    return keys // m2, keys % m2


def resolve_entries(fit, entries, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The entries of theta to convert: ``entries`` checked against the fit's shape, or
    :func:`default_entries`."""
    if entries is not None:
        rows, cols = as_entries(entries)
        check_in_shape(rows, cols, fit.shape)
        return rows, cols
    return default_entries(fit, seed)


def add_noise_sd(post: dict, fit, num_draws: int, seed: int) -> None:
    """``noise_sd = 1 / sqrt(tau)`` per draw (data scale) for a likelihood that learns its
    noise, from the fit's ``_tau_draws`` (aligned with the posterior's (chain, draw))."""
    if not fit.info.likelihood.learned or not post:
        return
    tau = fit._tau_draws(num_draws, seed)
    if tau is None:
        return
    tau = np.asarray(tau, np.float64)
    lead = next(iter(post.values())).shape[:2]
    if tau.shape == lead:
        post["noise_sd"] = 1.0 / np.sqrt(tau)


def active_threshold(fit, gamma=None) -> float:
    """The threshold ``t`` on gamma_h of an "active" column: the prior's
    :meth:`~bmczoo.priors.Prior.active_threshold` where it has one, else 1% of the largest
    posterior mean of ``gamma`` (draws (..., K), default the fit's)."""
    prior = prior_of(fit)
    t = prior.active_threshold() if prior is not None else None
    if t is not None:
        return float(t)
    if gamma is None:
        raise ValueError("the fit has no gamma")
    g = np.asarray(gamma, np.float64)
    return 0.01 * float(np.max(np.mean(g.reshape(-1, g.shape[-1]), axis=0)))


def draws_prob_above(fit, draws: dict, threshold: float) -> np.ndarray:
    """``P(gamma_h > threshold | draw)`` (S, K) for the draws (the prior's ``prob_above``;
    without a recorded prior, the indicator of the drawn gamma_h)."""
    prior = prior_of(fit)
    prob_above = prior.prob_above if prior is not None else indicator_above
    p = np.asarray(prob_above(draws, threshold), np.float64)
    return p.reshape(-1, p.shape[-1])


def num_active_draws(fit, draws: dict, threshold: float | None = None) -> np.ndarray:
    """``sum_h P(gamma_h > t | draw)`` for every draw (the draws' leading axes): the
    number of active columns (an integer count where gamma is drawn)."""
    t = active_threshold(fit, draws.get("gamma")) if threshold is None else float(threshold)
    prior = prior_of(fit)
    prob_above = prior.prob_above if prior is not None else indicator_above
    return np.sum(np.asarray(prob_above(draws, t), np.float64), axis=-1)


# --------------------------------------------------------------------------- the template
def check_var_names(var_names) -> list[str]:
    if var_names is None:
        return []
    if isinstance(var_names, str):
        return [var_names]
    names = list(var_names)
    bad = [v for v in names if not isinstance(v, str)]
    if bad:
        raise TypeError(f"var_names must be variable names (str), got {bad!r}")
    return names


def add_extras(post: dict, fit, var_names: list[str], full: bool) -> None:
    """Add the requested stored draws (the fit's ``_extra_draws``) to the default
    posterior; ``ValueError`` naming the unknown names and those available."""
    if not var_names and not full:
        return
    extra = fit._extra_draws(post)
    unknown = [v for v in var_names if v not in extra and v not in post]
    if unknown:
        raise ValueError(
            f"to_arviz: no variable {unknown} in this fit; the default posterior holds "
            f"{sorted(post)}, var_names= can add {sorted(extra) or 'nothing'} "
            f"(full=True adds them all)"
        )
    for name in extra if full else var_names:
        if name not in post:
            post[name] = extra[name]


def default_posterior(fit, entries, num_draws: int, seed: int) -> Posterior:
    """The default contents of the conversion: the fit's ``_posterior_arrays`` and, for a
    likelihood that learns its noise, ``noise_sd``."""
    p = fit._posterior_arrays(entries, num_draws, seed)
    add_noise_sd(p.post, fit, num_draws, seed)
    return p


def extra_var_names(fit) -> list[str]:
    """The names :func:`~bmczoo.diagnostics.to_arviz` adds on request (``var_names=``;
    ``full=True`` adds them all): the stored draws that are not in its default posterior,
    e.g. a Gibbs fit's ``row_bias``, ``col_bias`` (one value per row / column of Y),
    ``M``, ``N`` (the factor draws, with ``store_factors``), ``tau``, ``row_bias_var``,
    ``col_bias_var`` and a Normal-Wishart state's ``mu_M``, ``Lambda_M``, ``mu_N``,
    ``Lambda_N``.  Sorted; empty for a VB fit (its posterior is drawn from q).

    Parameters
    ----------
    fit : FitResult
        Any fit result.
    """
    if fit.has_q:
        return []
    post = default_posterior(fit, None, 1, 0).post
    return sorted(fit._extra_draws(post))


def base_attrs(fit) -> dict[str, Any]:
    """The attributes every group gets, from the fit's typed info."""
    prior = prior_of(fit)
    return {
        "method": str(fit.info.method),
        "prior": "" if prior is None else str(prior.name),
        "K": int(fit.info.K),
        "theta_offset": offset_of(fit),
        "theta_scale": "model (centred): add theta_offset for the original scale",
    }


def fit_arrays(
    fit,
    *,
    var_names=None,
    full: bool = False,
    entries=None,
    num_draws: int = 500,
    seed: int = 0,
    log_likelihood=False,
    max_draws: int = MAX_DRAWS,
    max_ratings: int = MAX_RATINGS,
) -> FitArrays:
    """The arrays behind :func:`~bmczoo.diagnostics.to_arviz` (see
    :mod:`bmczoo.diagnostics.convert` for the variables).

    Parameters
    ----------
    fit : FitResult
        Any fit result (``GibbsFit``, ``NUTSFit``, ``VBFit``, ``SVIFit``, ``MAPFit``).
    var_names : str or list of str, optional
        Variables to add to the default posterior: stored draws such as ``row_bias``,
        ``col_bias``, ``M``, ``N``, ``tau``, ``Lambda_M``
        (:func:`~bmczoo.diagnostics.extra_var_names` lists those of a fit; names already
        in the default posterior are accepted).  An unknown name raises ``ValueError``
        listing the available ones.
    full : bool
        Add every stored draw (all of :func:`~bmczoo.diagnostics.extra_var_names`).
    entries : (rows, cols) or sequence of (i, j), optional
        Entries of ``theta`` to include; default the fit's tracked entries (VB/SVI fits
        without tracked entries: 8 entries drawn uniformly with ``default_rng(seed)``).
        Gibbs/NUTS: entries must be tracked, or the factor draws stored.
    num_draws, seed : int
        VB only: number of draws from ``q`` and the seed of ``numpy.random.default_rng``
        (the seed also draws the rating subsample and the predictive replicates).
    log_likelihood : bool or RatingData
        Add the ``log_likelihood``, ``posterior_predictive`` and ``observed_data`` groups
        of the training ratings (``True``) or of the given ratings
        (:mod:`bmczoo.diagnostics.convert`).
    max_draws, max_ratings : int
        Bounds of those groups (:mod:`bmczoo.diagnostics.convert`).

    Returns
    -------
    FitArrays
    """
    var_names = check_var_names(var_names)
    p = default_posterior(fit, entries, num_draws, seed)
    post = {
        k: p.post[k]
        for k in sorted(
            p.post,
            key=lambda k: DEFAULT_VARS.index(k) if k in DEFAULT_VARS else len(DEFAULT_VARS),
        )
    }
    if post:
        add_extras(post, fit, var_names, bool(full))
    attrs = dict(p.attrs)
    if "theta" in post:
        attrs["theta_offset"] = offset_of(fit)
    fa = assemble(
        post, p.stats, p.conv, p.rows, p.cols, {**base_attrs(fit), **attrs}, fit.info.K, p.coords
    )
    if log_likelihood is not False and log_likelihood is not None:
        bounds = (check_bound("max_draws", max_draws), check_bound("max_ratings", max_ratings))
        add_predictive_groups(fa, fit, log_likelihood, num_draws, seed, bounds)
    return fa
