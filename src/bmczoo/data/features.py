"""Side information: sparse feature tables aligned with the rows or columns of a matrix.

:class:`Features` is an ``m x F`` table with a name for every feature, stored CSR-style in
NumPy arrays (no SciPy needed; :meth:`Features.to_scipy` converts when SciPy is
installed).  It is what the MovieLens loaders attach as ``RatingData.row_features`` /
``RatingData.col_features`` and what a feature link in a prior consumes.

:func:`~bmczoo.data.features_from_table` builds one from any user or item table (a mapping
from column names to equal-length columns, e.g. a dict of lists or a pandas DataFrame):
one-hot categories, string prefixes (zip codes), bucketed numbers (ages, years), multi-label
sets (genres) and raw numbers.  :func:`~bmczoo.data.implicit_features` builds the
SVD++-style implicit feedback matrix (which columns each row rated, scaled by
``|R(i)|^-1/2``) from the pairs of a :class:`~bmczoo.data.RatingData`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["Features", "hstack_features"]


#: Entries of the dense row blocks that :meth:`Features.gram` multiplies (32 MiB).
_GRAM_BLOCK_ENTRIES = 1 << 22


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _group_of(name: str) -> str:
    return name.split("=", 1)[0]


class Features:
    """An ``n_rows x n_features`` sparse table of real features with names.

    Stored in compressed sparse row form: the non-zeros of row ``i`` are
    ``values[indptr[i]:indptr[i+1]]`` in the columns ``indices[indptr[i]:indptr[i+1]]``
    (strictly increasing within a row).  Row ``i`` describes row (or column) ``i`` of the
    rating matrix it belongs to.  Immutable: the arrays are read-only.

    Parameters
    ----------
    indptr : array_like of int, shape (n_rows + 1,)
    indices : array_like of int, shape (nnz,)
    values : array_like of float, shape (nnz,)
        Must be finite.
    names : sequence of str, length n_features
        One distinct name per feature, e.g. ``"occupation=writer"``, ``"age=[20,25)"``.
    groups : sequence of str, optional
        The group (source column) of each feature, e.g. ``"occupation"``; by default the
        part of the name before the first ``"="``.  Models may give each group its own
        prior scale (as myFM's ``group_shapes``).

    Raises
    ------
    ValueError
        On inconsistent shapes, unsorted or out-of-range indices, non-finite values,
        duplicate or non-string names.
    """

    __slots__ = ("_indptr", "_indices", "_values", "_names", "_groups")

    def __init__(
        self, indptr, indices, values, names: Sequence[str], groups: Sequence[str] | None = None
    ):
        names = tuple(names)
        if any(not isinstance(s, str) for s in names):
            raise ValueError("feature names must be strings")
        if len(set(names)) != len(names):
            seen: set[str] = set()
            dup = next(s for s in names if s in seen or seen.add(s))
            raise ValueError(f"duplicate feature name {dup!r}")
        groups = tuple(_group_of(s) for s in names) if groups is None else tuple(groups)
        if len(groups) != len(names) or any(not isinstance(g, str) for g in groups):
            raise ValueError(f"groups must be {len(names)} strings, one per feature")
        f = len(names)
        indptr = np.asarray(indptr)
        indices = np.asarray(indices)
        values = np.asarray(values, dtype=np.float64)
        if indptr.ndim != 1 or indptr.size < 1 or not np.issubdtype(indptr.dtype, np.integer):
            raise ValueError(
                f"indptr must be a 1-D integer array of length n_rows + 1, got shape {indptr.shape}"
            )
        if indices.ndim != 1 or (indices.size and not np.issubdtype(indices.dtype, np.integer)):
            raise ValueError("indices must be a 1-D integer array")
        if values.shape != indices.shape:
            raise ValueError(
                f"values and indices must have the same length, got {values.size} and "
                f"{indices.size}"
            )
        if indptr[0] != 0 or indptr[-1] != indices.size or (np.diff(indptr) < 0).any():
            raise ValueError("indptr must start at 0, be non-decreasing and end at len(indices)")
        if indices.size and (indices.min() < 0 or indices.max() >= f):
            raise ValueError(f"feature indices must lie in 0..{f - 1} (there are {f} names)")
        if not np.isfinite(values).all():
            k = int(np.flatnonzero(~np.isfinite(values))[0])
            row = int(np.searchsorted(indptr, k, side="right") - 1)
            raise ValueError(f"feature values must be finite; row {row} has {values[k]}")
        # strictly increasing columns within each row (what to_dense / matmul assume)
        if indices.size > 1:
            step = np.diff(indices.astype(np.int64))
            same_row = np.ones(indices.size - 1, dtype=bool)
            starts = indptr[1:-1]
            same_row[starts[(starts > 0) & (starts < indices.size)] - 1] = False
            if (step[same_row] <= 0).any():
                raise ValueError("feature indices must be strictly increasing within each row")
        self._indptr = _frozen(indptr.astype(np.int64))
        self._indices = _frozen(indices.astype(np.int32))
        self._values = _frozen(values)
        self._names = names
        self._groups = groups

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dense(
        cls, matrix, names: Sequence[str] | None = None, groups: Sequence[str] | None = None
    ) -> "Features":
        """Features from a dense ``(n_rows, n_features)`` array (zeros are not stored).

        Parameters
        ----------
        matrix : array_like, shape (n_rows, n_features)
            The feature values.
        names : sequence of str, optional
            One name per column (default ``"x0"``, ``"x1"``, ...).
        groups : sequence of str, optional
            One group name per column (e.g. the source column of a one-hot encoding).
        """
        a = np.asarray(matrix, dtype=np.float64)
        if a.ndim != 2:
            raise ValueError(f"matrix must be 2-D, got shape {a.shape}")
        if names is None:
            names = [f"x{j}" for j in range(a.shape[1])]
        if len(names) != a.shape[1]:
            raise ValueError(f"{len(names)} names for {a.shape[1]} columns")
        if not np.isfinite(a).all():
            i, j = np.argwhere(~np.isfinite(a))[0]
            raise ValueError(f"feature values must be finite; row {i}, column {j} is {a[i, j]}")
        nz = a != 0
        indptr = np.zeros(a.shape[0] + 1, dtype=np.int64)
        np.cumsum(nz.sum(axis=1), out=indptr[1:])
        rows, cols = np.nonzero(nz)  # row-major: columns ascending within a row
        return cls(indptr, cols, a[rows, cols], names, groups)

    @classmethod
    def from_scipy(
        cls, matrix, names: Sequence[str] | None = None, groups: Sequence[str] | None = None
    ) -> "Features":
        """Features from a SciPy sparse matrix (any format; converted to canonical CSR).

        Parameters
        ----------
        matrix : scipy.sparse matrix, shape (n_rows, n_features)
            The feature values.
        names : sequence of str, optional
            One name per column (default ``"x0"``, ``"x1"``, ...).
        groups : sequence of str, optional
            One group name per column (e.g. the source column of a one-hot encoding).
        """
        csr = matrix.tocsr(copy=True)
        csr.sum_duplicates()
        csr.sort_indices()
        if names is None:
            names = [f"x{j}" for j in range(csr.shape[1])]
        if len(names) != csr.shape[1]:
            raise ValueError(f"{len(names)} names for {csr.shape[1]} columns")
        return cls(csr.indptr, csr.indices, csr.data, names, groups)

    # ------------------------------------------------------------------ fields
    @property
    def indptr(self) -> np.ndarray:
        """Row pointers, shape (n_rows + 1,), int64, read-only."""
        return self._indptr

    @property
    def indices(self) -> np.ndarray:
        """Feature index of each stored value, shape (nnz,), int32, read-only."""
        return self._indices

    @property
    def values(self) -> np.ndarray:
        """Stored values, shape (nnz,), float64, read-only."""
        return self._values

    @property
    def names(self) -> tuple[str, ...]:
        """The feature names."""
        return self._names

    @property
    def groups(self) -> tuple[str, ...]:
        """The group of each feature."""
        return self._groups

    @property
    def n_rows(self) -> int:
        """Number of rows (users, or items)."""
        return int(self._indptr.size - 1)

    @property
    def n_features(self) -> int:
        """Number of features ``F``."""
        return len(self._names)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_features)``."""
        return self.n_rows, self.n_features

    @property
    def nnz(self) -> int:
        """Number of stored values."""
        return int(self._values.size)

    def group_sizes(self) -> list[tuple[str, int]]:
        """``[(group, number of consecutive features), ...]`` in feature order (myFM's
        ``group_shapes`` are the counts)."""
        out: list[tuple[str, int]] = []
        for g in self._groups:
            if out and out[-1][0] == g:
                out[-1] = (g, out[-1][1] + 1)
            else:
                out.append((g, 1))
        return out

    def row_ids(self) -> np.ndarray:
        """Row index of every stored value, shape (nnz,) (COO rows)."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), np.diff(self._indptr))

    def __repr__(self) -> str:
        return f"Features(n_rows={self.n_rows}, n_features={self.n_features}, nnz={self.nnz})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, Features):
            return NotImplemented
        return (
            self._names == other._names
            and self._groups == other._groups
            and np.array_equal(self._indptr, other._indptr)
            and np.array_equal(self._indices, other._indices)
            and np.array_equal(self._values, other._values)
        )

    __hash__ = None

    # ------------------------------------------------------------------ conversions
    def to_dense(self) -> np.ndarray:
        """The ``(n_rows, n_features)`` float64 array."""
        out = np.zeros(self.shape, dtype=np.float64)
        out[self.row_ids(), self._indices] = self._values
        return out

    def to_scipy(self):
        """A ``scipy.sparse.csr_matrix`` copy (needs SciPy)."""
        import scipy.sparse as sp

        return sp.csr_matrix(
            (self._values.copy(), self._indices.copy(), self._indptr.copy()), shape=self.shape
        )

    def take(self, rows) -> "Features":
        """The rows at the given indices, in that order (repeats allowed).

        Parameters
        ----------
        rows : array_like of int, shape (r,)
            Row indices.
        """
        idx = np.asarray(rows)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise ValueError("rows must be a 1-D array of integer indices")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            k = int(np.flatnonzero((idx < 0) | (idx >= self.n_rows))[0])
            raise ValueError(
                f"rows[{k}] = {int(idx[k])} is not a row index in 0..{self.n_rows - 1}"
            )
        counts = np.diff(self._indptr)[idx]
        indptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        # positions of the selected rows' values, in the new order
        pos = np.repeat(self._indptr[idx] - indptr[:-1], counts) + np.arange(indptr[-1])
        return Features(indptr, self._indices[pos], self._values[pos], self._names, self._groups)

    def reindex(self, like: "Features | Sequence[str]") -> "Features":
        """The same rows over another list of features, matched by name.

        Features named in ``like`` but absent here are zero columns; features not in
        ``like`` are dropped (a category never seen when ``like`` was built).  With
        ``like`` a :class:`Features`, its groups are kept too.  This encodes new rows
        (users or items without ratings) in the columns of an existing table::

            new = features_from_table(new_users, **spec).reindex(data.row_features)

        Parameters
        ----------
        like : Features or sequence of str
            The target table, or its feature names.
        """
        if isinstance(like, Features):
            names, groups = like.names, like.groups
        else:
            names = tuple(like)
            groups = None
        where = {s: k for k, s in enumerate(names)}
        if len(where) != len(names):
            raise ValueError("the target feature names must be distinct")
        new_index = np.array([where.get(s, -1) for s in self._names], dtype=np.int64)
        col = new_index[self._indices] if self.nnz else np.zeros(0, dtype=np.int64)
        keep = col >= 0
        rows = self.row_ids()[keep]
        col, val = col[keep], self._values[keep]
        order = np.lexsort((col, rows))
        indptr = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n_rows), out=indptr[1:])
        return Features(indptr, col[order], val[order], names, groups)

    # ------------------------------------------------------------------ products
    def dot(self, b) -> np.ndarray:
        """``X @ b``.

        Parameters
        ----------
        b : array_like, shape (n_features,) or (n_features, K)
            The dense operand.
        """
        b = np.asarray(b, dtype=np.float64)
        if b.shape[:1] != (self.n_features,):
            raise ValueError(f"b must have {self.n_features} rows, got shape {b.shape}")
        contrib = self._values.reshape((-1,) + (1,) * (b.ndim - 1)) * b[self._indices]
        out = np.zeros((self.n_rows,) + b.shape[1:], dtype=np.float64)
        np.add.at(out, self.row_ids(), contrib)
        return out

    def tdot(self, e) -> np.ndarray:
        """``X^T @ e``.

        Parameters
        ----------
        e : array_like, shape (n_rows,) or (n_rows, K)
            The dense operand.
        """
        e = np.asarray(e, dtype=np.float64)
        if e.shape[:1] != (self.n_rows,):
            raise ValueError(f"e must have {self.n_rows} rows, got shape {e.shape}")
        contrib = self._values.reshape((-1,) + (1,) * (e.ndim - 1)) * e[self.row_ids()]
        out = np.zeros((self.n_features,) + e.shape[1:], dtype=np.float64)
        np.add.at(out, self._indices, contrib)
        return out

    def gram(self) -> np.ndarray:
        """``X^T X``, dense ``(n_features, n_features)`` (for a few thousand features)."""
        f = self.n_features
        out = np.zeros((f, f), dtype=np.float64)
        # dense blocks of rows through BLAS, bounded in memory
        step = max(1, _GRAM_BLOCK_ENTRIES // max(f, 1))
        for lo in range(0, self.n_rows, step):
            block = self.take(np.arange(lo, min(lo + step, self.n_rows))).to_dense()
            out += block.T @ block
        return out


def hstack_features(*parts: Features) -> Features:
    """Side-by-side concatenation of feature tables with the same number of rows.

    Parameters
    ----------
    *parts : Features
        The tables, at least one; names must stay distinct across the parts.
    """
    if not parts:
        raise ValueError("hstack_features needs at least one Features")
    if any(not isinstance(p, Features) for p in parts):
        raise ValueError("hstack_features takes Features objects")
    m = parts[0].n_rows
    if any(p.n_rows != m for p in parts):
        raise ValueError(
            f"all parts must have the same number of rows, got {[p.n_rows for p in parts]}"
        )
    offsets = np.cumsum([0] + [p.n_features for p in parts])
    counts = sum(np.diff(p.indptr) for p in parts)
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    rows = np.concatenate([p.row_ids() for p in parts])
    cols = np.concatenate([p.indices.astype(np.int64) + off for p, off in zip(parts, offsets)])
    vals = np.concatenate([p.values for p in parts])
    order = np.lexsort((cols, rows))
    return Features(
        indptr,
        cols[order],
        vals[order],
        sum((p.names for p in parts), ()),
        sum((p.groups for p in parts), ()),
    )
