"""Sparse observations of an N-way array: :class:`TensorData`.

``indices`` (n, D) and ``values`` (n,) of the observed entries of a ``m_1 x ... x m_D``
array, validated as :class:`~bmczoo.data.RatingData` validates a matrix (the same index,
value, position and split functions); a matrix is its ``D = 2`` case
(:meth:`TensorData.from_ratings`, :meth:`TensorData.to_ratings`), and MovieLens with time
as a mode is a rating matrix with its timestamps cut into bins
(:meth:`TensorData.from_ratings` with ``time_bins=``).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ._time import time_bins as _time_bins
from .ratings import (
    _INT32_MAX,
    RatingData,
    SortedView,
    _as_index,
    _as_values,
    _check_positions,
    _frozen,
    _split_positions,
)

__all__ = ["TensorData"]


class TensorData:
    """Observed entries of an N-way array (``D >= 2`` modes, shape ``(m_1, ..., m_D)``).

    Parameters
    ----------
    index : array_like of int, shape (n, D)
        0-based index of each entry along each mode.
    values : array_like of float, shape (n,)
        The observed values (finite).
    shape : tuple of int, optional
        ``(m_1, ..., m_D)``; default one past the largest index of each mode.
    modes : tuple of str, optional
        The modes' names (default ``("mode0", "mode1", ...)``; a matrix from ratings:
        ``("user", "item")``, plus ``"time"`` with a time mode).

    Raises
    ------
    ValueError
        For an empty set, a non-finite value, an index out of range or not an integer, a
        repeated entry, fewer than two modes, or arrays of mismatched lengths.
    """

    def __init__(self, index, values, shape=None, *, modes=None):
        idx = np.asarray(index)
        v = np.asarray(values)
        if idx.ndim != 2 or idx.shape[1] < 2:
            raise ValueError(
                f"index must have shape (n, D) with D >= 2 modes, got shape {idx.shape}"
            )
        if v.ndim != 1 or v.shape[0] != idx.shape[0]:
            raise ValueError(
                f"values must have shape (n,) = ({idx.shape[0]},) to match index, got {v.shape}"
            )
        if v.shape[0] == 0:
            raise ValueError("TensorData is empty: index and values have length 0")
        D = idx.shape[1]
        if shape is None:
            shape = tuple(
                int(_as_index(f"index[:, {d}]", idx[:, d], _INT32_MAX).max()) + 1 for d in range(D)
            )
        shape = self._check_shape(shape, D)
        cols = [_as_index(f"index[:, {d}]", idx[:, d], shape[d]) for d in range(D)]
        self._indices = _frozen(np.stack(cols, axis=1).astype(np.int32))
        self._values = _frozen(_as_values(v))
        self._shape = shape
        modes = tuple(f"mode{d}" for d in range(D)) if modes is None else tuple(modes)
        if len(modes) != D or len(set(modes)) != D or not all(isinstance(m, str) for m in modes):
            raise ValueError(f"modes must be {D} distinct names, got {modes!r}")
        self._modes = modes
        self._check_duplicates()

    @staticmethod
    def _check_shape(shape, D: int) -> tuple[int, ...]:
        try:
            shape = tuple(shape)
        except TypeError:
            raise ValueError(f"shape must be a tuple of {D} sizes, got {shape!r}") from None
        if len(shape) != D:
            raise ValueError(f"shape has {len(shape)} sizes for {D} modes")
        for d, m in enumerate(shape):
            if isinstance(m, (bool, np.bool_)) or not isinstance(m, (int, np.integer)) or m <= 0:
                raise ValueError(f"shape[{d}] must be a positive integer, got {m!r}")
            if m > _INT32_MAX:
                raise ValueError(
                    f"shape[{d}] = {m} exceeds the largest supported dimension {_INT32_MAX}"
                )
        return tuple(int(m) for m in shape)

    def _check_duplicates(self) -> None:
        order = np.lexsort(self._indices.T[::-1])
        s = self._indices[order]
        same = np.flatnonzero(np.all(s[1:] == s[:-1], axis=1))
        if same.size:
            k = int(np.argmin(order[same + 1]))
            a, b = sorted((int(order[same[k]]), int(order[same[k] + 1])))
            raise ValueError(
                f"duplicate entry {tuple(int(i) for i in self._indices[b])} at positions {a} and {b}"
            )

    # ------------------------------------------------------------------ fields
    @property
    def indices(self) -> np.ndarray:
        """(n, D) int32 indices, read-only."""
        return self._indices

    @property
    def index(self) -> np.ndarray:
        """The same (n, D) indices as :attr:`indices` (the constructor's name)."""
        return self._indices

    @property
    def values(self) -> np.ndarray:
        """(n,) values, read-only."""
        return self._values

    @property
    def shape(self) -> tuple[int, ...]:
        """``(m_1, ..., m_D)``."""
        return self._shape

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes' names."""
        return self._modes

    @property
    def n(self) -> int:
        """The number of observed entries."""
        return int(self._values.shape[0])

    @property
    def ndim(self) -> int:
        """The number of modes ``D``."""
        return len(self._shape)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        dims = " x ".join(f"{m} {name}" for m, name in zip(self._shape, self._modes))
        return f"TensorData({self.n} entries of a {dims} array)"

    @cached_property
    def views(self) -> tuple[SortedView, ...]:
        """Each mode's sorted view (:class:`~bmczoo.data.SortedView`): the entries by their
        index along the mode (stable), ``index`` their positions in that order."""
        out = []
        for d in range(self.ndim):
            order = np.argsort(self._indices[:, d], kind="stable")
            counts = np.bincount(self._indices[:, d], minlength=self._shape[d])
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            out.append(
                SortedView(
                    indptr=_frozen(indptr),
                    index=_frozen(order.astype(np.int32)),
                    values=_frozen(self._values[order]),
                    order=_frozen(order),
                )
            )
        return tuple(out)

    # ------------------------------------------------------------------ subsets
    def subset(self, index) -> "TensorData":
        """The entries at the given positions, same shape.

        Parameters
        ----------
        index : array_like of bool, shape (n,), or array_like of int
            A boolean mask or integer positions.
        """
        idx = _check_positions(index, self.n)
        return TensorData(self._indices[idx], self._values[idx], self._shape, modes=self._modes)

    def split(self, test_fraction: float = 0.2, seed: int = 0) -> tuple["TensorData", "TensorData"]:
        """Uniform random split into train and test: the positions that
        :meth:`bmczoo.data.RatingData.split` takes for the same ``n``, ``test_fraction``
        and ``seed`` (a tensor made from ratings splits as the ratings do).

        Parameters
        ----------
        test_fraction : float
            Fraction of entries in the test set, in (0, 1).
        seed : int
            Seed of the permutation.
        """
        train, test = _split_positions(self.n, test_fraction, seed)
        return self.subset(train), self.subset(test)

    def mean(self) -> float:
        """The mean value (float64 accumulation)."""
        return float(np.mean(self._values, dtype=np.float64))

    def value_range(self) -> tuple[float, float]:
        """``(min, max)`` of the observed values."""
        return float(self._values.min()), float(self._values.max())

    def with_values(self, values) -> "TensorData":
        """Same entries with new values (validated).

        Parameters
        ----------
        values : array_like, shape (n,)
            The new values.
        """
        v = _as_values(np.asarray(values))
        if v.shape != self._values.shape:
            raise ValueError(f"values must have shape {self._values.shape}, got {v.shape}")
        return TensorData(self._indices, v, self._shape, modes=self._modes)

    def centered(self, offset: float | None = None) -> tuple["TensorData", float]:
        """Values minus ``offset`` (the mean by default); returns ``(data, offset)``.

        Parameters
        ----------
        offset : float, optional
            The value subtracted (default: the mean value).
        """
        off = self.mean() if offset is None else float(offset)
        return self.with_values(self._values - self._values.dtype.type(off)), off

    def check_entries(self, *index, name: str = "index") -> np.ndarray:
        """Entries checked against the shape, as (P, D) int32: one (P, D) array, or one
        index array (P,) per mode.

        Parameters
        ----------
        *index : array_like of int
            A (P, D) array, or ``D`` arrays (P,).
        name : str
            How the errors name them.
        """
        if len(index) == 1:
            idx = np.asarray(index[0])
        elif len(index) == self.ndim:
            idx = np.stack([np.asarray(a).reshape(-1) for a in index], axis=1)
        else:
            raise ValueError(
                f"give one (P, {self.ndim}) index array or {self.ndim} index arrays, one per "
                f"mode; got {len(index)} arrays"
            )
        if idx.ndim != 2 or idx.shape[1] != self.ndim:
            raise ValueError(f"{name} must have shape (P, {self.ndim}), got {idx.shape}")
        return np.stack(
            [_as_index(f"{name}[:, {d}]", idx[:, d], m) for d, m in enumerate(self._shape)], 1
        ).astype(np.int32)

    # ------------------------------------------------------------------ matrices
    @classmethod
    def from_ratings(
        cls, ratings: RatingData, *, time_bins: int | None = None, by: str = "count"
    ) -> "TensorData":
        """The ratings as a ``user x item`` array, or with ``time_bins`` a ``user x item x
        time`` array whose third index is each rating's time bin
        (:func:`bmczoo.data.time_bins`: ``by="count"`` equal-count bins of the timestamps,
        ``"month"`` calendar months).

        Parameters
        ----------
        ratings : RatingData
            The ratings (with ``timestamps`` for a time mode).
        time_bins : int, optional
            The number of time bins (``by="count"``); None: no time mode. With
            ``by="month"`` any value asks for the months.
        by : {"count", "month"}
            How the timestamps are cut.
        """
        idx = [ratings.rows, ratings.cols]
        shape, modes = list(ratings.shape), ["user", "item"]
        if time_bins is not None:
            if ratings.timestamps is None:
                raise ValueError(
                    "a time mode needs the ratings' timestamps (RatingData(..., timestamps=...);"
                    " the MovieLens loaders keep them)"
                )
            b, num = _time_bins(ratings.timestamps, time_bins, by)
            idx.append(b)
            shape.append(num)
            modes.append("time")
        return cls(np.stack(idx, axis=1), ratings.values, tuple(shape), modes=tuple(modes))

    def to_ratings(self) -> RatingData:
        """A two-mode array as :class:`~bmczoo.data.RatingData` (rows: mode 0)."""
        if self.ndim != 2:
            raise ValueError(f"to_ratings needs a two-mode array, this one has {self.ndim} modes")
        return RatingData(self._indices[:, 0], self._indices[:, 1], self._values, self._shape)
