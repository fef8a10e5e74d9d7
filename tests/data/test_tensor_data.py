"""``bmczoo.data.TensorData``: validation (the errors RatingData gives), views, splits (the
positions RatingData's split takes), the matrix as its two-mode case and MovieLens-style
time modes."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import TensorData


def _tensor(n=40, shape=(5, 4, 3), seed=0):
    rng = np.random.default_rng(seed)
    flat = rng.choice(np.prod(shape), n, replace=False)
    idx = np.stack(np.unravel_index(flat, shape), axis=1)
    return TensorData(idx, rng.normal(size=n), shape)


def test_fields_and_views():
    t = _tensor()
    # the API's keywords: TensorData(index, values, shape); .index is .indices
    same = TensorData(index=t.index, values=t.values, shape=t.shape)
    np.testing.assert_array_equal(same.indices, t.indices)
    assert t.ndim == 3 and t.n == 40 and t.shape == (5, 4, 3) and len(t) == 40
    assert t.modes == ("mode0", "mode1", "mode2")
    for d, v in enumerate(t.views):
        # each view lists the entries by their index along the mode, positions ascending
        assert np.all(np.diff(t.indices[v.index, d]) >= 0)
        np.testing.assert_array_equal(v.values, t.values[v.index])
        np.testing.assert_array_equal(
            np.diff(v.indptr), np.bincount(t.indices[:, d], minlength=t.shape[d])
        )
    with pytest.raises(ValueError):
        t.indices[0, 0] = 1  # read-only


@pytest.mark.parametrize(
    "indices, values, shape, match",
    [
        (
            [[0, 1, 2], [0, 1, 2]],
            [1.0, 2.0],
            None,
            r"duplicate entry \(0, 1, 2\) at positions 0 and 1",
        ),
        ([[0, 1, 2]], [np.nan], None, r"values must be finite; values\[0\] = nan"),
        ([[0, 1, 5]], [1.0], (2, 2, 3), r"index\[:, 2\]\[0\] = 5 is out of range"),
        ([[0, -1, 1]], [1.0], None, "must be non-negative"),
        ([[0, 1.5, 1]], [1.0], None, "is not an integer"),
        (np.zeros((0, 3)), [], None, "empty"),
        ([[0], [1]], [1.0, 2.0], None, "D >= 2 modes"),
        ([[0, 1, 2]], [1.0, 2.0], None, "values must have shape"),
        ([[0, 1, 2]], [1.0], (2, 2), "shape has 2 sizes for 3 modes"),
        ([[0, 1, 2]], [1.0], (2, 0, 3), r"shape\[1\] must be a positive integer"),
    ],
)
def test_errors(indices, values, shape, match):
    with pytest.raises(ValueError, match=match):
        TensorData(indices, values, shape)


def test_split_takes_the_ratings_positions():
    t = _tensor()
    train, test = t.split(0.25, seed=3)
    assert train.n + test.n == t.n and test.n == 10 and train.shape == t.shape
    keys = {tuple(r) for r in t.indices}
    assert {tuple(r) for r in train.indices} | {tuple(r) for r in test.indices} == keys
    # the same positions as a RatingData of the same length
    r = bmc.RatingData(np.arange(40), np.zeros(40, int), np.arange(40.0), (40, 1))
    rtrain, _ = r.split(0.25, seed=3)
    np.testing.assert_array_equal(train.values, t.values[rtrain.values.astype(int)])
    with pytest.raises(ValueError, match="test_fraction must be in"):
        t.split(1.5)


def test_matrix_and_time_modes():
    rng = np.random.default_rng(1)
    n = 60
    key = rng.choice(30, n // 2, replace=False)
    rows, cols = np.divmod(np.concatenate([key, key]), 6)
    ts = np.concatenate([np.zeros(n // 2), np.full(n // 2, 10**6)]).astype(np.int64)
    ts = ts + rng.integers(0, 1000, n)
    # a pair rated twice (two times): a matrix refuses it, a user x item x time array not
    with pytest.raises(ValueError, match="duplicate"):
        bmc.RatingData(rows, cols, rng.normal(size=n), (5, 6))
    once = bmc.RatingData(
        rows[: n // 2], cols[: n // 2], rng.normal(size=n // 2), (5, 6), timestamps=ts[: n // 2]
    )
    m = TensorData.from_ratings(once)
    assert m.modes == ("user", "item") and m.shape == (5, 6)
    back = m.to_ratings()
    np.testing.assert_array_equal(back.rows, once.rows)
    np.testing.assert_array_equal(back.values, once.values)
    t = TensorData.from_ratings(once, time_bins=4)
    assert t.modes == ("user", "item", "time") and t.shape == (5, 6, 4)
    np.testing.assert_array_equal(t.indices[:, 2], bmc.data.time_bins(once.timestamps, 4)[0])
    with pytest.raises(ValueError, match="two-mode array"):
        t.to_ratings()
    bare = bmc.RatingData(once.rows, once.cols, once.values, once.shape)
    with pytest.raises(ValueError, match="needs the ratings' timestamps"):
        TensorData.from_ratings(bare, time_bins=4)
