"""Top-N evaluation: per-user splits and ranking metrics against a direct NumPy computation."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import RatingData


def _data(m1=12, m2=15, n=90, seed=0, single=(), empty_rows=()):
    rng = np.random.default_rng(seed)
    flat = rng.choice(m1 * m2, size=n, replace=False)
    rows, cols = np.divmod(flat, m2)
    keep = ~np.isin(rows, list(single) + list(empty_rows))
    rows, cols = rows[keep], cols[keep]
    for r in single:  # a user with one pair
        rows, cols = np.append(rows, r), np.append(cols, 0)
    return RatingData(rows, cols, rng.integers(1, 6, rows.size).astype(float), (m1, m2))


# ----------------------------------------------------------------------------- splits
def test_split_per_user_holds_out_a_share_of_every_user():
    data = _data(single=(3,), empty_rows=(5,))
    train, test = data.split_per_user(0.25, seed=1)
    n_u = np.bincount(data.rows, minlength=12)
    t_u = np.bincount(test.rows, minlength=12)
    expected = np.minimum(np.round(0.25 * n_u), np.maximum(n_u - 1, 0))
    assert np.array_equal(t_u, expected)
    assert t_u[3] == 0 and t_u[5] == 0  # one pair: kept for training; none: nothing
    # a partition of the pairs, values with them, the shape kept
    pairs = lambda d: set(zip(d.rows.tolist(), d.cols.tolist(), d.values.tolist()))  # noqa: E731
    assert pairs(train) | pairs(test) == pairs(data) and not pairs(train) & pairs(test)
    assert train.shape == test.shape == data.shape
    again = data.split_per_user(0.25, seed=1)[1]
    other = data.split_per_user(0.25, seed=2)[1]
    assert pairs(again) == pairs(test) and pairs(other) != pairs(test)


def test_split_per_user_by_count_and_bad_arguments():
    data = _data()
    train, test = data.split_per_user(test_count=2, seed=0)
    n_u = np.bincount(data.rows, minlength=12)
    assert np.array_equal(np.bincount(test.rows, minlength=12), np.minimum(2, n_u - 1))
    for bad in (0.0, 1.0, "0.2", True):
        with pytest.raises(ValueError, match="test_fraction"):
            data.split_per_user(bad)
    with pytest.raises(ValueError, match="test_count"):
        data.split_per_user(test_count=0)
    with pytest.raises(TypeError, match="test_count"):
        data.split_per_user(test_count=1.5)
    one = RatingData([0, 1], [0, 1], [1.0, 1.0], (2, 2))
    with pytest.raises(ValueError, match="holds out no pair"):
        one.split_per_user(0.5)


# ----------------------------------------------------------------------------- metrics
class _Scores:
    """A stand-in fit that ranks by a fixed score matrix (stable order among ties)."""

    def __init__(self, S):
        self.S = np.asarray(S, float)
        self.shape = self.S.shape

    def recommend(self, users, n=10, exclude_seen=True, by="mean", *, seen=None, **_):
        S = self.S[np.asarray(users)].copy()
        if exclude_seen:
            mask = np.zeros(self.shape, bool)
            mask[seen.rows, seen.cols] = True
            S[mask[np.asarray(users)]] = -np.inf
        items = np.argsort(-S, axis=1, kind="stable")[:, :n]
        scores = np.take_along_axis(S, items, 1)
        return np.where(np.isfinite(scores), items, -1), scores


def _direct(S, train, test, k, threshold=None):
    """Each metric from its definition, user by user, pair by pair."""
    m1, m2 = S.shape
    seen = {(r, c) for r, c in zip(train.rows.tolist(), train.cols.tolist())}
    keep = np.ones(test.n, bool) if threshold is None else test.values >= threshold
    rel = {}
    for r, c in zip(test.rows[keep].tolist(), test.cols[keep].tolist()):
        if (r, c) not in seen:
            rel.setdefault(r, set()).add(c)
    vals = {m: [] for m in ("precision", "recall", "ndcg", "map", "auc")}
    for u in range(m1):
        R = rel.get(u, set())
        if not R:
            continue
        cand = [j for j in range(m2) if (u, j) not in seen]
        ranked = sorted(cand, key=lambda j: (-S[u, j], j))[:k]
        hits = [j in R for j in ranked]
        cap = min(k, len(R))
        vals["precision"].append(sum(hits) / k)
        vals["recall"].append(sum(hits) / cap)
        dcg = sum(h / np.log2(r + 2) for r, h in enumerate(hits))
        vals["ndcg"].append(dcg / sum(1 / np.log2(r + 2) for r in range(cap)))
        ap = sum(sum(hits[: r + 1]) / (r + 1) for r, h in enumerate(hits) if h)
        vals["map"].append(ap / cap)
        neg = [j for j in cand if j not in R]
        if neg:
            wins = sum((S[u, p] > S[u, q]) + 0.5 * (S[u, p] == S[u, q]) for p in R for q in neg)
            vals["auc"].append(wins / (len(R) * len(neg)))
    return {m: float(np.mean(v)) for m, v in vals.items()}, len(rel), len(vals["auc"])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 4, 15])
def test_ranking_metrics_equal_their_definitions(k, ties):
    """Against a direct computation; users without a held-out pair (row 5), or whose only
    held-out pairs are training pairs, are left out; ties (integer scores) count one half
    in the AUC; a test pair that is also a training pair is not a candidate."""
    data = _data(empty_rows=(5,))
    train, test = data.split_per_user(0.3, seed=0)
    test = RatingData(  # one held-out pair that is also a training pair
        np.append(test.rows, train.rows[0]),
        np.append(test.cols, train.cols[0]),
        np.append(test.values, 5.0),
        test.shape,
    )
    rng = np.random.default_rng(3)
    S = rng.integers(0, 3, data.shape).astype(float) if ties else rng.normal(size=data.shape)
    fit = _Scores(S)
    for threshold in (None, 4.0):
        got = bmc.evaluation.ranking_metrics(fit, train, test, k, threshold=threshold, batch_size=5)
        want, n_users, n_auc = _direct(S, train, test, k, threshold)
        for m, v in want.items():
            assert got[m] == pytest.approx(v, rel=1e-12, abs=1e-12), (m, threshold)
        assert (got["users"], got["auc_users"], got["k"]) == (n_users, n_auc, k)


def test_per_user_values_and_chunks():
    data = _data()
    train, test = data.split_per_user(0.3, seed=0)
    fit = _Scores(np.random.default_rng(0).normal(size=data.shape))
    users, values = bmc.evaluation.per_user_ranking(fit, train, test, 3, users=[0, 5, 1])
    assert list(users) == [0, 5, 1] and values.shape == (3, 5)
    one = bmc.evaluation.per_user_ranking(fit, train, test, 3, users=[1], batch_size=1)[1]
    assert np.array_equal(values[2], one[0], equal_nan=True)
    with pytest.raises(ValueError, match="k=16 exceeds"):
        bmc.evaluation.ranking_metrics(fit, train, test, 16)
    with pytest.raises(ValueError, match="row indices"):
        bmc.evaluation.ranking_metrics(fit, train, test, 3, users=[12])


def test_ranking_metrics_of_a_fit_equal_those_of_its_predictions():
    """Any fit: a VB fit's metrics are those of its posterior means ranked directly."""
    sim = bmc.datasets.simulate_paper(30, seed=0)
    train, test = sim.train.split_per_user(0.25, seed=0)
    fit = bmc.fit(train, 2, method="vb", max_iter=30, progress_bar=False)
    r, c = np.divmod(np.arange(30 * 30), 30)
    S = np.asarray(fit.predict(r, c)).reshape(30, 30)
    got = bmc.evaluation.ranking_metrics(fit, train, test, 5)
    want, n_users, _ = _direct(S, train, test, 5)
    for m, v in want.items():
        assert got[m] == pytest.approx(v, rel=1e-6), m
    assert got["users"] == n_users


class _Draws(_Scores):
    """A stand-in fit with posterior draws of its scores: ``by="thompson"`` ranks by draw
    ``seed % S`` (one draw for every user of the call)."""

    def __init__(self, draws):
        super().__init__(draws[0])
        self.draws = np.asarray(draws, float)

    def recommend(self, users, n=10, exclude_seen=True, by="mean", *, seen=None, seed=None, **_):
        if by == "thompson":
            fit = _Scores(self.draws[seed % len(self.draws)])
            return fit.recommend(users, n, exclude_seen, seen=seen)
        return super().recommend(users, n, exclude_seen, seen=seen)


def test_metric_posterior_and_top_k_probability_from_posterior_draws():
    from bmczoo._ranking import _draw_seeds

    data = _data()
    train, test = data.split_per_user(0.3, seed=0)
    draws = np.random.default_rng(4).normal(size=(3,) + data.shape)
    fit = _Draws(draws)
    seeds = _draw_seeds(7, 5)
    post = bmc.evaluation.metric_posterior(fit, train, test, 3, num_draws=5, seed=7)
    for d, s in zip(post["draws"], seeds):
        _, want = bmc.evaluation.per_user_ranking(_Scores(draws[s % 3]), train, test, 3)
        assert np.array_equal(d, want, equal_nan=True)
    assert np.allclose(post["mean"], post["draws"].mean(0), equal_nan=True)
    assert np.allclose(post["sd"], post["draws"].std(0, ddof=1), equal_nan=True)
    users = np.arange(12)
    p = bmc.evaluation.top_k_probability(fit, users, 4, num_draws=5, seed=7, seen=train)
    want = np.zeros((12, data.shape[1]))
    for s in seeds:
        items, _ = _Scores(draws[s % 3]).recommend(users, 4, True, seen=train)
        for u, row in enumerate(items):
            want[u, row[row >= 0]] += 1 / 5
    assert np.allclose(p, want)
    assert np.all(p[train.rows, train.cols] == 0)  # training pairs are never recommended


def test_top_k_probability_of_a_fit():
    sim = bmc.datasets.simulate_paper(30, seed=0)
    train = sim.train
    fit = bmc.fit(train, 2, method="vb", max_iter=30, progress_bar=False)
    p = bmc.evaluation.top_k_probability(fit, [0, 1, 2], 5, num_draws=8, seed=0)
    assert p.shape == (3, 30) and np.all((p >= 0) & (p <= 1))
    assert np.allclose(p.sum(1), 5)  # each draw's list holds 5 items
    mean_items, _ = fit.recommend([0, 1, 2], n=5)
    # the posterior mean's top item is in most draws' top 5
    assert np.all(p[np.arange(3), mean_items[:, 0]] >= 0.5)


def test_recommend_by_top_k_probability():
    """``recommend(by="top-k")``: the items by their posterior probability of being in the
    top n, ties in the posterior mean's order; the scores are those probabilities."""
    sim = bmc.datasets.simulate_paper(30, seed=0)
    fit = bmc.fit(sim.train, 2, method="vb", max_iter=30, progress_bar=False)
    users = np.array([0, 4, 7])
    items, scores = fit.recommend(users, n=6, by="top-k", seed=3, num_draws=10)
    p = bmc.evaluation.top_k_probability(fit, users, 6, num_draws=10, seed=3)
    mean_items, _ = fit.recommend(users, n=30)
    for u in range(3):
        place = {int(i): r for r, i in enumerate(mean_items[u]) if i >= 0}
        cand = sorted(place, key=lambda i: (-p[u, i], place[i]))[:6]
        assert items[u].tolist() == cand
        assert np.allclose(scores[u], p[u, cand])
    with pytest.raises(ValueError, match='by="top-k" draws from the posterior'):
        fit.recommend(users, n=6, by="top-k")
