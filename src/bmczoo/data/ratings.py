"""Validated, immutable container of observed matrix entries.

`RatingData` holds ``n`` observed triples ``(rows[k], cols[k], values[k])`` of an
``m1 x m2`` matrix.  Everything is checked once at construction; afterwards the arrays
are read-only.  The row-sorted and column-sorted (CSR-style) index views that the Gibbs
sweep and the VB iteration need are built lazily, once, and cached.
"""

from __future__ import annotations

from functools import cached_property
from typing import NamedTuple

import numpy as np

from ._splits import OFFICIAL_FOLDS
from .features import Features

__all__ = ["OFFICIAL_FOLDS", "RatingData", "SortedView", "check_entries"]


_INT32_MAX = np.iinfo(np.int32).max


class SortedView(NamedTuple):
    """CSR-style view of the ratings grouped by row (or by column).

    Attributes
    ----------
    indptr : (m + 1,) int32
        Entries of group ``g`` are positions ``indptr[g]:indptr[g+1]`` of the other arrays.
    index : (n,) int32
        The other coordinate (column for the row view, row for the column view),
        ascending within each group.
    values : (n,) float
        The rating values in that order.
    order : (n,) int32 (int64 beyond 2^31 - 1 ratings)
        Permutation of the original positions: ``view.values == data.values[view.order]``.
    """

    indptr: np.ndarray
    index: np.ndarray
    values: np.ndarray
    order: np.ndarray


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _as_values(v: np.ndarray) -> np.ndarray:
    """Validated float values (float32 kept, integers and other floats to float64)."""
    if v.dtype == bool or not (
        np.issubdtype(v.dtype, np.floating) or np.issubdtype(v.dtype, np.integer)
    ):
        raise ValueError(f"values must be real numbers, got dtype {v.dtype}")
    v = (
        v.astype(np.result_type(v.dtype, np.float32))
        if np.issubdtype(v.dtype, np.floating)
        else v.astype(np.float64)
    )
    bad = ~np.isfinite(v)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"values must be finite; values[{k}] = {v[k]}")
    return v


def _as_index(name: str, x, m: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == bool or not (
        np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)
    ):
        raise ValueError(f"{name} must hold integer indices, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating):
        bad = ~np.isfinite(a) | (a != np.round(a))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{name} must hold integer indices; {name}[{k}] = {a[k]!r} is not an integer"
            )
    if a.size and a.min() < 0:
        k = int(np.flatnonzero(a < 0)[0])
        raise ValueError(f"{name} must be non-negative (0-based); {name}[{k}] = {a[k]}")
    if a.size and a.max() >= m:
        k = int(np.flatnonzero(a >= m)[0])
        raise ValueError(f"{name}[{k}] = {int(a[k])} is out of range for a dimension of size {m}")
    return a.astype(np.int32 if m <= _INT32_MAX else np.int64)


def _check_positions(index, n: int) -> np.ndarray:
    """A boolean mask (n,) or integer positions in ``0..n-1``, checked."""
    idx = np.asarray(index)
    if idx.dtype == bool:
        if idx.shape != (n,):
            raise ValueError(f"boolean mask must have shape ({n},), got {idx.shape}")
    elif not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(
            f"index must be a boolean mask or integer positions, got dtype {idx.dtype}"
        )
    elif idx.size and (idx.min() < 0 or idx.max() >= n):
        k = int(np.flatnonzero((idx < 0) | (idx >= n))[0])
        raise ValueError(f"index[{k}] = {int(idx[k])} is not a position in 0..{n - 1}")
    return idx


def _split_positions(n: int, test_fraction, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and test positions of a uniform random split of ``n`` entries: the
    positions permuted with ``numpy.random.default_rng(seed)``, the first ``n -
    round(test_fraction * n)`` for training, each part sorted."""
    if (
        isinstance(test_fraction, (str, bytes, bool, np.bool_))
        or not isinstance(test_fraction, (int, float, np.number))
        or not (0.0 < float(test_fraction) < 1.0)
    ):
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    n_test = int(round(test_fraction * n))
    if n_test == 0 or n_test == n:
        raise ValueError(
            f"test_fraction={test_fraction} leaves an empty train or test set with n={n} ratings"
        )
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[: n - n_test]), np.sort(perm[n - n_test :])


class RatingData:
    """Observed entries ``(rows, cols, values)`` of an ``m1 x m2`` matrix.

    Parameters
    ----------
    rows, cols : array_like of int, shape (n,)
        0-based row and column indices.  Integer-valued floats are accepted.
    values : array_like of float, shape (n,)
        Observed values; must be finite.
    shape : tuple of int, optional
        ``(m1, m2)``.  Defaults to ``(max(rows) + 1, max(cols) + 1)``.
    row_features, col_features : Features, optional
        Side information: one feature row per matrix row (``m1`` rows) and per column
        (``m2`` rows).  Kept by every transformation (:meth:`split`, :meth:`subset`,
        :meth:`official_split`, :meth:`centered`, ...).
    timestamps : array_like of int, shape (n,), optional
        Each rating's time (seconds since the epoch in the MovieLens files; any integer
        clock).  Kept, rating by rating, by every transformation.
    context : Features, optional
        Per-rating features: one feature row per rating (``n`` rows), such as the time
        features of :func:`bmczoo.data.time_features`.  Kept, rating by rating, by every
        transformation.

    Raises
    ------
    ValueError
        On mismatched lengths, empty data, non-integer / negative / out-of-range indices,
        NaN or infinite values, or duplicate ``(row, col)`` pairs.  The message names the
        field and the first offending position.  Also for feature tables whose number of
        rows is not ``m1`` / ``m2`` (``n`` for ``context``) and for timestamps that are
        not integers.

    Notes
    -----
    The object is immutable: its arrays are read-only, and transformations
    (:meth:`split`, :meth:`centered`, :meth:`subset`) return new objects.  Equality
    (``==``) compares the entries and the shape, not the feature tables.
    """

    __slots__ = (
        "_rows",
        "_cols",
        "_values",
        "_shape",
        "_row_features",
        "_col_features",
        "_timestamps",
        "_context",
        "__dict__",
    )

    def __init__(
        self,
        rows,
        cols,
        values,
        shape: tuple[int, int] | None = None,
        *,
        row_features: Features | None = None,
        col_features: Features | None = None,
        timestamps=None,
        context: Features | None = None,
    ):
        r = np.asarray(rows)
        c = np.asarray(cols)
        v = np.asarray(values)
        for name, a in (("rows", r), ("cols", c), ("values", v)):
            if a.ndim != 1:
                raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
        if not (len(r) == len(c) == len(v)):
            raise ValueError(
                f"rows, cols and values must have the same length; got {len(r)}, {len(c)}, {len(v)}"
            )
        if len(v) == 0:
            raise ValueError("RatingData is empty: rows, cols and values have length 0")
        if shape is None:
            big = _INT32_MAX
            shape = (
                int(_as_index("rows", r, big).max()) + 1,
                int(_as_index("cols", c, big).max()) + 1,
            )
        shape = self._check_shape(shape)
        r = _as_index("rows", r, shape[0])
        c = _as_index("cols", c, shape[1])
        v = _as_values(v)
        self._rows, self._cols, self._values = _frozen(r), _frozen(c), _frozen(v)
        self._shape = shape
        self._row_features, self._col_features = self._check_features(row_features, col_features)
        self._timestamps, self._context = _check_per_rating(timestamps, context, self.n)
        # duplicate check uses the row view (built here once, cached for the hot path); the
        # sorted keys are a temporary (not cached: 8 bytes a rating)
        v = self.row_view
        key_sorted = (
            np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(v.indptr)) * self.shape[1]
            + v.index
        )
        dup = np.flatnonzero(key_sorted[1:] == key_sorted[:-1])
        if dup.size:
            # the stable sort keeps equal keys in input order: report the duplicate whose
            # later occurrence comes first in the input
            order = self.row_view.order
            k = int(np.argmin(order[dup + 1]))
            a, b = int(order[dup[k]]), int(order[dup[k] + 1])
            raise ValueError(
                f"duplicate (row, col) pair ({int(r[b])}, {int(c[b])}) at positions {a} and {b}"
            )

    @staticmethod
    def _check_shape(shape) -> tuple[int, int]:
        try:
            m1, m2 = shape
        except (TypeError, ValueError):
            raise ValueError(f"shape must be a pair (m1, m2), got {shape!r}") from None
        out = []
        for name, m in (("shape[0]", m1), ("shape[1]", m2)):
            if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m <= 0:
                raise ValueError(f"{name} must be a positive integer, got {m!r}")
            if m > _INT32_MAX:
                # the index views that the samplers use are int32
                raise ValueError(
                    f"{name} = {m} exceeds the largest supported dimension {_INT32_MAX}"
                )
            out.append(int(m))
        return out[0], out[1]

    def _check_features(
        self, row_features, col_features
    ) -> tuple[Features | None, Features | None]:
        for name, f, m in (
            ("row_features", row_features, self._shape[0]),
            ("col_features", col_features, self._shape[1]),
        ):
            _check_table(name, f, m, f"the matrix has {m} {name[:3]}s")
        return row_features, col_features

    # ------------------------------------------------------------------ basic fields
    @property
    def rows(self) -> np.ndarray:
        """0-based row indices, shape (n,), read-only."""
        return self._rows

    @property
    def cols(self) -> np.ndarray:
        """0-based column indices, shape (n,), read-only."""
        return self._cols

    @property
    def values(self) -> np.ndarray:
        """Observed values, shape (n,), read-only."""
        return self._values

    @property
    def shape(self) -> tuple[int, int]:
        """``(m1, m2)``."""
        return self._shape

    @property
    def row_features(self) -> Features | None:
        """Side information of the rows (``m1`` feature rows), or ``None``."""
        return self._row_features

    @property
    def col_features(self) -> Features | None:
        """Side information of the columns (``m2`` feature rows), or ``None``."""
        return self._col_features

    @property
    def timestamps(self) -> np.ndarray | None:
        """Each rating's time (int64, shape (n,), read-only), or ``None``."""
        return self._timestamps

    @property
    def context(self) -> Features | None:
        """The per-rating feature table (``n`` rows), or ``None``."""
        return self._context

    def with_context(self, context: Features | None = None, *, timestamps="keep") -> "RatingData":
        """Same entries with another per-rating feature table (and timestamps).

        Parameters
        ----------
        context : Features or None
            The new table, one row per rating (None: none).
        timestamps : array_like, None or "keep"
            The new timestamps (``"keep"``: unchanged; None: none).
        """
        out = self.with_values(self._values)
        keep = isinstance(timestamps, str) and timestamps == "keep"
        out._timestamps, out._context = _check_per_rating(
            self._timestamps if keep else timestamps, context, self.n
        )
        return out

    def with_features(
        self,
        row_features: Features | None | str = "keep",
        col_features: Features | None | str = "keep",
    ) -> "RatingData":
        """Same entries with other feature tables.

        Parameters
        ----------
        row_features, col_features : Features, None or "keep"
            The new tables (``"keep"``: unchanged; ``None``: none).
        """
        out = self.with_values(self._values)
        rf = (
            self._row_features
            if isinstance(row_features, str) and row_features == "keep"
            else row_features
        )
        cf = (
            self._col_features
            if isinstance(col_features, str) and col_features == "keep"
            else col_features
        )
        out._row_features, out._col_features = out._check_features(rf, cf)
        return out

    @property
    def n(self) -> int:
        """Number of observed entries."""
        return int(self._values.shape[0])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        m1, m2 = self.shape
        return f"RatingData(n={self.n}, shape=({m1}, {m2}), density={self.n / (m1 * m2):.4g})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, RatingData):
            return NotImplemented
        return (
            self.shape == other.shape
            and np.array_equal(self.rows, other.rows)
            and np.array_equal(self.cols, other.cols)
            and np.array_equal(self.values, other.values)
        )

    __hash__ = None  # mutable-looking equality semantics; not hashable

    # ------------------------------------------------------------------ cached views
    def _view(self, major: np.ndarray, minor: np.ndarray, m_major: int, m_minor: int) -> SortedView:
        key = major.astype(np.int64) * m_minor + minor
        order = np.argsort(key, kind="stable")
        counts = np.bincount(major, minlength=m_major)
        indptr = np.zeros(m_major + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        if indptr[-1] > _INT32_MAX:
            raise ValueError(f"too many ratings ({indptr[-1]}) for int32 index views")
        return SortedView(
            indptr=_frozen(indptr.astype(np.int32)),
            index=_frozen(minor[order].astype(np.int32)),
            values=_frozen(self._values[order]),
            # int32 positions while they fit (half the memory on 10M-rating data)
            order=_frozen(order.astype(np.int32 if self.n <= _INT32_MAX else np.int64)),
        )

    @cached_property
    def row_view(self) -> SortedView:
        """Ratings grouped by row (CSR of the ``m1 x m2`` matrix)."""
        return self._view(self._rows, self._cols, self.shape[0], self.shape[1])

    @cached_property
    def col_view(self) -> SortedView:
        """Ratings grouped by column (CSR of the transpose)."""
        return self._view(self._cols, self._rows, self.shape[1], self.shape[0])

    @cached_property
    def row_counts(self) -> np.ndarray:
        """Number of ratings in each row, shape (m1,)."""
        return _frozen(np.diff(self.row_view.indptr))

    @cached_property
    def col_counts(self) -> np.ndarray:
        """Number of ratings in each column, shape (m2,)."""
        return _frozen(np.diff(self.col_view.indptr))

    # ------------------------------------------------------------------ transformations
    def subset(self, index) -> "RatingData":
        """Ratings at the given positions, same shape.

        Parameters
        ----------
        index : array_like of bool, shape (n,), or array_like of int
            A boolean mask or integer positions.
        """
        idx = _check_positions(index, self.n)
        return RatingData(
            self._rows[idx],
            self._cols[idx],
            self._values[idx],
            self.shape,
            row_features=self._row_features,
            col_features=self._col_features,
            timestamps=None if self._timestamps is None else self._timestamps[idx],
            context=None if self._context is None else self._context.take(_positions(idx)),
        )

    def split(self, test_fraction: float = 0.2, seed: int = 0) -> tuple["RatingData", "RatingData"]:
        """Uniform random split of the ratings into train and test.

        The positions are permuted with ``numpy.random.default_rng(seed)``; the first
        ``n - round(test_fraction * n)`` positions of the permutation form the training
        set.  Both parts keep the original relative order and the full ``shape``.

        Parameters
        ----------
        test_fraction : float
            Fraction of ratings in the test set, in (0, 1).
        seed : int
            Seed of the permutation.

        Both parts keep the feature tables.
        """
        train_idx, test_idx = _split_positions(self.n, test_fraction, seed)
        return self.subset(train_idx), self.subset(test_idx)

    def split_per_user(
        self, test_fraction: float = 0.2, seed: int = 0, *, test_count: int | None = None
    ) -> tuple["RatingData", "RatingData"]:
        """Leave out a share of each user's (row's) pairs: the split of top-N evaluation.

        Of the ``n_u`` pairs of user ``u``, ``round(test_fraction * n_u)`` (or
        ``test_count``) go to the test set, at most ``n_u - 1``: every user keeps a training
        pair, and a user with one pair has none held out.  The held-out pairs are chosen
        uniformly with ``numpy.random.default_rng(seed)``.  Both parts keep the original
        relative order, the full ``shape`` and the feature tables.

        Parameters
        ----------
        test_fraction : float
            Share of each user's pairs held out, in (0, 1).
        seed : int
            Seed of the choice.
        test_count : int, optional
            Pairs held out per user instead of a share.

        Returns
        -------
        train, test : RatingData
        """
        from ._splits import per_user_test_mask

        mask = per_user_test_mask(self._rows, self.shape[0], test_fraction, test_count, seed)
        if not mask.any():
            raise ValueError(
                "the split holds out no pair: every user has too few pairs for "
                + (f"test_count={test_count}" if test_count else f"test_fraction={test_fraction}")
            )
        return self.subset(~mask), self.subset(mask)

    def official_split(
        self, fold: str, *, check_order: bool = True
    ) -> tuple["RatingData", "RatingData"]:
        """One of the official MovieLens 100K train/test folds (``u1.base``/``u1.test``, ...).

        The folds are reproduced from ``u.data`` by the rules of the release's ``mku.sh``
        and ``allbut.pl``:

        - ``"u1"`` .. ``"u5"``: the test set of ``uk`` is lines ``20000 (k-1) + 1`` ..
          ``20000 k`` of ``u.data`` (five consecutive blocks of 20,000 ratings), the
          training set the other 80,000 lines;
        - ``"ua"`` / ``"ub"``: reading ``u.data`` in order, the 1st-10th (``ua``) or
          11th-20th (``ub``) rating of each user go to the test set (at most 100,000 test
          lines, a limit never reached), the rest to training: 9,430 test ratings, 10 per
          user.

        Both parts are sorted like the released files (by user id, then movie id), keep
        the full ``shape`` and the feature tables.

        Parameters
        ----------
        fold : str
            ``"u1"`` .. ``"u5"``, ``"ua"`` or ``"ub"`` (case-insensitive).
        check_order : bool
            The folds are defined by line positions, so the entries must be the ML-100K
            ratings in ``u.data`` line order (as :func:`bmczoo.datasets.load_movielens`
            returns them).  By default this is checked against a SHA-256 of the
            ``(user, movie)`` pairs; ``False`` applies the rules to any data of the same
            size and shape.

        Returns
        -------
        train, test : RatingData

        Raises
        ------
        ValueError
            An unknown fold; data that are not 100,000 ratings of a 943 x 1682 matrix;
            pairs not in ``u.data``'s order (with ``check_order``).

        Examples
        --------
        >>> data = bmc.datasets.load_movielens("100k", path="data/ml-100k")  # doctest: +SKIP
        >>> train, test = data.official_split("u3")                          # doctest: +SKIP
        >>> train.n, test.n                                                  # doctest: +SKIP
        (80000, 20000)
        """
        from ._splits import official_test_mask

        test = official_test_mask(self._rows, self._cols, self.shape, fold, check_order)
        return self.subset(self._sorted_positions(~test)), self.subset(self._sorted_positions(test))

    def _sorted_positions(self, mask: np.ndarray) -> np.ndarray:
        """Positions where ``mask`` holds, ordered by (row, column) like ``sort -k1,1n -k2,2n``."""
        pos = np.flatnonzero(mask)
        return pos[np.lexsort((self._cols[pos], self._rows[pos]))]

    def mean(self) -> float:
        """Mean of the observed values (the global mean used for centring)."""
        return float(np.mean(self._values, dtype=np.float64))

    def value_range(self) -> tuple[float, float]:
        """``(min, max)`` of the observed values."""
        return float(self._values.min()), float(self._values.max())

    def with_values(self, values) -> "RatingData":
        """Same entries with new values (validated).

        The entries are already validated and their index views built: the new object
        shares them (only the values are permuted into the views), which keeps e.g.
        :meth:`centered` cheap in time and memory on 10M-rating data.

        Parameters
        ----------
        values : array_like, shape (n,)
            The new values.
        """
        v = np.asarray(values)
        if v.ndim != 1 or v.shape[0] != self.n:
            raise ValueError(
                f"values must be 1-D with the same length as the {self.n} entries, got shape {v.shape}"
            )
        out = object.__new__(RatingData)
        out._rows, out._cols, out._values, out._shape = (
            self._rows,
            self._cols,
            _frozen(_as_values(v)),
            self._shape,
        )
        out._row_features, out._col_features = self._row_features, self._col_features
        out._timestamps, out._context = self._timestamps, self._context
        cache = self.__dict__
        for name in ("row_view", "col_view"):
            if name in cache:
                view = cache[name]
                out.__dict__[name] = SortedView(
                    view.indptr, view.index, _frozen(out._values[view.order]), view.order
                )
        for name in ("row_counts", "col_counts"):
            if name in cache:
                out.__dict__[name] = cache[name]
        return out

    def centered(self, offset: float | None = None) -> tuple["RatingData", float]:
        """Ratings minus ``offset`` (the global mean by default); returns ``(data, offset)``.

        Parameters
        ----------
        offset : float, optional
            The value subtracted (default: the mean rating).
        """
        off = self.mean() if offset is None else float(offset)
        return self.with_values(self._values - self._values.dtype.type(off)), off

    def astype(self, dtype) -> "RatingData":
        """Same ratings with values cast to a floating ``dtype``.

        Parameters
        ----------
        dtype : dtype
            A floating dtype.
        """
        return self.with_values(self._values.astype(dtype))

    def to_dense(self, fill: float = np.nan, max_size: int = 10_000_000) -> np.ndarray:
        """Dense ``m1 x m2`` array with ``fill`` at unobserved entries (small problems only).

        Parameters
        ----------
        fill : float
            Value of the unobserved entries.
        max_size : int
            Largest ``m1 * m2`` allowed (``ValueError`` above it).
        """
        m1, m2 = self.shape
        if m1 * m2 > max_size:
            raise ValueError(
                f"refusing to materialise a {m1} x {m2} matrix (> max_size={max_size})"
            )
        out = np.full(self.shape, fill, dtype=self._values.dtype)
        out[self._rows, self._cols] = self._values
        return out

    def check_entries(self, rows, cols, name: str = "entries") -> tuple[np.ndarray, np.ndarray]:
        """Validate query indices against this shape; returns int32/int64 arrays.

        Parameters
        ----------
        rows, cols : array_like of int
            The indices.
        name : str
            What the indices are, for the error message.
        """
        return check_entries(rows, cols, self.shape, name)


def _positions(idx: np.ndarray) -> np.ndarray:
    return np.flatnonzero(idx) if idx.dtype == bool else idx


def _check_per_rating(timestamps, context, n: int):
    """``(timestamps, context)`` checked against ``n`` ratings: integer timestamps (int64,
    read-only) and a :class:`Features` of ``n`` rows."""
    if timestamps is not None:
        t = np.asarray(timestamps)
        if t.shape != (n,):
            raise ValueError(f"timestamps must have shape ({n},) (one per rating), got {t.shape}")
        if t.dtype.kind == "f":
            bad = ~np.isfinite(t) | (t != np.round(t))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise ValueError(f"timestamps[{k}] = {float(t[k])!r} is not an integer")
        elif t.dtype.kind not in "iu":
            raise ValueError(f"timestamps must be integers, got dtype {t.dtype}")
        timestamps = _frozen(t.astype(np.int64))
    _check_table("context", context, n, f"there are {n} ratings")
    return timestamps, context


def _check_table(name: str, table, n: int, expected: str) -> None:
    """A feature table (or None) of ``n`` rows, else an error naming ``name`` and what
    ``expected`` says."""
    if table is None:
        return
    if not isinstance(table, Features):
        raise ValueError(
            f"{name} must be a bmczoo.data.Features or None, got {type(table).__name__}"
        )
    if table.n_rows != n:
        raise ValueError(f"{name} has {table.n_rows} rows; {expected}")


def check_entries(
    rows, cols, shape: tuple[int, int], name: str = "entries"
) -> tuple[np.ndarray, np.ndarray]:
    """Validate query indices ``(rows, cols)`` against an ``m1 x m2`` ``shape``."""
    r = _as_index(f"{name} rows", rows, shape[0])
    c = _as_index(f"{name} cols", cols, shape[1])
    if r.shape != c.shape:
        raise ValueError(
            f"{name}: rows and cols must have the same length, got {r.shape} and {c.shape}"
        )
    return r, c
