"""Ranking metrics of recommendations against held-out ratings.

``items`` is what :meth:`FitResult.recommend` returns: (U, n) item indices per user, best
first (``-1`` for an empty place).  The relevant items of user ``u`` are the held-out
ratings ``test`` of that user with value ``>= threshold`` (default 4: "liked" on a 1-5
star scale).  Users without a relevant held-out item are left out of the mean (NaN when
no user has one).
"""

from __future__ import annotations

import numpy as np

from ._checks import check_ratings

__all__ = ["precision_at_k", "recall_at_k", "ndcg_at_k", "relevant_items"]


def relevant_items(test, users, threshold: float = 4.0) -> list[set]:
    """The set of held-out items with value ``>= threshold`` of each user."""
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
    """Mean over users (with a relevant held-out item) of ``|top k ∩ relevant| / k``."""
    items, k = _prepare(users, items, k)
    rel = relevant_items(test, users, threshold)
    vals = [sum(int(i) in R for i in row) / k for row, R in zip(items, rel) if R]
    return float(np.mean(vals)) if vals else float("nan")


def recall_at_k(test, users, items, k: int | None = None, threshold: float = 4.0) -> float:
    """Mean over users of ``|top k ∩ relevant| / min(k, |relevant|)`` (the
    capped recall: 1 when the top k hold as many relevant items as they can)."""
    items, k = _prepare(users, items, k)
    rel = relevant_items(test, users, threshold)
    vals = [sum(int(i) in R for i in row) / min(k, len(R)) for row, R in zip(items, rel) if R]
    return float(np.mean(vals)) if vals else float("nan")


def ndcg_at_k(test, users, items, k: int | None = None, threshold: float = 4.0) -> float:
    """Mean over users of binary-relevance NDCG@k: ``sum_{rank r, item relevant}
    1/log2(r + 1)`` over the ideal ``sum_{r <= min(k, |relevant|)} 1/log2(r + 1)``."""
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
