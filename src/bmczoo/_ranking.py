"""Top-N metrics of a fit for every user at once (:func:`bmczoo.evaluation.ranking_metrics`).

Each user's candidates are the items not in its training pairs; the fit ranks them
(:meth:`~bmczoo.inference.FitResult.recommend` over every candidate, a chunk of users at a
time: never an ``m1 x m2`` array), and the held-out pairs are the relevant items.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_int, check_ratings

__all__ = ["ranking_metrics", "per_user_ranking", "metric_posterior", "top_k_probability"]

#: the metrics of :func:`ranking_metrics`, in the order of its dict
METRICS = ("precision", "recall", "ndcg", "map", "auc")

_BUDGET = 1 << 22  # numbers per chunk of users (scores of all their candidates)


def _chunk_metrics(items, scores, relevant: np.ndarray, n_cand: np.ndarray, k: int) -> np.ndarray:
    """(B, 5) metrics of a chunk of users from their full rankings.

    ``items``/``scores``: (B, m2) candidates best first (item ``-1`` past the last
    candidate); ``relevant``: (B, m2) boolean, item relevant for the user; ``n_cand``: the
    number of candidates of each user."""
    B = items.shape[0]
    valid = items >= 0
    hit = np.zeros(items.shape, bool)
    hit[valid] = relevant[np.nonzero(valid)[0], items[valid]]
    P = hit.sum(1)  # relevant candidates (relevant training pairs are not candidates)
    top = hit[:, :k]
    hits = top.sum(1)
    cap = np.minimum(k, P)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = np.cumsum(disc)[np.maximum(cap, 1) - 1]
    prec_at = np.cumsum(top, 1) / np.arange(1, k + 1)
    out = np.full((B, 5), np.nan)
    has = P > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:, 0] = hits / k
        out[:, 1] = hits / cap
        out[:, 2] = (top * disc).sum(1) / ideal
        out[:, 3] = (prec_at * top).sum(1) / cap
    out[~has, :4] = np.nan
    for b in np.flatnonzero(has & (n_cand > P)):  # AUC: ties count one half
        c = int(n_cand[b])
        s, h = scores[b, :c], hit[b, :c]
        neg = np.sort(s[~h])
        below = np.searchsorted(neg, s[h], "left")
        tied = np.searchsorted(neg, s[h], "right") - below
        out[b, 4] = (below + 0.5 * tied).sum() / (h.sum() * neg.size)
    return out


def per_user_ranking(
    fit,
    train,
    test,
    k: int = 10,
    *,
    users=None,
    threshold: float | None = None,
    by: str = "mean",
    prob: float = 0.9,
    seed: int | None = None,
    batch_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(users, values)``: the metrics of :func:`ranking_metrics` per user, ``values`` of
    shape (len(users), 5) in the order precision, recall, NDCG, MAP (at ``k``) and AUC; NaN
    for a user without a relevant held-out candidate (AUC: or without a non-relevant one).

    Parameters
    ----------
    fit, train, test, k, users, threshold, by, prob, seed, batch_size
        As for :func:`ranking_metrics`.

    Returns
    -------
    users : numpy.ndarray of int
    values : numpy.ndarray, shape (len(users), 5)
    """
    train = check_ratings(train, "train")
    test = check_ratings(test, "test")
    m1, m2 = fit.shape
    for name, d in (("train", train), ("test", test)):
        if d.shape != (m1, m2):
            raise ValueError(f"{name} has shape {d.shape}, the fit has {(m1, m2)}")
    k = check_int("k", k, minimum=1)
    if k > m2:
        raise ValueError(f"k={k} exceeds the number of items {m2}")
    held = test.row_view  # the held-out pairs by user (cached on the data)
    keep = np.ones(test.n, bool) if threshold is None else held.values >= threshold
    if users is None:
        user_of = np.repeat(np.arange(m1), np.diff(held.indptr))
        users = np.flatnonzero(np.bincount(user_of[keep], minlength=m1))
    users = np.asarray(users, np.int64).ravel()
    if users.size and (users.min() < 0 or users.max() >= m1):
        raise ValueError(f"users must be row indices in 0..{m1 - 1}")
    B = int(batch_size) if batch_size else max(1, _BUDGET // m2)
    out = np.full((users.size, 5), np.nan)
    for b0 in range(0, users.size, B):
        u = users[b0 : b0 + B]
        items, scores = fit.recommend(
            u, n=m2, exclude_seen=True, seen=train, by=by, prob=prob, seed=seed
        )
        relevant = np.zeros((u.size, m2), bool)
        for i, user in enumerate(u):
            a, b = held.indptr[user], held.indptr[user + 1]
            relevant[i, held.index[a:b][keep[a:b]]] = True
        n_cand = m2 - train.row_counts[u]
        out[b0 : b0 + u.size] = _chunk_metrics(
            np.asarray(items), np.asarray(scores, np.float64), relevant, n_cand, k
        )
    return users, out


def ranking_metrics(
    fit,
    train,
    test,
    k: int = 10,
    *,
    users=None,
    threshold: float | None = None,
    by: str = "mean",
    prob: float = 0.9,
    seed: int | None = None,
    batch_size: int | None = None,
) -> dict:
    """Precision, recall, NDCG and MAP at ``k`` and AUC of ``fit``'s rankings of the
    held-out pairs ``test``, the training pairs excluded.

    For each user, the candidates are the items without a pair in ``train``, ranked by the
    fit (:meth:`~bmczoo.inference.FitResult.recommend` with ``by``); the relevant items are
    the user's pairs in ``test`` (with ``threshold``: those with a value ``>= threshold``).
    With ``hits`` the relevant items among the top ``k`` and ``P`` the user's relevant
    items: precision ``hits / k``; recall ``hits / min(k, P)`` (1 when the top ``k`` hold
    as many relevant items as they can); NDCG with binary gains, ``sum 1/log2(r + 1)``
    over the ideal; MAP at ``k``, the mean over the relevant places ``r <= k`` of the
    precision at ``r``, over ``min(k, P)``; AUC, the probability that a relevant candidate
    is ranked above a non-relevant one (ties one half).  Each is the mean over the users
    with a relevant held-out candidate (AUC: and a non-relevant one).

    Parameters
    ----------
    fit : FitResult
        Any fit that can rank items (:meth:`~bmczoo.inference.FitResult.recommend`).
    train : RatingData
        The training pairs: excluded from the candidates.
    test : RatingData
        The held-out pairs.
    k : int
        The length of the list scored.
    users : array_like of int, optional
        The users evaluated (default: every user with a relevant held-out pair).
    threshold : float, optional
        Only held-out pairs with a value ``>= threshold`` are relevant (explicit ratings:
        4 for "liked" on a 1-5 scale); default every held-out pair.
    by, prob, seed
        How the fit ranks (:meth:`~bmczoo.inference.FitResult.recommend`).
    batch_size : int, optional
        Users ranked at a time (default: about 2^22 scores per chunk).

    Returns
    -------
    dict
        ``precision``, ``recall``, ``ndcg``, ``map``, ``auc`` (floats), ``k``, and
        ``users`` and ``auc_users``: the numbers of users in the means.
    """
    _, values = per_user_ranking(
        fit,
        train,
        test,
        k,
        users=users,
        threshold=threshold,
        by=by,
        prob=prob,
        seed=seed,
        batch_size=batch_size,
    )
    return ranking_summary(values, k)


def ranking_summary(values: np.ndarray, k: int) -> dict:
    """The dict of :func:`ranking_metrics` from the per-user values of
    :func:`per_user_ranking`: each metric's mean over the users where it is defined.

    Parameters
    ----------
    values : numpy.ndarray, shape (U, 5)
        Per-user precision, recall, NDCG, MAP (at ``k``) and AUC, NaN where undefined.
    k : int
        The length of the lists scored.

    Returns
    -------
    dict
        As :func:`ranking_metrics` returns.
    """
    out = {}
    with np.errstate(invalid="ignore"):
        for j, name in enumerate(METRICS):
            col = values[:, j]
            out[name] = float(np.nanmean(col)) if np.isfinite(col).any() else float("nan")
    out["k"] = int(k)
    out["users"] = int(np.isfinite(values[:, 0]).sum())
    out["auc_users"] = int(np.isfinite(values[:, 4]).sum())
    return out


def _draw_seeds(seed, num_draws: int) -> list[int]:
    num_draws = check_int("num_draws", num_draws, minimum=1)
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(num_draws)]


def metric_posterior(
    fit,
    train,
    test,
    k: int = 10,
    *,
    num_draws: int = 20,
    seed: int = 0,
    users=None,
    threshold: float | None = None,
    batch_size: int | None = None,
) -> dict:
    """Each user's posterior of the ranking metrics: the metrics of ``num_draws`` rankings,
    each by one posterior draw of the user's scores (``recommend(by="thompson")``).

    Parameters
    ----------
    fit, train, test, k, users, threshold, batch_size
        As for :func:`ranking_metrics`.
    num_draws : int
        Posterior draws per user.
    seed : int
        Seed of the draws.

    Returns
    -------
    dict
        ``users`` (U,), ``draws`` (num_draws, U, 5): the metrics (precision, recall, NDCG,
        MAP, AUC) of each draw, ``mean`` and ``sd`` (U, 5) over the draws.  A user's draws
        are independent of another's: the spread of one user's metric is its posterior;
        that of a mean over users needs joint draws.
    """
    draws = []
    for s in _draw_seeds(seed, num_draws):
        users, values = per_user_ranking(
            fit,
            train,
            test,
            k,
            users=users,
            threshold=threshold,
            by="thompson",
            seed=s,
            batch_size=batch_size,
        )
        draws.append(values)
    draws = np.stack(draws)
    with np.errstate(invalid="ignore"):
        sd = draws.std(0, ddof=1) if len(draws) > 1 else np.zeros_like(draws[0])
    return {"users": users, "draws": draws, "mean": draws.mean(0), "sd": sd}


def top_k_probability(
    fit,
    users,
    k: int = 10,
    *,
    num_draws: int = 50,
    seed: int = 0,
    exclude_seen: bool = True,
    seen=None,
) -> np.ndarray:
    """The posterior probability that each item is among a user's top ``k``, estimated from
    ``num_draws`` posterior draws of the user's scores (``recommend(by="thompson")``).

    Parameters
    ----------
    fit : FitResult
        A fit that draws from its posterior (:meth:`~bmczoo.inference.FitResult.recommend`).
    users : array_like of int
        Row indices (their probabilities are a (len(users), m2) array: pass a batch).
    k : int
        The length of the list.
    num_draws : int
        Posterior draws per user.
    seed : int
        Seed of the draws.
    exclude_seen, seen
        As for :meth:`~bmczoo.inference.FitResult.recommend` (excluded items: 0).

    Returns
    -------
    numpy.ndarray, shape (len(users), m2)
    """
    users = np.asarray(users, np.int64).ravel()
    m2 = fit.shape[1]
    k = check_int("k", k, minimum=1)
    counts = np.zeros((users.size, m2))
    seeds = _draw_seeds(seed, num_draws)
    for s in seeds:
        items, _ = fit.recommend(
            users, n=min(k, m2), exclude_seen=exclude_seen, seen=seen, by="thompson", seed=s
        )
        rows = np.repeat(np.arange(users.size), items.shape[1])
        keep = items.ravel() >= 0
        np.add.at(counts, (rows[keep], items.ravel()[keep]), 1.0)
    return counts / len(seeds)
