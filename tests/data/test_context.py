"""Per-rating timestamps and context: validated, kept rating by rating by every
transformation, read from ratings files, and the time features built from them."""

from __future__ import annotations

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.data import Features, RatingData

DAY = 86_400


def _data(n_users=6, n_items=8, seed=0):
    rng = np.random.default_rng(seed)
    flat = rng.choice(n_users * n_items, size=30, replace=False)
    rows, cols = np.divmod(flat, n_items)
    t = 1_000_000_000 + rng.integers(0, 400 * DAY, rows.size)
    ctx = Features.from_dense(rng.normal(size=(rows.size, 3)), ["a", "b", "c"])
    return RatingData(
        rows, cols, rng.integers(1, 6, rows.size).astype(float), (n_users, n_items),
        timestamps=t, context=ctx,
    )  # fmt: skip


def _rating_of(d):
    """Each rating's (row, col) -> (timestamp, context row)."""
    dense = d.context.to_dense()
    return {
        (r, c): (t, tuple(x))
        for r, c, t, x in zip(d.rows.tolist(), d.cols.tolist(), d.timestamps.tolist(), dense)
    }


def test_every_transformation_keeps_each_rating_s_time_and_context():
    d = _data()
    whole = _rating_of(d)
    parts = [
        *d.split(0.3, seed=1),
        *d.split_per_user(0.3, seed=2),
        d.subset(np.arange(d.n)[::-1]),
        d.subset(d.values >= 3),
        d.centered()[0],
        d.astype(np.float32),
        d.with_values(d.values + 1),
        d.with_features(),
    ]
    for part in parts:
        assert part.timestamps is not None and part.context.n_rows == part.n
        got = _rating_of(part)
        assert all(got[k] == whole[k] for k in got), part
    from bmczoo.cli.loading import binarize

    assert _rating_of(binarize(d, 4)) == whole
    assert d.timestamps.dtype == np.int64 and not d.timestamps.flags.writeable


def test_with_context_and_validation():
    d = _data()
    bare = d.with_context(None, timestamps=None)
    assert bare.context is None and bare.timestamps is None
    assert np.array_equal(d.with_context(None).timestamps, d.timestamps)
    with pytest.raises(ValueError, match=r"timestamps must have shape \(30,\)"):
        d.with_context(timestamps=np.arange(29))
    with pytest.raises(ValueError, match=r"timestamps\[2\] = 1.5 is not an integer"):
        d.with_context(timestamps=np.r_[0.0, 1.0, 1.5, np.zeros(27)])
    with pytest.raises(ValueError, match="timestamps must be integers"):
        d.with_context(timestamps=np.array(["x"] * 30))
    with pytest.raises(ValueError, match="context has 29 rows; there are 30 ratings"):
        d.with_context(d.context.take(np.arange(29)))
    with pytest.raises(ValueError, match="context must be a bmczoo.data.Features"):
        d.with_context(np.zeros((30, 2)))


def test_read_ratings_keeps_a_timestamp_field(tmp_path):
    p = tmp_path / "r.tsv"
    p.write_text("1\t10\t4\t978300760\n2\t10\t3\t978302109\n1\t11\t5\t978301968\n")
    d = bmc.datasets.read_ratings(p)
    assert d.timestamps.tolist() == [978300760, 978302109, 978301968]
    p.write_text("1\t10\t4\t0.5\n2\t10\t3\t1.5\n")  # a 4th field that is not a time
    assert bmc.datasets.read_ratings(p).timestamps is None
    with pytest.raises(ValueError, match="not an integer"):  # asked for: must be one
        bmc.datasets.read_ratings(p, columns=(0, 1, 2, 3))
    p.write_text("user,item,rating,when,extra\n1,10,4,7,0\n2,10,3,9,0\n")
    d = bmc.datasets.read_ratings(p, columns=("user", "item", "rating", "when"))
    assert d.timestamps.tolist() == [7, 9]
    assert bmc.datasets.read_ratings(p, columns=(0, 1, 2)).timestamps is None
    with pytest.raises(ValueError, match="must be distinct"):
        bmc.datasets.read_ratings(p, columns=(0, 1, 2, 2))


def test_movielens_keeps_its_timestamps(ml100k):
    d = bmc.datasets.load_movielens("100k", path=ml100k)
    first = (ml100k / "u.data").read_text().splitlines()[0].split("\t")
    assert d.timestamps[0] == int(first[3]) and d.timestamps.shape == (100_000,)
    train, test = d.official_split("u1")
    assert train.timestamps.shape == (80_000,) and test.timestamps.shape == (20_000,)


def test_time_bins():
    t = np.arange(1000) * 7
    b, nb = bmc.data.time_bins(t, 10)
    assert nb == 10 and np.array_equal(np.bincount(b), np.full(10, 100))
    assert np.all(np.diff(b) >= 0)  # monotone in time
    days = np.array(["2000-01-31", "2000-02-01", "2000-03-15", "2001-01-01"], "datetime64[D]")
    b, nb = bmc.data.time_bins(days.astype("datetime64[s]").astype(np.int64), by="month")
    assert b.tolist() == [0, 1, 2, 12] and nb == 13
    for bad, kw in (([], {}), (t, {"bins": 0}), (t, {"by": "week"})):
        with pytest.raises(ValueError):
            bmc.data.time_bins(bad, **kw)


def test_time_features_equal_their_definitions():
    d = _data()
    F = bmc.data.time_features(d, bins=4, beta=0.4)
    X = F.to_dense()
    sizes = dict(F.group_sizes())
    assert list(sizes) == list(bmc.data.TIME_GROUPS)
    b, _ = bmc.data.time_bins(d.timestamps, 4)
    days = d.timestamps / DAY
    for k, (u, i, t) in enumerate(zip(d.rows, d.cols, d.timestamps)):
        on = {F.names[j]: X[k, j] for j in np.flatnonzero(X[k])}
        mine = days[d.rows == u]
        dev = days[k] - mine.mean()
        want = {
            f"time_bin={b[k]}": 1.0,
            f"item_time_bin={i}|{b[k]}": 1.0,
            f"user_day={u}|{t // DAY}": 1.0,
        }
        if dev != 0:
            want[f"user_dev={u}"] = np.sign(dev) * abs(dev) ** 0.4
        assert on.keys() == want.keys() and all(np.isclose(on[n], v) for n, v in want.items())
    assert sizes["item_time_bin"] == len({(i, x) for i, x in zip(d.cols, b)})
    only = bmc.data.time_features(d, ("user_dev", "time_bin"), bins=4)
    assert [g for g, _ in only.group_sizes()] == ["time_bin", "user_dev"]
    with pytest.raises(ValueError, match="groups must be"):
        bmc.data.time_features(d, ("hour",))
    with pytest.raises(ValueError, match="no timestamps"):
        bmc.data.time_features(d.with_context(None, timestamps=None))


def test_time_encoder_encodes_later_ratings_in_the_fitted_columns():
    """Fitted on the earlier ratings, the encoder gives a later rating the fitted bins
    (after the last edge: the last bin), the item x bin and user x day columns seen at fit
    time only, and ``dev_u(t)`` from the fitted mean date; its own ratings get the table
    of :func:`time_features`; the JSON form encodes the same."""
    import json

    d = _data(n_users=10, seed=3)
    order = np.argsort(d.timestamps, kind="stable")
    early, late = d.subset(order[:20]), d.subset(order[20:])
    enc = bmc.data.TimeEncoder.fit(early, bins=4, beta=0.5)
    assert enc.table == bmc.data.time_features(early, bins=4, beta=0.5)
    assert enc.transform(early) == enc.table
    X = enc.transform(late)
    assert X.names == enc.names and X.n_rows == late.n
    days = early.timestamps / DAY
    dense = X.to_dense()
    for k, (u, i, t) in enumerate(zip(late.rows, late.cols, late.timestamps)):
        on = {X.names[j]: dense[k, j] for j in np.flatnonzero(dense[k])}
        want = {"time_bin=3": 1.0}  # every later time is in the last fitted bin
        if f"item_time_bin={i}|3" in enc.names:
            want[f"item_time_bin={i}|3"] = 1.0
        if f"user_day={u}|{t // DAY}" in enc.names:
            want[f"user_day={u}|{t // DAY}"] = 1.0
        if (early.rows == u).any():
            dev = t / DAY - days[early.rows == u].mean()
            want[f"user_dev={u}"] = np.sign(dev) * abs(dev) ** 0.5
        assert on.keys() == want.keys() and all(np.isclose(on[n], v) for n, v in want.items())
    back = bmc.data.TimeEncoder.from_dict(json.loads(json.dumps(enc.to_dict())))
    assert back.transform(late) == X
    # months: a later month is in the last fitted month
    months = bmc.data.TimeEncoder.fit(early, ("time_bin",), by="month")
    nb = months.bins[2]
    got = months.transform(late).to_dense().argmax(1)
    want = np.minimum(
        bmc.data.time_bins(d.timestamps, by="month")[0][order[20:]]
        - bmc.data.time_bins(d.timestamps, by="month")[0][order[0]],
        nb - 1,
    )
    assert got.tolist() == want.tolist()
    np.testing.assert_array_equal(
        enc.encode(late.rows, late.cols, late.timestamps).to_dense(), X.to_dense()
    )
    with pytest.raises(ValueError, match="user 10 is not among the 10 users"):
        enc.transform(RatingData([10], [0], [1.0], (11, 8), timestamps=[1_000_000_000]))
    with pytest.raises(ValueError, match="beta must be a positive number"):
        bmc.data.TimeEncoder.fit(early, beta=0)
    with pytest.raises(ValueError, match="no timestamps"):
        enc.transform(late.with_context(None, timestamps=None))
