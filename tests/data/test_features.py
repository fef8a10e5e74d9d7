"""``bmczoo.data.Features``, ``features_from_table``, ``hstack_features`` and
``implicit_features``: the sparse feature tables of side information, against dense
computations written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bmczoo.data import (
    Features,
    RatingData,
    features_from_table,
    hstack_features,
    implicit_features,
)


def _random_features(seed=0, m=30, f=12, density=0.3):
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(m, f)) * (rng.random((m, f)) < density)
    dense[3] = 0.0  # an empty row
    return dense, Features.from_dense(dense, names=[f"g{j // 4}={j}" for j in range(f)])


# ============================================================================= Features
class TestFeatures:
    def test_dense_round_trip_and_fields(self):
        dense, x = _random_features()
        np.testing.assert_array_equal(x.to_dense(), dense)
        assert x.shape == dense.shape and x.nnz == int((dense != 0).sum())
        assert x.groups == tuple(f"g{j // 4}" for j in range(12))
        assert x.group_sizes() == [("g0", 4), ("g1", 4), ("g2", 4)]
        for a in (x.indptr, x.indices, x.values):
            assert not a.flags.writeable
        assert "n_rows=30" in repr(x)

    def test_products_match_dense(self):
        dense, x = _random_features(1)
        rng = np.random.default_rng(2)
        b, e = rng.normal(size=(12, 3)), rng.normal(size=(30, 3))
        np.testing.assert_allclose(x.dot(b), dense @ b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x.dot(b[:, 0]), dense @ b[:, 0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x.tdot(e), dense.T @ e, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x.gram(), dense.T @ dense, rtol=1e-12, atol=1e-12)
        with pytest.raises(ValueError, match="12 rows"):
            x.dot(np.ones((5, 2)))
        with pytest.raises(ValueError, match="30 rows"):
            x.tdot(np.ones((5, 2)))

    def test_gram_in_blocks(self, monkeypatch):
        # gram() goes through dense blocks of rows; several blocks give the same sum
        import bmczoo.data.features as mod

        dense, x = _random_features(3, m=50, f=7)
        monkeypatch.setattr(mod, "_GRAM_BLOCK_ENTRIES", 7 * 9)  # 9 rows a block: 6 blocks
        np.testing.assert_allclose(x.gram(), dense.T @ dense, rtol=1e-12, atol=1e-12)

    def test_take_reorders_and_repeats(self):
        dense, x = _random_features(4)
        idx = np.array([5, 3, 5, 0, 29])
        np.testing.assert_array_equal(x.take(idx).to_dense(), dense[idx])
        assert x.take(idx).names == x.names
        assert x.take(np.array([], dtype=int)).shape == (0, 12)
        with pytest.raises(ValueError, match=r"rows\[1\] = 30"):
            x.take([0, 30])

    def test_scipy_round_trip(self):
        sp = pytest.importorskip("scipy.sparse")
        dense, x = _random_features(5)
        np.testing.assert_array_equal(x.to_scipy().toarray(), dense)
        coo = sp.coo_matrix(dense)
        assert Features.from_scipy(coo, names=x.names) == x

    def test_hstack(self):
        d1, x1 = _random_features(6, f=4)
        d2 = np.random.default_rng(7).normal(size=(30, 3))
        x2 = Features.from_dense(d2, names=["a", "b", "c"], groups=["h", "h", "h"])
        x = hstack_features(x1, x2)
        np.testing.assert_array_equal(x.to_dense(), np.hstack([d1, d2]))
        assert x.names == x1.names + ("a", "b", "c") and x.groups[-3:] == ("h",) * 3
        with pytest.raises(ValueError, match="duplicate feature name"):
            hstack_features(x1, x1)
        with pytest.raises(ValueError, match="same number of rows"):
            hstack_features(x1, x2.take([0, 1]))

    @pytest.mark.parametrize(
        "args, match",
        [
            (([0, 1], [0], [1.0], ["a", "a"]), "duplicate feature name 'a'"),
            (([0, 1], [2], [1.0], ["a", "b"]), r"feature indices must lie in 0\.\.1"),
            (([0, 2], [1, 0], [1.0, 1.0], ["a", "b"]), "strictly increasing"),
            (([0, 2], [1, 1], [1.0, 1.0], ["a", "b"]), "strictly increasing"),
            (([0, 1], [0], [np.nan], ["a"]), "finite; row 0"),
            (([0, 2], [0], [1.0], ["a"]), "end at len"),
            (([1, 1], [0], [1.0], ["a"]), "start at 0"),
            (([0, 1], [0], [1.0, 2.0], ["a"]), "same length"),
            (([0, 1], [0], [1.0], [1]), "names must be strings"),
            (([0, 1], [0], [1.0], ["a"], ["g", "h"]), "groups must be 1 strings"),
        ],
    )
    def test_invalid(self, args, match):
        with pytest.raises(ValueError, match=match):
            Features(*args)

    def test_increasing_within_rows_only(self):
        # a later row may start at a smaller feature index
        x = Features([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], ["a", "b", "c"])
        np.testing.assert_array_equal(x.to_dense(), [[1, 0, 2], [0, 3, 0]])
        with pytest.raises(ValueError, match="finite; row 3"):
            Features.from_dense(np.array([[1.0], [0], [0], [np.inf]]))
        with pytest.raises(ValueError, match="2 names for 1 columns"):
            Features.from_dense(np.ones((2, 1)), names=["a", "b"])


# ============================================================================= from tables
USERS = {
    "id": [10, 11, 12, 13, 14],
    "age": [24, 53, 23, None, 17.5],
    "gender": ["M", "F", "M", "F", ""],
    "occupation": ["technician", "other", "writer", "technician", "student"],
    "zip": ["85711", "94043", "32067", "T8H1N", None],
    "genres": ["Comedy|Drama", "", "Drama", None, "Action|Comedy|Action"],
    "score": [1.5, 0.0, -2.0, 3.0, 4.0],
}


def _dense(x: Features) -> dict[str, list]:
    """Each row as the sorted list of its (name, value) pairs."""
    d = x.to_dense()
    return [sorted((x.names[j], d[i, j]) for j in np.flatnonzero(d[i])) for i in range(x.n_rows)]


class TestFromTable:
    def test_each_encoding(self):
        x = features_from_table(
            USERS,
            categorical=["gender", "occupation"],
            prefix={"zip": 1},
            numeric_buckets={"age": 10},
            multilabel={"genres": "|"},
            numeric=["score"],
        )
        assert x.names == (
            "gender=F",
            "gender=M",
            "occupation=other",
            "occupation=student",
            "occupation=technician",
            "occupation=writer",
            "zip=3",
            "zip=8",
            "zip=9",
            "zip=T",
            "age=[10,20)",
            "age=[20,30)",
            "age=[50,60)",
            "genres=Action",
            "genres=Comedy",
            "genres=Drama",
            "score",
        )
        assert x.group_sizes() == [
            ("gender", 2),
            ("occupation", 4),
            ("zip", 4),
            ("age", 3),
            ("genres", 3),
            ("score", 1),
        ]
        rows = _dense(x)
        assert rows[0] == sorted(
            [
                ("gender=M", 1),
                ("occupation=technician", 1),
                ("zip=8", 1),
                ("age=[20,30)", 1),
                ("genres=Comedy", 1),
                ("genres=Drama", 1),
                ("score", 1.5),
            ]
        )
        # missing values (None, "", NaN) give no feature of their group; 0 is not stored
        assert rows[1] == sorted(
            [("gender=F", 1), ("occupation=other", 1), ("zip=9", 1), ("age=[50,60)", 1)]
        )
        assert rows[3] == sorted(
            [("gender=F", 1), ("occupation=technician", 1), ("zip=T", 1), ("score", 3.0)]
        )
        # a repeated label counts once
        assert rows[4] == sorted(
            [
                ("occupation=student", 1),
                ("age=[10,20)", 1),
                ("genres=Action", 1),
                ("genres=Comedy", 1),
                ("score", 4.0),
            ]
        )

    def test_bucket_edges_give_every_bucket(self):
        x = features_from_table(
            {"age": [1, 18, 24.9, 25, 56, 70, float("nan")]},
            numeric_buckets={"age": [18, 25, 35, 45, 50, 56]},
        )
        assert x.names == (
            "age=<18",
            "age=[18,25)",
            "age=[25,35)",
            "age=[35,45)",
            "age=[45,50)",
            "age=[50,56)",
            "age=>=56",
        )
        d = x.to_dense()
        np.testing.assert_array_equal(d.argmax(axis=1)[:6], [0, 1, 1, 2, 6, 6])
        np.testing.assert_array_equal(d.sum(axis=1), [1, 1, 1, 1, 1, 1, 0])

    def test_width_buckets_are_ordered_numerically(self):
        x = features_from_table(
            {"year": [1995, 2001, 1930, 1995.0, 1999]}, numeric_buckets={"year": 1}
        )
        assert x.names == ("year=1930", "year=1995", "year=1999", "year=2001")
        y = features_from_table({"v": [-3, 7, 95, 100]}, numeric_buckets={"v": 5})
        assert y.names == ("v=[-5,0)", "v=[5,10)", "v=[95,100)", "v=[100,105)")

    def test_multilabel_sequences_and_numpy_columns(self):
        genres = np.empty(3, dtype=object)
        genres[:] = [("b", "a"), (), ("c",)]
        x = features_from_table(
            {"genres": genres, "n": np.array([3, 1, 2])},
            multilabel={"genres": None},
            categorical=["n"],
        )
        assert x.names == ("n=1", "n=2", "n=3", "genres=a", "genres=b", "genres=c")
        np.testing.assert_array_equal(
            x.to_dense(), [[0, 0, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 1]]
        )

    def test_mixed_types_sorted_deterministically(self):
        x = features_from_table({"c": [3, "x", 1, "a"]}, categorical=["c"])
        assert x.names == ("c=1", "c=3", "c=a", "c=x")

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            (dict(categorical=["nope"]), "no column 'nope'"),
            (dict(numeric_buckets={"gender": 5}), r"column 'gender', row 0: 'M' is not a number"),
            (dict(numeric_buckets={"age": 0}), "width must be positive"),
            (dict(numeric_buckets={"age": [25, 18]}), "strictly increasing"),
            (dict(numeric_buckets={"age": "abc"}), "strictly increasing|width or a sequence"),
            (dict(numeric=["age"]), r"column 'age', row 3: None is not a number"),
            (dict(categorical=["gender"], prefix={"gender": 1}), "used more than once"),
            (dict(prefix={"zip": 0}), "positive integer"),
            (dict(multilabel={"genres": None}), "row 0 is a string; give a separator"),
            (dict(multilabel={"age": "|"}), r"row 0: 24 is neither"),
        ],
    )
    def test_errors(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            features_from_table(USERS, **kwargs)

    def test_lengths_must_agree(self):
        with pytest.raises(ValueError, match="column 'b' has 2 values, expected 3"):
            features_from_table({"a": [1, 2, 3], "b": ["x", "y"]}, categorical=["a", "b"])
        with pytest.raises(ValueError, match="pass n_rows"):
            features_from_table({"a": [1]})
        assert features_from_table({}, n_rows=4).shape == (4, 0)

    def test_new_rows_in_the_columns_of_an_existing_table(self):
        spec = dict(categorical=["gender", "occupation"], numeric_buckets={"age": 10})
        old = features_from_table(USERS, **spec)
        new = {"gender": ["F", "X"], "occupation": ["pilot", "writer"], "age": [25, 99]}
        x = features_from_table(new, **spec).reindex(old)
        assert x.names == old.names and x.groups == old.groups
        # unseen categories (X, pilot, [90,100)) give no feature
        assert _dense(x) == [
            [("age=[20,30)", 1.0), ("gender=F", 1.0)],
            [("occupation=writer", 1.0)],
        ]
        # by names; absent names are zero columns
        y = old.reindex(["zz", "gender=M", "age=[50,60)"])
        cols = [old.names.index("gender=M"), old.names.index("age=[50,60)")]
        np.testing.assert_array_equal(y.to_dense(), np.c_[np.zeros(5), old.to_dense()[:, cols]])
        assert y.groups == ("zz", "gender", "age")
        assert old.reindex(old) == old
        with pytest.raises(ValueError, match="distinct"):
            old.reindex(["a", "a"])

    def test_numeric_non_finite(self):
        with pytest.raises(ValueError, match="not finite"):
            features_from_table({"a": [1.0, math.inf]}, numeric=["a"])


# ============================================================================= implicit feedback
def _data(seed=0, m1=9, m2=7, n=25):
    rng = np.random.default_rng(seed)
    keys = rng.choice(m1 * m2, size=n, replace=False)
    keys = keys[keys // m2 != 4]  # row 4 rates nothing
    rows, cols = np.divmod(keys, m2)
    return RatingData(rows, cols, rng.normal(size=keys.size), (m1, m2))


class TestImplicit:
    def test_rows_and_cols_against_dense(self):
        data = _data()
        rated = ~np.isnan(data.to_dense())
        for axis, mask in (("rows", rated), ("cols", rated.T)):
            x = implicit_features(data, axis)
            counts = mask.sum(axis=1, keepdims=True)
            want = np.where(mask, 1.0 / np.sqrt(np.maximum(counts, 1)), 0.0)
            np.testing.assert_allclose(x.to_dense(), want, rtol=1e-15)
            assert x.shape == mask.shape and set(x.groups) == {"implicit"}
        assert not implicit_features(data).to_dense()[4].any()
        # each non-empty row has unit norm (the |R(i)|^-1/2 scaling)
        norms = np.linalg.norm(implicit_features(data).to_dense(), axis=1)
        np.testing.assert_allclose(norms[rated.any(axis=1)], 1.0, rtol=1e-14)

    def test_values_do_not_matter_and_extra_pairs_union(self):
        data = _data(1)
        assert implicit_features(data.with_values(np.zeros(data.n))) == implicit_features(data)
        train, test = data.split(0.3, seed=2)
        both = implicit_features(train, extra=test)
        assert both == implicit_features(data)
        # a pair in both sources counts once
        assert implicit_features(train, extra=[test, train]) == both
        assert implicit_features(train).nnz == train.n

    def test_errors(self):
        data = _data()
        with pytest.raises(ValueError, match="axis must be"):
            implicit_features(data, "both")
        other = RatingData([0], [0], [1.0], (3, 3))
        with pytest.raises(ValueError, match=r"extra\[0\] has shape \(3, 3\)"):
            implicit_features(data, extra=other)
        with pytest.raises(ValueError, match="takes RatingData"):
            implicit_features(data, extra=[np.ones(3)])


# ============================================================================= on RatingData
class TestRatingDataFeatures:
    def test_kept_by_transformations(self):
        data = _data()
        rf = Features.from_dense(np.arange(18.0).reshape(9, 2), names=["a", "b"])
        cf = implicit_features(data, "cols")
        d = RatingData(
            data.rows, data.cols, data.values, data.shape, row_features=rf, col_features=cf
        )
        parts = [
            *d.split(0.3, seed=0),
            d.subset([0, 1]),
            d.centered()[0],
            d.astype(np.float32),
            d.with_values(np.ones(d.n)),
        ]
        for p in parts:
            assert p.row_features is rf and p.col_features is cf
        assert d == data  # equality is on the entries
        assert data.row_features is None and data.col_features is None
        assert (
            d.with_features(None).row_features is None and d.with_features(None).col_features is cf
        )
        assert d.with_features(col_features=None).row_features is rf

    def test_row_count_checked(self):
        data = _data()
        bad = Features.from_dense(np.ones((8, 1)))
        with pytest.raises(ValueError, match="row_features has 8 rows; the matrix has 9 rows"):
            RatingData(data.rows, data.cols, data.values, data.shape, row_features=bad)
        with pytest.raises(ValueError, match="col_features has 8 rows; the matrix has 7 cols"):
            data.with_features(col_features=bad)
        with pytest.raises(ValueError, match="must be a bmczoo.data.Features"):
            data.with_features(np.ones((9, 1)))
