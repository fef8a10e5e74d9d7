"""Ranking metrics of recommendations against held-out ratings.

``items`` is what :meth:`~bmczoo.inference.FitResult.recommend` returns: (U, n) item indices per user, best
first (``-1`` for an empty place).  The relevant items of user ``u`` are the held-out
ratings ``test`` of that user with value ``>= threshold`` (default 4: "liked" on a 1-5
star scale).  Users without a relevant held-out item are left out of the mean (NaN when
no user has one).

:func:`ranking_metrics`: precision, recall, NDCG and MAP at ``k`` and AUC of any fit's
rankings of held-out pairs, the training pairs excluded, for every user at once (a chunk
of users at a time); :func:`per_user_ranking` the same per user;
:func:`metric_posterior` each user's posterior of them (rankings by posterior draws) and
:func:`top_k_probability` the posterior probability of each item to be in a user's top
``k``.

Binary and ordinal predictions (probit and ordered-probit fits, or any model that gives
probabilities): :func:`log_loss`, :func:`auc`, :func:`accuracy` and
:func:`classification_metrics` (all three at once) for outcomes 0/1 and predicted
``P(Y = 1)``; :func:`level_log_loss` for level probabilities (P, L) and the observed
level indices; :func:`gaussian_level_proba` discretises a Gaussian predictive onto levels
so that a Gaussian model can be scored by the same level log-loss.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_ratings
from ._ranking import metric_posterior, per_user_ranking, ranking_metrics, top_k_probability
from .inference.results.levels import classification_metrics

__all__ = [
    "ranking_metrics",
    "per_user_ranking",
    "metric_posterior",
    "top_k_probability",
    "precision_at_k",
    "recall_at_k",
    "ndcg_at_k",
    "relevant_items",
    "log_loss",
    "auc",
    "accuracy",
    "classification_metrics",
    "level_log_loss",
    "gaussian_level_proba",
]


def relevant_items(test, users, threshold: float = 4.0) -> list[set]:
    """The set of held-out items with value ``>= threshold`` of each user.

    Parameters
    ----------
    test : RatingData
        Held-out ratings.
    users : array_like of int, shape (U,)
        Row indices of the users.
    threshold : float
        Held-out values ``>= threshold`` are relevant.

    Returns
    -------
    list of set
        One set of column indices per user.
    """
    test = check_ratings(test, "test")
    users = np.asarray(users)
    keep = np.asarray(test.values) >= threshold
    rows, cols = np.asarray(test.rows)[keep], np.asarray(test.cols)[keep]
    by_user: dict[int, set] = {}
    for r, c in zip(rows.tolist(), cols.tolist()):
        by_user.setdefault(r, set()).add(c)
    return [by_user.get(int(u), set()) for u in users]


def _prepare(users, items, k):
    items = np.asarray(items)
    if items.ndim != 2 or items.shape[0] != len(np.asarray(users)):
        raise ValueError(f"items must be (len(users), n), got shape {items.shape}")
    if k is None:
        k = items.shape[1]
    k = int(k)
    if not 1 <= k <= items.shape[1]:
        raise ValueError(f"k must be in [1, {items.shape[1]}], got {k}")
    return items[:, :k], k


def precision_at_k(test, users, items, k: int | None = None, threshold: float = 4.0) -> float:
    """Mean over users (with a relevant held-out item) of ``|top k ∩ relevant| / k``.

    Parameters
    ----------
    test : RatingData
        Held-out ratings.
    users : array_like of int, shape (U,)
        Row indices of the users.
    items : array_like of int, shape (U, n)
        Recommended item indices per user, best first (``fit.recommend(users, n)[0]``).
    k : int, optional
        Number of top items scored, ``1 <= k <= n`` (default ``n``).
    threshold : float
        Held-out values ``>= threshold`` are relevant.

    Returns
    -------
    float
        The mean over users with a relevant held-out item (NaN when none has one).
    """
    items, k = _prepare(users, items, k)
    rel = relevant_items(test, users, threshold)
    vals = [sum(int(i) in R for i in row) / k for row, R in zip(items, rel) if R]
    return float(np.mean(vals)) if vals else float("nan")


def recall_at_k(test, users, items, k: int | None = None, threshold: float = 4.0) -> float:
    """Mean over users of ``|top k ∩ relevant| / min(k, |relevant|)`` (the
    capped recall: 1 when the top k hold as many relevant items as they can).

    Parameters
    ----------
    test : RatingData
        Held-out ratings.
    users : array_like of int, shape (U,)
        Row indices of the users.
    items : array_like of int, shape (U, n)
        Recommended item indices per user, best first (``fit.recommend(users, n)[0]``).
    k : int, optional
        Number of top items scored, ``1 <= k <= n`` (default ``n``).
    threshold : float
        Held-out values ``>= threshold`` are relevant.

    Returns
    -------
    float
        The mean over users with a relevant held-out item (NaN when none has one).
    """
    items, k = _prepare(users, items, k)
    rel = relevant_items(test, users, threshold)
    vals = [sum(int(i) in R for i in row) / min(k, len(R)) for row, R in zip(items, rel) if R]
    return float(np.mean(vals)) if vals else float("nan")


def ndcg_at_k(test, users, items, k: int | None = None, threshold: float = 4.0) -> float:
    """Mean over users of binary-relevance NDCG@k: ``sum_{rank r, item relevant}
    1/log2(r + 1)`` over the ideal ``sum_{r <= min(k, |relevant|)} 1/log2(r + 1)``.

    Parameters
    ----------
    test : RatingData
        Held-out ratings.
    users : array_like of int, shape (U,)
        Row indices of the users.
    items : array_like of int, shape (U, n)
        Recommended item indices per user, best first (``fit.recommend(users, n)[0]``).
    k : int, optional
        Number of top items scored, ``1 <= k <= n`` (default ``n``).
    threshold : float
        Held-out values ``>= threshold`` are relevant.

    Returns
    -------
    float
        The mean over users with a relevant held-out item (NaN when none has one).
    """
    items, k = _prepare(users, items, k)
    rel = relevant_items(test, users, threshold)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    vals = []
    for row, R in zip(items, rel):
        if not R:
            continue
        gain = np.array([int(i) in R for i in row], np.float64)
        vals.append(float(gain @ disc / disc[: min(k, len(R))].sum()))
    return float(np.mean(vals)) if vals else float("nan")


# --------------------------------------------------------------------------- binary / ordinal
def log_loss(y, p) -> float:
    """Mean negative log-likelihood (natural log) of outcomes ``y`` in {0, 1} under predicted
    ``P(Y = 1) = p`` (clipped to [1e-15, 1 - 1e-15]).

    Parameters
    ----------
    y : array_like, shape (P,)
        Observed outcomes in {0, 1}.
    p : array_like, shape (P,)
        Predicted ``P(Y = 1)``.
    """
    return classification_metrics(y, p)["log_loss"]


def auc(y, p) -> float:
    """Area under the ROC curve of scores ``p`` for outcomes ``y`` in {0, 1} (the rank
    statistic, ties counted half; NaN when only one class is present).

    Parameters
    ----------
    y : array_like, shape (P,)
        Observed outcomes in {0, 1}.
    p : array_like, shape (P,)
        Predicted ``P(Y = 1)``.
    """
    return classification_metrics(y, p)["auc"]


def accuracy(y, p) -> float:
    """Fraction of outcomes ``y`` in {0, 1} predicted right by ``p >= 0.5``.

    Parameters
    ----------
    y : array_like, shape (P,)
        Observed outcomes in {0, 1}.
    p : array_like, shape (P,)
        Predicted ``P(Y = 1)``.
    """
    return classification_metrics(y, p)["accuracy"]


def level_log_loss(probs, level_index) -> float:
    """Mean ``-log P(Y = y)`` of observed levels (natural log).

    Parameters
    ----------
    probs : array_like, shape (P, L)
        Level probabilities, rows summing to 1 (e.g. ``fit.predict_proba`` of an
        ordered-probit fit).
    level_index : array_like of int, shape (P,)
        The index of each observed level among the L levels (``likelihood.level_index``).

    Returns
    -------
    float
        The level log-loss; a zero probability of an observed level gives ``inf``.
    """
    from .inference.results.levels import level_lpd

    probs = np.asarray(probs, np.float64)
    idx = np.asarray(level_index)
    if probs.ndim != 2 or idx.shape != probs.shape[:1]:
        raise ValueError(
            f"probs must be (P, L) and level_index (P,), got {probs.shape} and {idx.shape}"
        )
    if idx.size and (
        not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= probs.shape[1]
    ):
        raise ValueError(f"level_index must hold integers in [0, {probs.shape[1] - 1}]")
    return float(-np.mean(level_lpd(probs, idx)))


def gaussian_level_proba(mean, sd, levels) -> np.ndarray:
    """Level probabilities of a Gaussian predictive ``N(mean, sd^2)``: the mass of the
    interval of each level between the mid-points of adjacent levels (the lowest and
    highest levels take the tails).  With ``fit.predict(rows, cols, return_std=True)`` of a
    Gaussian fit it scores that fit by :func:`level_log_loss` (a moment-matched
    approximation of its predictive).

    Parameters
    ----------
    mean, sd : array_like, shape (P,)
        Predictive means and standard deviations (``sd > 0``).
    levels : array_like, shape (L,)
        The levels, strictly increasing (at least two).

    Returns
    -------
    numpy.ndarray, shape (P, L)
        The probability of each level.
    """
    from scipy.special import ndtr

    lv = np.asarray(levels, np.float64)
    if lv.ndim != 1 or lv.size < 2 or np.any(np.diff(lv) <= 0):
        raise ValueError(f"levels must be at least two strictly increasing numbers, got {levels!r}")
    mean = np.asarray(mean, np.float64)[:, None]
    sd = np.asarray(sd, np.float64)[:, None]
    if np.any(sd <= 0):
        raise ValueError("sd must be positive")
    edges = np.concatenate([[-np.inf], 0.5 * (lv[1:] + lv[:-1]), [np.inf]])
    z = (edges[None, :] - mean) / sd
    # upper-tail form where it does not cancel: 1 - Phi(z) = Phi(-z)
    upper = z[:, :-1] > 0
    lo, hi = ndtr(z[:, :-1]), ndtr(z[:, 1:])
    lo_u, hi_u = ndtr(-z[:, :-1]), ndtr(-z[:, 1:])
    return np.where(upper, lo_u - hi_u, hi - lo)
