"""Outputs of the latent-Gaussian likelihoods (probit, ordered probit), on plain arrays.

A fit with :class:`~bmczoo.likelihoods.Probit` or :class:`~bmczoo.likelihoods.OrderedProbit`
predicts levels: its posterior predictive at an entry is a distribution over the ``L``
levels, ``P(Y_ij = l | data) = E[Phi(c_l - theta_ij) - Phi(c_{l-1} - theta_ij)]`` (the
expectation over the posterior of ``theta`` and the cut points).  Every method of the fit
derives from that vector: ``predict_proba`` (binary: ``P(Y = 1)``), ``predict`` (the
expected level, and with ``return_std`` its sd), ``predictive_interval`` (central
quantiles of the level distribution), ``log_predictive_density`` (``log P(Y = y)``).
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr

__all__ = [
    "level_log_probs_np",
    "draws_level_proba",
    "gaussian_level_proba",
    "level_summary",
    "level_interval",
    "level_lpd",
    "classification_metrics",
]

_BUDGET = 2**22


def _log_mass(a, b):
    """``log(Phi(b) - Phi(a))`` (float64 numpy), on the side where it does not cancel."""
    flip = a > 0
    a2, b2 = np.where(flip, -b, a), np.where(flip, -a, b)
    la, lb = log_ndtr(a2), log_ndtr(b2)
    with np.errstate(divide="ignore"):
        return lb + np.log1p(-np.exp(la - lb))


def level_log_probs_np(theta, cuts):
    """``log P(Y = l | theta, c)``: theta (...,), cuts (..., L-1) broadcast -> (..., L)."""
    theta = np.asarray(theta, np.float64)[..., None]
    cuts = np.asarray(cuts, np.float64)
    shape = np.broadcast_shapes(theta.shape[:-1], cuts.shape[:-1]) + (1,)
    inf = np.full(shape, np.inf)
    cuts = np.broadcast_to(cuts, shape[:-1] + cuts.shape[-1:])
    lo = np.concatenate([-inf, cuts], axis=-1)
    hi = np.concatenate([cuts, inf], axis=-1)
    return _log_mass(lo - theta, hi - theta)


def draws_level_proba(theta_blocks, cuts) -> np.ndarray:
    """Mean over draws of the level probabilities: ``theta_blocks`` yields ``(p0, p1,
    theta (S, p1 - p0))`` (:func:`bmczoo.inference.results.outputs.draw_blocks`), ``cuts`` (S, L-1).
    Returns (P, L)."""
    cuts = np.asarray(cuts, np.float64)
    blocks = list(theta_blocks)
    P = blocks[-1][1] if blocks else 0
    out = np.zeros((P, cuts.shape[-1] + 1))
    for p0, p1, t in blocks:
        out[p0:p1] = np.exp(level_log_probs_np(t, cuts[:, None, :])).mean(axis=0)
    return out


def gaussian_level_proba(mean, var, cuts) -> np.ndarray:
    """Level probabilities when ``theta ~ N(mean, var)`` and the cut points are fixed:
    ``z = theta + eps ~ N(mean, 1 + var)``, so ``P(Y = l) = Phi((c_l - mean) / s) -
    Phi((c_{l-1} - mean) / s)``, ``s = sqrt(1 + var)``.  (P,), (P,), (L-1,) -> (P, L)."""
    s = np.sqrt(1.0 + np.maximum(np.asarray(var, np.float64), 0.0))
    return np.exp(
        level_log_probs_np(
            np.asarray(mean, np.float64) / s, np.asarray(cuts, np.float64)[None] / s[:, None]
        )
    )


def level_summary(probs, levels) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of the level distribution: (P, L) -> (P,), (P,)."""
    lv = np.asarray(levels, np.float64)
    mean = probs @ lv
    var = probs @ (lv**2) - mean**2
    return mean, np.sqrt(np.maximum(var, 0.0))


def level_interval(probs, levels, prob: float) -> tuple[np.ndarray, np.ndarray]:
    """Central ``prob`` interval of the level distribution: the lowest level whose CDF
    reaches ``(1 - prob) / 2`` and the lowest whose CDF reaches ``(1 + prob) / 2``
    (covers at least ``prob``)."""
    lv = np.asarray(levels, np.float64)
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0  # rounding
    lo = np.argmax(cdf >= 0.5 * (1.0 - prob) - 1e-12, axis=1)
    hi = np.argmax(cdf >= 0.5 * (1.0 + prob) - 1e-12, axis=1)
    return lv[lo], lv[hi]


def level_lpd(probs, level_index) -> np.ndarray:
    """``log P(Y = y)`` per entry from the level probabilities (P, L) and the observed
    level indices (P,)."""
    p = probs[np.arange(probs.shape[0]), np.asarray(level_index)]
    with np.errstate(divide="ignore"):
        return np.log(p)


def classification_metrics(y, p) -> dict:
    """Log-loss, AUC and accuracy of predicted probabilities of binary outcomes.

    Parameters
    ----------
    y : array_like, shape (P,)
        Observed outcomes in {0, 1}.
    p : array_like, shape (P,)
        Predicted ``P(Y = 1)``.

    Returns
    -------
    dict
        ``"log_loss"`` (mean negative log-likelihood, natural log, ``p`` clipped to
        [1e-15, 1 - 1e-15]), ``"auc"`` (rank statistic, ties counted half) and
        ``"accuracy"`` (``p >= 0.5`` predicts 1).
    """
    y = np.asarray(y, np.float64)
    p = np.clip(np.asarray(p, np.float64), 1e-15, 1.0 - 1e-15)
    if y.shape != p.shape:
        raise ValueError(f"y and p must have the same shape, got {y.shape} and {p.shape}")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("y must hold binary outcomes 0 or 1")
    from scipy.stats import rankdata

    logloss = float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))
    n1, n0 = int(y.sum()), int((1 - y).sum())
    auc = float("nan")
    if n1 and n0:
        ranks = rankdata(p)
        auc = float((ranks[y == 1].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))
    return {"log_loss": logloss, "auc": auc, "accuracy": float(np.mean((p >= 0.5) == (y == 1)))}
