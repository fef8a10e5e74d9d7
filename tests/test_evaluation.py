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
