"""``bmczoo.RatingData``: validation (API.md), immutability, the CSR-style row/column views,
the random split and the small transformations."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import RatingData
from bmczoo.data import SortedView


def _random_data(seed=0, m1=40, m2=30, n=500, dtype=np.float64):
    """n distinct (row, col) pairs in random order, some empty rows / columns."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(m1 * m2, size=n, replace=False)
    rows, cols = np.divmod(keys, m2)
    return rows, cols, rng.normal(size=n).astype(dtype), (m1, m2)


def _raises(match, *args, **kwargs):
    with pytest.raises(ValueError, match=match) as info:
        RatingData(*args, **kwargs)
    return str(info.value)


# ============================================================================= validation
class TestBadValues:
    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_values_name_first_position(self, bad):
        v = np.array([1.0, 2.0, 3.0, bad, 5.0, bad])
        _raises(r"values\[3\]", [0, 1, 2, 3, 4, 5], [0] * 6, v)

    def test_nan_first_position_zero(self):
        _raises(r"values\[0\]", [0, 1], [0, 0], [np.nan, 1.0])

    def test_float32_nan(self):
        _raises(r"values\[1\]", [0, 1], [0, 0], np.array([1.0, np.nan], np.float32))

    @pytest.mark.parametrize(
        "values",
        [["a", "b"], [1 + 1j, 2.0], [True, False], [None, 1.0]],
        ids=["str", "complex", "bool", "object"],
    )
    def test_non_real_values(self, values):
        _raises("values", [0, 1], [0, 0], values)

    def test_integer_values_become_float(self):
        r = RatingData([0, 1], [0, 0], [3, 4])
        assert r.values.dtype == np.float64
        np.testing.assert_array_equal(r.values, [3.0, 4.0])

    def test_float32_values_kept(self):
        assert RatingData([0], [0], np.array([1.5], np.float32)).values.dtype == np.float32


class TestBadIndices:
    @pytest.mark.parametrize("field", ["rows", "cols"])
    def test_negative_names_field_and_first_position(self, field):
        good = [0, 1, 2, 3]
        bad = [0, 1, -1, -5]
        args = (bad, good) if field == "rows" else (good, bad)
        _raises(rf"{field}\[2\]", *args, [1.0] * 4, (5, 5))

    @pytest.mark.parametrize("field", ["rows", "cols"])
    def test_out_of_range_names_field_and_first_position(self, field):
        good = [0, 1, 2, 3]
        bad = [0, 4, 9, 4]  # shape is (4, 4): 4 is the first bad one, at position 1
        args = (bad, good) if field == "rows" else (good, bad)
        msg = _raises(rf"{field}\[1\]", *args, [1.0] * 4, (4, 4))
        assert "4" in msg

    def test_out_of_range_exactly_at_shape(self):
        _raises(r"cols\[0\]", [0], [3], [1.0], (3, 3))

    @pytest.mark.parametrize("field", ["rows", "cols"])
    @pytest.mark.parametrize("bad", [1.5, np.nan, np.inf], ids=["1.5", "nan", "inf"])
    def test_non_integer_float_index(self, field, bad):
        good = [0.0, 1.0, 2.0]
        badv = [0.0, 1.0, bad]
        args = (badv, good) if field == "rows" else (good, badv)
        _raises(rf"{field}\[2\]", *args, [1.0] * 3, (5, 5))

    def test_integer_valued_floats_are_accepted(self):
        r = RatingData([0.0, 2.0], [1.0, 0.0], [1.0, 2.0], (3, 2))
        assert r.rows.dtype == np.int32 and r.cols.dtype == np.int32
        np.testing.assert_array_equal(r.rows, [0, 2])

    @pytest.mark.parametrize("field", ["rows", "cols"])
    @pytest.mark.parametrize(
        "bad",
        [["0", "1"], [True, False], [0.0 + 0j, 1.0 + 0j], [None, 1]],
        ids=["str", "bool", "complex", "object"],
    )
    def test_non_integer_dtype(self, field, bad):
        good = [0, 1]
        args = (bad, good) if field == "rows" else (good, bad)
        _raises(field, *args, [1.0, 2.0], (3, 3))

    @pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64, np.uint8, np.uint32, np.uint64])
    def test_any_integer_dtype_accepted(self, dtype):
        r = RatingData(np.array([0, 2], dtype), np.array([1, 0], dtype), [1.0, 2.0])
        assert r.shape == (3, 2) and r.rows.dtype == np.int32

    def test_huge_index_without_shape_is_a_value_error(self):
        """With shape inferred, an unmapped raw id (e.g. 2**40) must give a ValueError naming
        the offending field and position (rows[1]) -- not a MemoryError from allocating an
        m1-sized array, nor a message about a ``shape`` the user never passed."""
        with pytest.raises(ValueError, match=r"rows\[1\]"):
            RatingData([0, 2**40], [0, 1], [1.0, 2.0])

    def test_index_beyond_int32_is_refused_or_exact(self):
        """The views store indices as int32: a dimension > 2**31 - 1 must be refused with a
        ValueError (naming the field), or the views must still be exact -- never a silent
        wrap-around (which also makes two distinct pairs look like duplicates)."""
        big = 2**32 + 5
        try:
            r = RatingData([0, 0], [5, big], [1.0, 2.0], (1, 2**33))
        except ValueError as e:
            assert re.search(r"shape|cols", str(e)), str(e)
            return
        np.testing.assert_array_equal(r.row_view.index, [5, big])


class TestBadStructure:
    @pytest.mark.parametrize(
        "rows, cols, values",
        [([0, 1, 2], [0, 1], [1.0, 2.0, 3.0]), ([0, 1], [0, 1], [1.0]), ([0], [0, 1], [1.0, 2.0])],
    )
    def test_mismatched_lengths(self, rows, cols, values):
        msg = _raises("same length", rows, cols, values, (3, 3))
        for name in ("rows", "cols", "values"):
            assert name in msg

    def test_empty(self):
        _raises("empty", [], [], [])
        _raises("empty", np.array([], int), np.array([], int), np.array([], float), (3, 3))

    @pytest.mark.parametrize("field", ["rows", "cols", "values"])
    def test_not_one_dimensional(self, field):
        args = {"rows": [0, 1], "cols": [0, 1], "values": [1.0, 2.0]}
        args[field] = np.array([args[field]])  # shape (1, 2)
        _raises(field, args["rows"], args["cols"], args["values"], (2, 2))

    def test_scalars(self):
        _raises("rows", 0, 0, 1.0)

    @pytest.mark.parametrize(
        "shape, match",
        [
            ((2,), "shape"),
            ((2, 2, 2), "shape"),
            ("ab", r"shape\[0\]"),
            (5, "shape"),
            ((0, 3), r"shape\[0\]"),
            ((3, 0), r"shape\[1\]"),
            ((-1, 3), r"shape\[0\]"),
            ((2.0, 3), r"shape\[0\]"),
            ((3, 3.5), r"shape\[1\]"),
            ((True, 3), r"shape\[0\]"),
            ((3, None), r"shape\[1\]"),
            ((3, "3"), r"shape\[1\]"),
        ],
    )
    def test_bad_shape(self, shape, match):
        _raises(match, [0, 1], [0, 1], [1.0, 2.0], shape)

    def test_numpy_int_shape_accepted(self):
        r = RatingData([0], [0], [1.0], (np.int64(3), np.int32(4)))
        assert r.shape == (3, 4) and all(type(m) is int for m in r.shape)

    def test_shape_inferred(self):
        r = RatingData([0, 4], [2, 1], [1.0, 2.0])
        assert r.shape == (5, 3) and r.n == 2 and len(r) == 2


class TestDuplicates:
    def test_duplicate_pair_names_pair_and_positions(self):
        msg = _raises("duplicate", [0, 1, 2, 1], [0, 5, 1, 5], [1.0, 2.0, 3.0, 4.0], (3, 6))
        assert "(1, 5)" in msg
        assert re.search(r"\b1\b.*\b3\b", msg), msg

    def test_duplicate_reported_is_the_first_in_input_order(self):
        """Positions 2 (repeats position 0) and 3 (repeats position 1) are both duplicates;
        the first bad position in input order is 2, so the message must name (1, 0) at
        positions 0 and 2 -- not the pair that happens to sort first, (0, 0) at 1 and 3."""
        msg = _raises("duplicate", [1, 0, 1, 0], [0, 0, 0, 0], [1.0, 2.0, 3.0, 4.0], (2, 1))
        assert "(1, 0)" in msg and re.search(r"positions 0 and 2", msg), msg

    def test_same_row_different_col_is_fine(self):
        RatingData([0, 0, 1, 1], [0, 1, 0, 1], [1.0, 2.0, 3.0, 4.0])

    def test_duplicate_far_apart(self):
        rows, cols, vals, shape = _random_data(n=300)
        rows = np.append(rows, rows[7])
        cols = np.append(cols, cols[7])
        msg = _raises("duplicate", rows, cols, np.append(vals, 0.0), shape)
        assert re.search(r"\b7\b.*\b300\b", msg), msg


# ============================================================================= immutability
class TestReadOnly:
    def test_arrays_read_only(self):
        r = RatingData(*_random_data(n=50))
        arrays = [r.rows, r.cols, r.values, r.row_counts, r.col_counts]
        for view in (r.row_view, r.col_view):
            arrays += [view.indptr, view.index, view.values, view.order]
        for a in arrays:
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a[0] = a[0]

    def test_inputs_are_copied_not_frozen(self):
        rows, cols, vals, shape = _random_data(n=20)
        rows, cols, vals = rows.astype(np.int32), cols.astype(np.int32), vals.copy()
        r = RatingData(rows, cols, vals, shape)
        assert rows.flags.writeable and vals.flags.writeable
        before = (r.rows.copy(), r.values.copy())
        rows[0] = 39 - rows[0]
        vals[:] = 99.0
        np.testing.assert_array_equal(r.rows, before[0])
        np.testing.assert_array_equal(r.values, before[1])

    def test_transformations_do_not_touch_the_original(self):
        r = RatingData(*_random_data(n=40))
        v = r.values.copy()
        r.centered()
        r.with_values(np.zeros(r.n))
        r.split(0.25, seed=1)
        np.testing.assert_array_equal(r.values, v)

    def test_not_hashable_but_comparable(self):
        a = RatingData(*_random_data(n=30))
        b = RatingData(*_random_data(n=30))
        assert a == b
        assert a != a.with_values(a.values + 1)
        with pytest.raises(TypeError):
            hash(a)


# ============================================================================= views
def _check_view(r: RatingData, view: SortedView, by_row: bool):
    major, minor = (r.rows, r.cols) if by_row else (r.cols, r.rows)
    m_major = r.shape[0] if by_row else r.shape[1]
    assert isinstance(view, SortedView)
    assert view.indptr.dtype == np.int32 and view.index.dtype == np.int32
    assert view.order.dtype == np.int32  # int64 only beyond 2^31 - 1 ratings
    assert view.indptr.shape == (m_major + 1,)
    assert view.indptr[0] == 0 and view.indptr[-1] == r.n
    assert np.all(np.diff(view.indptr) >= 0)
    # order is a permutation of the positions
    np.testing.assert_array_equal(np.sort(view.order), np.arange(r.n))
    # group g of the view holds exactly the ratings with major index g, in ascending minor order
    group = np.repeat(np.arange(m_major), np.diff(view.indptr))
    np.testing.assert_array_equal(major[view.order], group)
    np.testing.assert_array_equal(minor[view.order], view.index)
    np.testing.assert_array_equal(r.values[view.order], view.values)
    for g in range(m_major):
        seg = view.index[view.indptr[g] : view.indptr[g + 1]]
        assert np.all(np.diff(seg) > 0), f"group {g} not strictly ascending: {seg}"
    # reconstruct the ORIGINAL triples exactly from the view alone
    rec_major = np.empty(r.n, np.int64)
    rec_minor = np.empty(r.n, np.int64)
    rec_vals = np.empty(r.n, r.values.dtype)
    rec_major[view.order] = group
    rec_minor[view.order] = view.index
    rec_vals[view.order] = view.values
    np.testing.assert_array_equal(rec_major, major)
    np.testing.assert_array_equal(rec_minor, minor)
    np.testing.assert_array_equal(rec_vals, r.values)  # bitwise: same dtype, same numbers
    assert rec_vals.dtype == view.values.dtype == r.values.dtype


@pytest.mark.parametrize(
    "seed, m1, m2, n, dtype",
    [
        (0, 40, 30, 500, np.float64),
        (1, 7, 300, 900, np.float32),
        (2, 300, 5, 1000, np.float64),
        (3, 1, 1, 1, np.float64),
        (4, 1, 50, 50, np.float64),
        (5, 60, 1, 20, np.float32),
    ],
)
def test_views_round_trip(seed, m1, m2, n, dtype):
    r = RatingData(*_random_data(seed, m1, m2, n, dtype))
    _check_view(r, r.row_view, by_row=True)
    _check_view(r, r.col_view, by_row=False)
    np.testing.assert_array_equal(r.row_counts, np.bincount(r.rows, minlength=m1))
    np.testing.assert_array_equal(r.col_counts, np.bincount(r.cols, minlength=m2))


def test_views_cached():
    r = RatingData(*_random_data(n=100))
    assert r.row_view is r.row_view and r.col_view is r.col_view


def test_views_with_empty_rows_and_columns():
    r = RatingData([3, 0, 3], [4, 4, 0], [1.0, 2.0, 3.0], (6, 7))
    np.testing.assert_array_equal(r.row_view.indptr, [0, 1, 1, 1, 3, 3, 3])
    np.testing.assert_array_equal(r.row_view.index, [4, 0, 4])
    np.testing.assert_array_equal(r.row_view.values, [2.0, 3.0, 1.0])
    np.testing.assert_array_equal(r.col_view.indptr, [0, 1, 1, 1, 1, 3, 3, 3])
    np.testing.assert_array_equal(r.col_view.index, [3, 0, 3])
    _check_view(r, r.row_view, True)
    _check_view(r, r.col_view, False)


# ============================================================================= split
class TestSplit:
    @staticmethod
    def _keys(r):
        return set(zip(r.rows.tolist(), r.cols.tolist()))

    @pytest.mark.parametrize(
        "n, frac", [(500, 0.2), (101, 0.2), (10, 0.5), (1000, 0.013), (37, 0.9)]
    )
    def test_partition(self, n, frac):
        r = RatingData(*_random_data(n=n, m1=50, m2=40))
        train, test = r.split(test_fraction=frac, seed=3)
        n_test = int(round(frac * n))
        assert (train.n, test.n) == (n - n_test, n_test)
        assert train.shape == test.shape == r.shape
        assert self._keys(train).isdisjoint(self._keys(test))
        assert self._keys(train) | self._keys(test) == self._keys(r)
        # values travel with their (row, col)
        lookup = {k: v for k, v in zip(zip(r.rows.tolist(), r.cols.tolist()), r.values.tolist())}
        for part in (train, test):
            for i, j, v in zip(part.rows.tolist(), part.cols.tolist(), part.values.tolist()):
                assert lookup[(i, j)] == v

    @pytest.mark.parametrize("seed", [0, 1, 12345])
    def test_matches_numpy_permutation(self, seed):
        r = RatingData(*_random_data(n=200))
        train, test = r.split(0.2, seed=seed)
        perm = np.random.default_rng(seed).permutation(r.n)
        # first 80% of the permutation is train; both keep the original relative order
        assert train == r.subset(np.sort(perm[:160]))
        assert test == r.subset(np.sort(perm[160:]))

    def test_default_is_80_20_seed_0(self):
        r = RatingData(*_random_data(n=100))
        train, test = r.split()
        assert (train.n, test.n) == (80, 20)
        assert train == r.split(0.2, seed=0)[0]

    def test_reproducible_and_seed_dependent(self):
        r = RatingData(*_random_data(n=300))
        a, b = r.split(0.2, seed=7), r.split(0.2, seed=7)
        assert a[0] == b[0] and a[1] == b[1]
        c = r.split(0.2, seed=8)
        assert c[1] != a[1]

    @pytest.mark.parametrize("frac", [0.0, 1.0, -0.1, 1.5, float("nan")])
    def test_bad_fraction(self, frac):
        r = RatingData(*_random_data(n=50))
        with pytest.raises(ValueError, match="test_fraction"):
            r.split(frac)

    def test_fraction_leaving_an_empty_part(self):
        r = RatingData(*_random_data(n=5))
        with pytest.raises(ValueError):
            r.split(0.05)  # round(0.25) = 0 test ratings
        with pytest.raises(ValueError):
            r.split(0.95)  # round(4.75) = 5: no train ratings


# ============================================================================= transformations
class TestTransformations:
    def test_centered(self):
        r = RatingData(*_random_data(n=200))
        c, off = r.centered()
        assert off == pytest.approx(float(np.mean(r.values)), rel=1e-15)
        assert abs(c.mean()) < 1e-12
        np.testing.assert_array_equal(c.rows, r.rows)
        np.testing.assert_array_equal(c.cols, r.cols)
        np.testing.assert_allclose(c.values + off, r.values, rtol=1e-14, atol=1e-14)

    def test_centered_given_offset_and_dtype(self):
        r = RatingData([0, 1, 2], [0, 0, 0], np.array([3.0, 4.0, 5.0], np.float32))
        c, off = r.centered(3.5)
        assert off == 3.5 and c.values.dtype == np.float32
        np.testing.assert_array_equal(c.values, [-0.5, 0.5, 1.5])

    def test_with_values(self):
        r = RatingData(*_random_data(n=30))
        w = r.with_values(np.arange(30.0))
        np.testing.assert_array_equal(w.values, np.arange(30.0))
        np.testing.assert_array_equal(w.rows, r.rows)
        assert w.shape == r.shape
        with pytest.raises(ValueError, match=r"values\[4\]"):
            r.with_values(np.where(np.arange(30) == 4, np.nan, 1.0))
        with pytest.raises(ValueError, match="same length"):
            r.with_values(np.ones(29))

    def test_subset(self):
        r = RatingData(*_random_data(n=30))
        s = r.subset([3, 1, 10])
        np.testing.assert_array_equal(s.rows, r.rows[[3, 1, 10]])
        np.testing.assert_array_equal(s.values, r.values[[3, 1, 10]])
        assert s.shape == r.shape
        mask = np.arange(30) % 3 == 0
        m = r.subset(mask)
        assert m.n == 10
        np.testing.assert_array_equal(m.cols, r.cols[mask])

    def test_subset_bad_index(self):
        r = RatingData(*_random_data(n=30))
        with pytest.raises(ValueError, match="mask"):
            r.subset(np.ones(29, bool))
        with pytest.raises(ValueError):
            r.subset([0.0, 1.0])
        with pytest.raises(ValueError, match="duplicate"):
            r.subset([2, 2])
        with pytest.raises(ValueError, match="empty"):
            r.subset(np.zeros(30, bool))

    def test_check_entries(self):
        r = RatingData(*_random_data(n=30, m1=40, m2=30))
        rows, cols = r.check_entries([0, 39, 5], np.array([29, 0, 5], np.int64))
        assert rows.dtype.kind == "i" and cols.dtype.kind == "i"
        np.testing.assert_array_equal(rows, [0, 39, 5])
        np.testing.assert_array_equal(cols, [29, 0, 5])
        rows, cols = r.check_entries([1.0, 2.0], [3.0, 4.0])  # integer-valued floats
        np.testing.assert_array_equal(rows, [1, 2])

    @pytest.mark.parametrize(
        "rows, cols, match",
        [
            ([0, 40], [0, 0], r"query rows\[1\]"),
            ([0, 0], [0, 30], r"query cols\[1\]"),
            ([-1, 0], [0, 0], r"query rows\[0\]"),
            ([0, 0.5], [0, 0], r"query rows\[1\]"),
            ([0, 1], [0], "same length"),
            (["a"], [0], "query rows"),
        ],
    )
    def test_check_entries_bad(self, rows, cols, match):
        r = RatingData(*_random_data(n=30, m1=40, m2=30))
        with pytest.raises(ValueError, match=match):
            r.check_entries(rows, cols, name="query")

    def test_to_dense_small(self):
        r = RatingData([0, 2], [1, 0], [5.0, 6.0], (3, 2))
        d = r.to_dense(fill=0.0)
        np.testing.assert_array_equal(d, [[0, 5], [0, 0], [6, 0]])
        with pytest.raises(ValueError):
            r.to_dense(max_size=5)

    def test_top_level_export(self):
        assert bmc.RatingData is RatingData


# ============================================================================= scale
@pytest.mark.slow
def test_ten_million_ratings():
    """MovieLens-10M size (71567 x 10681, 10^7 ratings): construction (validation,
    duplicate check, row view) and the column view in reasonable time."""
    m1, m2, n = 71_567, 10_681, 10_000_000
    rng = np.random.default_rng(0)
    # n distinct pairs in scrambled order, O(n): k -> (a k + b) mod m1*m2 is a bijection when
    # gcd(a, m1*m2) = 1 (np.unique / rng.choice of 10^7 keys would dominate the test's time)
    pop, a = m1 * m2, 2_654_435_761
    assert math.gcd(a, pop) == 1
    keys = (a * np.arange(n, dtype=np.int64) + 12_345) % pop
    rows, cols = np.divmod(keys, m2)
    vals = rng.integers(1, 11, size=n) / 2.0
    t0 = time.perf_counter()
    r = RatingData(rows, cols, vals, (m1, m2))
    rv, cv = r.row_view, r.col_view
    elapsed = time.perf_counter() - t0
    assert elapsed < 60.0, f"building a 10M RatingData and its views took {elapsed:.1f} s"
    assert rv.indptr[-1] == cv.indptr[-1] == n
    # sorted views: (row, col) keys strictly increasing in the row view, (col, row) in the col view
    row_of = np.repeat(np.arange(m1, dtype=np.int64), np.diff(rv.indptr))
    assert np.all(np.diff(row_of * m2 + rv.index) > 0)
    col_of = np.repeat(np.arange(m2, dtype=np.int64), np.diff(cv.indptr))
    assert np.all(np.diff(col_of * m1 + cv.index) > 0)
    np.testing.assert_array_equal(r.values[rv.order[:1000]], rv.values[:1000])


def test_with_values_shares_the_views():
    """with_values (and centered) reuse the validated entries' index views: same
    structure objects, values permuted consistently with a fresh build."""
    r = RatingData(*_random_data(n=40))
    _ = r.row_view, r.col_view
    c, off = r.centered()
    fresh = RatingData(r.rows, r.cols, r.values - r.values.dtype.type(off), r.shape)
    for name in ("row_view", "col_view"):
        a, b = getattr(c, name), getattr(fresh, name)
        assert getattr(c, name).order is getattr(r, name).order
        for f in ("indptr", "index", "values", "order"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        assert not a.values.flags.writeable
