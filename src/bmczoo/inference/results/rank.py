"""The rank posterior and the chains' agreement on it, computed on a fit's arrays.

The number of active columns ``#{h: gamma_h > t}`` (its law: the Poisson-binomial law of
the per-draw probabilities :meth:`~bmczoo.priors.Prior.prob_above`, or of the exact
``q(gamma_h > t)`` of a variational fit) and, for a prior without column scales, the
effective rank of theta (its singular values above a threshold).  The result classes
give the probabilities through their hooks (``_prob_gamma_above``, ``_gamma_draws``) and
say whether their draws are chains (``has_chains``); nothing here depends on a fit's
family.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

import numpy as np

from ... import _arviz
from ..._checks import check_real
from . import arrays

__all__ = [
    "RankMixingWarning",
    "poisson_binomial",
    "gamma_threshold",
    "prob_gamma_above",
    "theta_sv_draws",
    "theta_rank_posterior",
    "rank_posterior",
    "rank_mixing",
    "SV_RELATIVE_THRESHOLD",
    "RHAT_ACTIVE_MAX",
    "MIN_DRAWS_SPLIT_RHAT",
]

#: R-hat of the number of active columns above which the chains are said to disagree
RHAT_ACTIVE_MAX = 1.05

#: fewest draws of a single chain for which its split R-hat (its two halves) is given
MIN_DRAWS_SPLIT_RHAT = 8

#: default threshold of :func:`theta_rank_posterior`, relative to the posterior mean of the
#: largest singular value of theta
SV_RELATIVE_THRESHOLD = 0.01


class RankMixingWarning(UserWarning):
    """The chains of an MCMC fit disagree on the number of active columns."""


class _DropShapeNotice(logging.Filter):
    def filter(self, record):
        return not record.getMessage().startswith("Shape validation failed")


@contextlib.contextmanager
def single_chain_quiet(num_chains: int):
    """With one chain ArviZ logs a shape notice for R-hat (which is then NaN): drop it."""
    if num_chains >= 2:
        yield
        return
    flt = _DropShapeNotice()
    loggers = _arviz.loggers()
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


def poisson_binomial(p) -> np.ndarray:
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


def check_threshold(threshold) -> float:
    return check_real("threshold", threshold)


def gamma_threshold(fit) -> float:
    """A default threshold for counting "active" columns: the prior's
    :meth:`~bmczoo.priors.Prior.active_threshold` (e.g. ``sqrt(C eps)`` for the discrete
    prior) where it has one; otherwise 1% of the largest posterior mean of gamma (a
    relative cut).  ``ValueError`` for a prior without column scales."""
    arrays.require_column_scales(fit, "gamma_threshold")
    return arrays.active_threshold(fit, fit._gamma_draws())


def prob_gamma_above(fit, threshold: float) -> np.ndarray:
    """``P(gamma_h > threshold)`` for each h (array of K).

    VB: exactly under ``q(gamma_h)`` (the prior's
    :meth:`~bmczoo.priors.Prior.q_prob_above`).  MCMC and SVI: the average over the draws
    of ``P(gamma_h > threshold | draw)`` (:meth:`~bmczoo.priors.Prior.prob_above`: the
    indicator of the drawn ``gamma_h``, or its exact conditional probability for a model
    that integrates gamma out).  ``ValueError`` for a prior without column scales.
    """
    threshold = check_threshold(threshold)
    arrays.require_column_scales(fit, "prob_gamma_above")
    return fit._prob_gamma_above(threshold).mean(axis=0)


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
    post = arrays.fit_arrays(fit, num_draws=num_draws, seed=seed).groups["posterior"]
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
    t = check_threshold(threshold)
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
    if arrays.lacks_column_scales(fit):
        return theta_rank_posterior(fit, threshold, num_draws=num_draws, seed=seed)
    threshold = gamma_threshold(fit) if threshold is None else check_threshold(threshold)
    mix = rank_mixing(fit, threshold)
    if mix is not None and mix["disagree"]:
        warnings.warn(
            f"the {mix['num_chains']} chains disagree on the number of active columns "
            f"(threshold {threshold:.4g}): R-hat {mix['r_hat']:.3g}, most frequent count per chain "
            f"{mix['chain_modes']}; the rank posterior reflects the starting points (run longer, with "
            "the column moves on: bmc.fit's default, column_moves=None)",
            RankMixingWarning,
            stacklevel=3,
        )
    return poisson_binomial(fit._prob_gamma_above(threshold)).mean(axis=0)


def _undefined_mixing(x: np.ndarray, t: float, r_hat_kind: str) -> dict:
    """:func:`rank_mixing` of a constant count: ESS and R-hat undefined (ArviZ would give
    the draw count)."""
    C = x.shape[0]
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


def _ess_rhat(x: np.ndarray):
    """``(ess_bulk, ess_tail, r_hat, groups, defined)`` of the (chain, draw) counts: R-hat
    compares the chains, or one chain's two halves (an odd last draw dropped)."""
    C = x.shape[0]
    with (
        single_chain_quiet(C),
        np.errstate(divide="ignore", invalid="ignore"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", RuntimeWarning)
        ess_bulk = _arviz.ess(x, method="bulk") if x.size >= 4 else float("nan")
        ess_tail = _arviz.ess(x, method="tail") if x.size >= 4 else float("nan")
        groups = x if C >= 2 else x[:, : 2 * (x.shape[1] // 2)].reshape(2, -1)
        defined = x.shape[1] >= (4 if C >= 2 else MIN_DRAWS_SPLIT_RHAT)
        r_hat = _arviz.rhat(groups) if defined else float("nan")
    return ess_bulk, ess_tail, r_hat, groups, defined


def _gamma_chains(fit) -> dict | None:
    """The draws of a fit whose draws are chains (``has_chains``: ``samples``), when gamma
    is drawn with (chain, draw) axes (the active-column count of each chain is then
    defined); else None."""
    if not fit.has_chains:
        return None
    g = fit.samples.get("gamma")
    return fit.samples if g is not None and np.ndim(g) == 3 else None


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
    draws = _gamma_chains(fit)
    if draws is None:
        return None
    arrays.require_column_scales(fit, "rank_mixing")
    t = gamma_threshold(fit) if threshold is None else check_threshold(threshold)
    x = arrays.num_active_draws(fit, draws, t)  # (chain, draw)
    C = x.shape[0]
    r_hat_kind = "chains" if C >= 2 else "split one chain"
    if np.ptp(x) == 0:
        return _undefined_mixing(x, t, r_hat_kind)
    ess_bulk, ess_tail, r_hat, groups, defined = _ess_rhat(x)
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
