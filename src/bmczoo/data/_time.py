"""Time features of ratings from their timestamps (the per-rating ``context`` of timeSVD++
and of myFM's relation blocks): time bins, item x time bin, user x day and the drift of a
user's ratings around their mean date, ``dev_u(t)``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .features import Features

__all__ = ["time_bins", "time_features", "TIME_GROUPS"]

#: the feature groups :func:`time_features` builds, in their order in the table
TIME_GROUPS = ("time_bin", "item_time_bin", "user_day", "user_dev")
_DAY = 86_400


def _times(data) -> np.ndarray:
    if data.timestamps is None:
        raise ValueError(
            "these ratings have no timestamps (data.timestamps is None): load them with a "
            "timestamp column (the MovieLens loaders keep it; read_ratings(columns=(user, "
            "item, rating, timestamp)))"
        )
    return np.asarray(data.timestamps, np.int64)


def time_bins(timestamps, bins: int = 30, by: str = "count") -> tuple[np.ndarray, int]:
    """Each timestamp's bin, ``(bin index (n,), number of bins)``.

    Parameters
    ----------
    timestamps : array_like of int, shape (n,)
        Seconds since the epoch (any integer clock with ``by="count"``).
    bins : int
        ``by="count"``: the number of bins, cut at the quantiles of ``timestamps`` (equal
        counts up to ties).  Ignored with ``by="month"``.
    by : {"count", "month"}
        Equal-count bins, or calendar months (UTC) from the first month to the last.

    Returns
    -------
    index : numpy.ndarray of int64, shape (n,)
    num_bins : int
    """
    t = np.asarray(timestamps, np.int64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"timestamps must be a non-empty 1-D array, got shape {t.shape}")
    if by == "month":
        months = t.astype("datetime64[s]").astype("datetime64[M]").astype(np.int64)
        return months - months.min(), int(months.max() - months.min() + 1)
    if by != "count":
        raise ValueError(f"by must be 'count' or 'month', got {by!r}")
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    edges = np.quantile(t, np.linspace(0, 1, int(bins) + 1)[1:-1])
    return np.searchsorted(edges, t, side="right").astype(np.int64), int(bins)


def _one_hot(keys: np.ndarray, label) -> tuple[np.ndarray, list[str]]:
    """Column of each rating and the names of the distinct ``keys`` (sorted)."""
    uniq, col = np.unique(keys, return_inverse=True)
    return col.ravel(), [label(k) for k in uniq.tolist()]


def time_features(
    data,
    groups: Sequence[str] = TIME_GROUPS,
    *,
    bins: int = 30,
    by: str = "count",
    beta: float = 0.4,
) -> Features:
    """The time features of each rating of ``data``: a per-rating table for
    :meth:`~bmczoo.data.RatingData.with_context`.

    Groups (Koren's timeSVD++, as myFM's examples code them):

    - ``"time_bin"``: the rating's time bin (one-hot, :func:`time_bins`);
    - ``"item_time_bin"``: the item x time bin pair (one-hot over the pairs present): the
      item bias's drift ``b_{i,Bin(t)}``;
    - ``"user_day"``: the user x day pair (one-hot over the pairs present, days in UTC):
      the day-specific user bias ``b_{u,t}``;
    - ``"user_dev"``: ``dev_u(t) = sign(t - t_u) |t - t_u|^beta`` (days) in the user's
      column, with ``t_u`` the user's mean date: the user bias's drift ``alpha_u dev_u(t)``.

    Build the table on the whole data and split after
    (:meth:`~bmczoo.data.RatingData.split` keeps it rating by rating), so that every part
    shares its columns.

    Parameters
    ----------
    data : RatingData
        Ratings with timestamps (seconds since the epoch).
    groups : sequence of str
        The groups to build, a subset of ``TIME_GROUPS``.
    bins, by
        The time bins (:func:`time_bins`).
    beta : float
        The exponent of ``dev_u`` (0.4 in timeSVD++).

    Returns
    -------
    Features
        ``data.n`` rows, the groups' columns in the order of ``TIME_GROUPS``.
    """
    t = _times(data)
    groups = tuple(groups)
    unknown = [g for g in groups if g not in TIME_GROUPS]
    if unknown or not groups:
        raise ValueError(f"groups must be a non-empty subset of {TIME_GROUPS}, got {groups!r}")
    rows, cols = np.asarray(data.rows, np.int64), np.asarray(data.cols, np.int64)
    m1 = data.shape[0]
    b, nb = time_bins(t, bins, by)
    day = t // _DAY
    # (column of each rating, its value, the names) per group, in TIME_GROUPS' order
    blocks = []
    if "time_bin" in groups:
        blocks.append((b, np.ones(t.size), [f"time_bin={k}" for k in range(nb)]))
    if "item_time_bin" in groups:
        col, names = _one_hot(cols * nb + b, lambda k: f"item_time_bin={k // nb}|{k % nb}")
        blocks.append((col, np.ones(t.size), names))
    if "user_day" in groups:
        D = int(day.max()) + 1
        col, names = _one_hot(rows * D + day, lambda k: f"user_day={k // D}|{k % D}")
        blocks.append((col, np.ones(t.size), names))
    if "user_dev" in groups:
        days = t / _DAY
        mean = np.bincount(rows, days, minlength=m1) / np.maximum(data.row_counts, 1)
        d = days - mean[rows]
        blocks.append((rows, np.sign(d) * np.abs(d) ** beta, [f"user_dev={u}" for u in range(m1)]))
    offsets = np.cumsum([0] + [len(names) for _, _, names in blocks])
    indices = np.stack([col + off for (col, _, _), off in zip(blocks, offsets)], 1)
    values = np.stack([v for _, v, _ in blocks], 1)
    names = [name for _, _, ns in blocks for name in ns]
    indptr = np.arange(0, indices.size + 1, indices.shape[1])
    # each name is "group=...": the table's groups are those of the names
    return Features(indptr, indices.ravel(), values.ravel(), names)
