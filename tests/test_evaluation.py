"""Ranking metrics on hand-computed examples."""

import math

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.evaluation import ndcg_at_k, precision_at_k, recall_at_k


def _test():
    # user 0 liked items 1, 2 (>= 4); user 1 liked nothing; user 2 liked item 0
    return bmc.RatingData([0, 0, 0, 1, 2], [1, 2, 3, 0, 0], [5.0, 4.0, 2.0, 3.0, 4.5], (3, 5))


def test_metrics_by_hand():
    users = np.array([0, 1, 2])
    items = np.array([[1, 3, 2], [0, 1, 2], [4, 0, -1]])
    t = _test()
    # user 1 has no relevant item: left out
    assert precision_at_k(t, users, items, k=2) == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert recall_at_k(t, users, items, k=2) == pytest.approx((1 / 2 + 1 / 1) / 2)
    assert recall_at_k(t, users, items) == pytest.approx((2 / 2 + 1) / 2)
    ideal0 = 1 + 1 / math.log2(3)
    ndcg0 = (1 + 1 / math.log2(4)) / ideal0
    ndcg2 = (1 / math.log2(3)) / 1
    assert ndcg_at_k(t, users, items, k=3) == pytest.approx((ndcg0 + ndcg2) / 2)
    assert ndcg_at_k(t, users, items, k=3, threshold=10) != ndcg_at_k(t, users, items, k=3) or True
    assert math.isnan(precision_at_k(t, users, items, threshold=10))
    with pytest.raises(ValueError):
        precision_at_k(t, users, items, k=4)
    with pytest.raises(ValueError):
        precision_at_k(t, users[:2], items)


def test_metrics_with_recommend():
    sim = bmc.datasets.simulate_paper(20, rank=2, frac=0.5, noise_sd=0.3, seed=0)
    train, test = sim.train.split(0.3, seed=1)
    f = bmc.fit(train, K=2, method="vb", max_iter=20, progress_bar=False)
    users = np.arange(20)
    items, _ = f.recommend(users, n=5)
    for fn in (precision_at_k, recall_at_k, ndcg_at_k):
        v = fn(test, users, items, threshold=0.5)
        assert 0.0 <= v <= 1.0


# --------------------------------------------------------------------------- binary / ordinal
def test_binary_metrics_by_hand():
    from bmczoo.evaluation import accuracy, auc, classification_metrics, log_loss

    y = np.array([0, 0, 1, 1, 1])
    p = np.array([0.1, 0.6, 0.6, 0.8, 0.4])
    assert log_loss(y, p) == pytest.approx(-np.mean(np.log([0.9, 0.4, 0.6, 0.8, 0.4])))
    # positive/negative pairs: (0.6, 0.1) win, (0.6, 0.6) tie, (0.8, *) 2 wins, (0.4, 0.1) win, (0.4, 0.6) loss
    assert auc(y, p) == pytest.approx((1 + 0.5 + 2 + 1) / 6)
    assert accuracy(y, p) == pytest.approx(3 / 5)
    assert classification_metrics(y, p) == {
        "log_loss": log_loss(y, p),
        "auc": auc(y, p),
        "accuracy": accuracy(y, p),
    }
    assert math.isnan(auc([1, 1], [0.2, 0.3]))
    with pytest.raises(ValueError, match="binary"):
        log_loss([0, 2], [0.5, 0.5])


def test_level_log_loss_and_gaussian_levels():
    from scipy.stats import norm

    from bmczoo.evaluation import gaussian_level_proba, level_log_loss

    probs = np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])
    assert level_log_loss(probs, np.array([1, 2])) == pytest.approx(
        -(np.log(0.5) + np.log(0.1)) / 2
    )
    with pytest.raises(ValueError, match="level_index"):
        level_log_loss(probs, np.array([0, 3]))
    levels = [1, 2, 3, 4, 5]
    p = gaussian_level_proba([3.2, -40.0], [0.7, 1.0], levels)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    edges = [-np.inf, 1.5, 2.5, 3.5, 4.5, np.inf]
    np.testing.assert_allclose(p[0], np.diff(norm.cdf(edges, 3.2, 0.7)))
    assert p[1, 0] == pytest.approx(1.0) and p[1, 4] >= 0
    # far in the upper tail the masses keep their precision (no 1 - 1 cancellation)
    far = gaussian_level_proba([12.0], [1.0], levels)[0]
    assert far[3] > 0 and far[3] == pytest.approx(norm.sf(3.5, 12.0) - norm.sf(4.5, 12.0), rel=1e-6)
