"""Numerical diagnostics on rotation- and label-invariant quantities.

``M``, ``N`` and the individual ``gamma_h`` are not identified (the posterior is invariant
under ``M -> M R``, ``N -> N R^{-T}`` for rotations R mixing columns with equal gamma, and
under permuting the columns together with gamma), so ESS and R-hat are computed on
``theta`` entries, sorted gamma, ``||theta||_F`` and the effective rank.
"""

from __future__ import annotations

import contextlib
import logging
import math

import numpy as np

from .convert import INVARIANT_VARS, fit_kind, to_arviz

__all__ = ["summary", "rank_posterior", "autocorrelation", "gamma_threshold", "prob_gamma_above"]


def _is_arviz_data(obj) -> bool:
    return hasattr(obj, "posterior") and not hasattr(obj, "meta")


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
    loggers = [logging.getLogger("arviz")] + [lg for lg in [getattr(az, "_log", None)] if lg is not None]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


def summary(fit, *, var_names=None, kind: str = "all", entries=None, num_draws: int = 500, seed: int = 0,
            round_to=None):
    """``az.summary`` of the invariant quantities of a fit: a pandas ``DataFrame`` with
    mean, sd, HDI, MCSE, ESS bulk/tail and R-hat per scalar (``theta[i,j]``,
    ``gamma_sorted[h]``, ``theta_fro``, ``eff_rank`` where available).

    Parameters
    ----------
    fit : a fit result, or ArviZ data from :func:`~bmczoo.diagnostics.to_arviz`
    var_names : list of str, optional
        Default: those of ``theta``, ``gamma_sorted``, ``theta_fro``, ``eff_rank`` present.
    kind : {"all", "stats", "diagnostics"}
        As in ``az.summary``.  With fewer than 4 draws in all (MAP) only the mean is given.
        Quantities constant over all draws get NaN diagnostics.
    entries, num_draws, seed :
        Passed to :func:`~bmczoo.diagnostics.to_arviz` (VB: draws from q, one chain: the
        ESS then measures those independent draws).  R-hat needs two chains or more: it
        is NaN for a single chain (VB, SVI, one-chain MCMC).
    """
    import arviz as az

    idata = fit if _is_arviz_data(fit) else to_arviz(fit, entries=entries, num_draws=num_draws, seed=seed)
    post = idata.posterior
    if var_names is None:
        var_names = [v for v in INVARIANT_VARS if v in post.data_vars]
    else:
        var_names = list(var_names)
        missing = [v for v in var_names if v not in post.data_vars]
        if missing:
            raise ValueError(f"no posterior variable {missing}; available: {sorted(post.data_vars)}")
    # a quantity constant over all draws (e.g. a sorted gamma of the discrete prior that
    # stays in the slab) has undefined ESS/MCSE: NaN, without numpy's 0/0 warnings
    with _single_chain_quiet(post.sizes["chain"]), np.errstate(divide="ignore", invalid="ignore"):
        if post.sizes["chain"] * post.sizes["draw"] < 4:
            return _mean_table(post, var_names)
        return az.summary(idata, var_names=var_names, kind=kind, round_to=round_to)


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


def _poisson_binomial(p: np.ndarray) -> np.ndarray:
    """Distribution of the number of successes of independent Bernoulli(p_h) (length K+1)."""
    out = np.zeros(p.size + 1)
    out[0] = 1.0
    for k, ph in enumerate(np.asarray(p, np.float64)):
        out[1 : k + 2] = out[1 : k + 2] * (1.0 - ph) + out[: k + 1] * ph
        out[0] *= 1.0 - ph
    return out


def prob_gamma_above(fit, threshold: float) -> np.ndarray | None:
    """``q(gamma_h > threshold)`` for each h of a VB fit, exactly from the parameters of
    ``q(gamma_h)`` (None when they are not recognised)."""
    q = fit.q_gamma
    K = np.asarray(fit.m).shape[-1]
    prior = (getattr(fit, "meta", None) or {}).get("prior")
    t = float(threshold)
    if "slab_prob" in q:
        p = np.asarray(q["slab_prob"], np.float64)
        return p * (float(prior.C) > t) + (1.0 - p) * (float(prior.eps) > t)
    if t <= 0:
        return np.ones(K)
    if "shape" in q and "scale" in q:  # 1/gamma ~ Gamma(shape, rate=scale): P(1/gamma < 1/t)
        import jax
        from jax.scipy.special import gammainc

        a = np.broadcast_to(np.asarray(q["shape"], np.float64), (K,))
        b = np.broadcast_to(np.asarray(q["scale"], np.float64), (K,))
        with jax.enable_x64(True):
            return np.asarray(gammainc(a, b / t), np.float64)
    if "ig_mean" in q and "ig_shape" in q:  # 1/gamma ~ IG(mu, lam): P(1/gamma < 1/t)
        import jax
        from jax.scipy.special import log_ndtr

        mu = np.broadcast_to(np.asarray(q["ig_mean"], np.float64), (K,))
        lam = np.broadcast_to(np.asarray(q["ig_shape"], np.float64), (K,))
        x = 1.0 / t
        r = np.sqrt(lam / x)
        with jax.enable_x64(True):
            a = np.asarray(log_ndtr(r * (x / mu - 1.0)), np.float64)
            b = 2.0 * lam / mu + np.asarray(log_ndtr(-r * (x / mu + 1.0)), np.float64)
        return np.clip(np.exp(np.logaddexp(a, b)), 0.0, 1.0)
    if prior is not None and getattr(prior, "name", "") == "fixed":
        return np.full(K, float(float(prior.gamma) > t))
    return None


def rank_posterior(fit, threshold: float, *, num_draws: int = 500, seed: int = 0) -> np.ndarray:
    """Posterior probabilities of ``#{h: gamma_h > threshold}`` = 0..K (array of K+1).

    MCMC and SVI: the frequencies over all draws of gamma.  VB: exact under the mean-field
    ``q`` (independent ``q(gamma_h)``: a Poisson-binomial law of the tail probabilities
    of each factor), falling back on ``num_draws`` draws from ``q`` for an unknown ``q``.
    """
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise ValueError(f"threshold must be a real number, got {threshold!r}")
    threshold = float(threshold)
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    kind = fit_kind(fit)
    if kind == "vb":
        p = prob_gamma_above(fit, threshold)
        if p is not None:
            return _poisson_binomial(p)
        g = to_arviz(fit, num_draws=num_draws, seed=seed).posterior["gamma"].values
    elif kind == "mcmc":
        prior = (getattr(fit, "meta", None) or {}).get("prior")
        if "gamma_slab_prob" in fit.samples and getattr(prior, "name", "") == "discrete":
            # NUTS on the discrete model integrates gamma out: its "gamma" is E[gamma | M, N].
            # Given M, N the gamma_h are independent two-point variables with
            # P(gamma_h = C) = gamma_slab_prob: average their Poisson-binomial laws.
            probs = np.asarray(fit.samples["gamma_slab_prob"], np.float64)
            probs = probs.reshape(-1, probs.shape[-1])
            if prior.C > threshold >= prior.eps:
                return np.mean([_poisson_binomial(q) for q in probs], axis=0)
            K = probs.shape[-1]
            out = np.zeros(K + 1)
            out[K if threshold < prior.eps else 0] = 1.0
            return out
        if "gamma" not in fit.samples:
            raise ValueError("the fit has no draws of gamma")
        g = np.asarray(fit.samples["gamma"])
    else:
        if "gamma" not in fit.draws:
            raise ValueError(
                "this fit has no draws of gamma (MAP integrates gamma out; the discrete prior's "
                "guide marginalises it)"
            )
        g = np.asarray(fit.draws["gamma"])
    K = g.shape[-1]
    counts = np.sum(g > threshold, axis=-1).ravel()
    return np.bincount(counts, minlength=K + 1) / counts.size


def gamma_threshold(fit) -> float:
    """A default threshold for counting "active" columns: for the discrete prior the
    geometric mean ``sqrt(C eps)`` of the spike and the slab; otherwise 1% of the largest
    posterior mean of the sorted gamma (a relative cut)."""
    prior = (getattr(fit, "meta", None) or {}).get("prior")
    if prior is not None and getattr(prior, "name", "") == "discrete":
        return float(math.sqrt(prior.C * prior.eps))
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


def autocorrelation(fit_or_idata, *, var_name: str = "theta", max_lag: int | None = None) -> np.ndarray:
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
