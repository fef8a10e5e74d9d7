"""``TensorFit.recommend(users, context, ...)`` against a brute-force computation of every
entry of the array from the kept draws, on tiny 3- and 4-way arrays: the top items at a
context by the posterior mean, the upper end of the predictive interval and Thompson
sampling, the training entries left out (at any context, or at the given one), in
batches, after save / load, and the errors."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import TensorData

pytestmark = pytest.mark.usefixtures("x64")

FIT = dict(K=2, num_warmup=5, num_samples=12, thinning=2, num_chains=2, progress_bar=False)


def _array(shape, frac=0.4, seed=0):
    rng = np.random.default_rng(seed)
    n = int(frac * np.prod(shape))
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), 1)
    return TensorData(idx, 3.0 + rng.normal(size=n), shape)


def _all_theta(fit) -> np.ndarray:
    """(S, m_0, ..., m_{D-1}) theta on the data scale (unclipped) of every draw."""
    D = len(fit.shape)
    U = [
        np.asarray(fit.factors[f"U{d}"]).reshape(-1, m, fit.info.K) for d, m in enumerate(fit.shape)
    ]
    letters = "abcdef"[:D]
    t = np.einsum(",".join(f"s{c}k" for c in letters) + f"->s{letters}", *U)
    for d in range(D):
        if f"b{d}" in fit.factors:
            b = np.asarray(fit.factors[f"b{d}"]).reshape(t.shape[0], -1)
            t = t + b.reshape((t.shape[0],) + tuple(-1 if e == d else 1 for e in range(D)))
    return t + fit.info.shift.offset


def _brute(fit, train, users, ctx, n, by, exclude, seed=None, prob=0.9):
    """The expected (items, scores) from :func:`_all_theta`."""
    t = _all_theta(fit)
    S = t.shape[0]
    pick = np.random.default_rng(seed).integers(0, S, size=len(users)) if by == "thompson" else None
    items, scores = [], []
    for k, u in enumerate(users):
        at = t[(slice(None), u, slice(None), *ctx[k])]  # (S, m_item)
        if by == "mean":
            sc = at.mean(0)
        elif by == "upper":
            z = NormalDist().inv_cdf(0.5 + prob / 2)
            sc = at.mean(0) + z * np.sqrt(at.var(0) + fit.noise_var())
        else:
            sc = at[pick[k]]
        idx = train.indices
        mine = idx[idx[:, 0] == u]
        if exclude == "context":
            mine = mine[np.all(mine[:, 2:] == ctx[k], axis=1)]
        if exclude:
            sc = sc.copy()
            sc[mine[:, 1]] = -np.inf
        order = np.argsort(-sc, kind="stable")[:n]
        it, s = order.copy(), sc[order]
        it[~np.isfinite(s)] = -1
        items.append(it), scores.append(s)
    return np.array(items), np.array(scores)


@pytest.mark.parametrize(
    "biases", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["plain", "biases"]
)
def test_recommend_is_the_brute_force(tmp_path, biases):
    train = _array((6, 7, 4))
    fit = bmc.fit(train, biases=biases, likelihood=bmc.likelihoods.LearnedNoise(), **FIT)
    users = np.array([0, 3, 5, 3])
    ctx = np.full((4, 1), 2)
    for by, exclude in [("mean", True), ("mean", False), ("upper", "context"), ("thompson", True)]:
        items, scores = fit.recommend(users, 2, n=7, exclude_seen=exclude, by=by, seed=4)
        want = _brute(fit, train, users, ctx, 7, by, exclude and (exclude or "any"), seed=4)
        np.testing.assert_array_equal(items, want[0], err_msg=f"{by} {exclude}")
        np.testing.assert_allclose(scores, want[1], rtol=1e-10, err_msg=f"{by} {exclude}")
        # in batches of one user: the same (Thompson's draws are drawn for all users at once)
        one = fit.recommend(users, [2], n=7, exclude_seen=exclude, by=by, seed=4, batch_size=1)
        np.testing.assert_array_equal(one[0], items)
        np.testing.assert_allclose(one[1], scores, rtol=1e-12)
    # every item but the excluded ones, then -1 / -inf
    items, scores = fit.recommend(users, 2, n=7)
    seen0 = np.unique(train.indices[train.indices[:, 0] == 0][:, 1])
    assert np.sum(items[0] >= 0) == 7 - seen0.size and np.all(scores[0][items[0] < 0] == -np.inf)
    assert set(items[0][items[0] >= 0]).isdisjoint(seen0)
    fit.save(tmp_path / "f.npz")
    back = bmc.load(tmp_path / "f.npz")
    np.testing.assert_array_equal(back.recommend(users, 2, n=3)[0], fit.recommend(users, 2, n=3)[0])
    # seen= replaces the training entries
    items, _ = fit.recommend(users, 2, n=7, seen=train.subset(np.arange(1)))
    assert np.sum(items >= 0) >= 4 * 7 - 1


@pytest.mark.slow
def test_four_modes_and_a_context_per_user():
    train = _array((5, 6, 3, 2), frac=0.3, seed=1)
    fit = bmc.fit(train, biases=True, **FIT)
    users = np.array([4, 0, 2])
    ctx = np.array([[0, 1], [2, 0], [1, 1]])
    items, scores = fit.recommend(users, ctx, n=4, exclude_seen="context")
    want = _brute(fit, train, users, ctx, 4, "mean", "context")
    np.testing.assert_array_equal(items, want[0])
    np.testing.assert_allclose(scores, want[1], rtol=1e-10)
    shared = fit.recommend(users, (2, 0), n=4, exclude_seen=False)
    want = _brute(fit, train, users, np.tile([2, 0], (3, 1)), 4, "mean", False)
    np.testing.assert_array_equal(shared[0], want[0])


def test_errors():
    train = _array((6, 7, 4))
    fit = bmc.fit(train, **FIT)
    with pytest.raises(ValueError, match="by must be one of"):
        fit.recommend([0], 1, n=3, by="top-k")
    with pytest.raises(ValueError, match="give seed="):
        fit.recommend([0], 1, n=3, by="thompson")
    with pytest.raises(ValueError, match="n=8 exceeds the number of items 7"):
        fit.recommend([0], 1, n=8)
    with pytest.raises(ValueError, match="users must be in"):
        fit.recommend([6], 1, n=3)
    with pytest.raises(ValueError, match=r"context of mode 2 must be in \[0, 4\)"):
        fit.recommend([0], 4, n=3)
    with pytest.raises(ValueError, match=r"or a \(2, 1\) array, one per user"):
        fit.recommend([0, 1], [[1, 2]], n=3)
    with pytest.raises(ValueError, match="exclude_seen"):
        fit.recommend([0], 1, n=3, exclude_seen="yes")
    with pytest.raises(TypeError, match="seen must be a TensorData"):
        fit.recommend([0], 1, n=3, seen=object())
    fit.seen_index = None
    with pytest.raises(ValueError, match="pass seen="):
        fit.recommend([0], 1, n=3)
