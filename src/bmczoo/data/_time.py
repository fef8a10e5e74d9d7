"""Time features of ratings from their timestamps (the per-rating ``context`` of timeSVD++
and of myFM's relation blocks): time bins, item x time bin, user x day and the drift of a
user's ratings around their mean date, ``dev_u(t)``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .features import Features

__all__ = ["time_bins", "time_features", "TimeEncoder", "TIME_GROUPS"]

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
    rule = _bin_rule(t, bins, by)
    return _apply_bins(rule, t), rule[2]


def _bin_rule(t: np.ndarray, bins, by: str) -> tuple[str, np.ndarray, int]:
    """``(by, edges, number of bins)`` of :func:`time_bins` on the timestamps ``t``: the
    quantile edges of equal-count bins, or (months) the first month alone."""
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"timestamps must be a non-empty 1-D array, got shape {t.shape}")
    if by == "month":
        months = _months(t)
        return "month", months.min(keepdims=True), int(months.max() - months.min() + 1)
    if by != "count":
        raise ValueError(f"by must be 'count' or 'month', got {by!r}")
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    return "count", np.quantile(t, np.linspace(0, 1, int(bins) + 1)[1:-1]), int(bins)


def _months(t: np.ndarray) -> np.ndarray:
    return t.astype("datetime64[s]").astype("datetime64[M]").astype(np.int64)


def _apply_bins(rule: tuple[str, np.ndarray, int], t: np.ndarray) -> np.ndarray:
    """Each timestamp's bin under ``rule``; a time outside the bins' range is in the first
    or the last bin (the drift learned nearest to it)."""
    by, edges, nb = rule
    if by == "month":
        return np.clip(_months(t) - edges[0], 0, nb - 1)
    return np.searchsorted(edges, t, side="right").astype(np.int64)


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
    shares its columns; for ratings that come later, :class:`~bmczoo.data.TimeEncoder` encodes them in
    the columns, bins and users' mean dates of the ratings it was fitted on.

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
    return TimeEncoder.fit(data, groups, bins=bins, by=by, beta=beta).table


def _check_groups(groups) -> tuple[str, ...]:
    groups = (groups,) if isinstance(groups, str) else tuple(groups)
    unknown = [g for g in groups if g not in TIME_GROUPS]
    if unknown or not groups:
        raise ValueError(f"groups must be a non-empty subset of {TIME_GROUPS}, got {groups!r}")
    return groups


def _blocks(enc: "TimeEncoder", rows, cols, t) -> Features:
    """The time features of ratings ``(rows, cols, t)`` under ``enc``'s bins and users'
    mean dates, over the columns present among them (names ``group=...``)."""
    b, nb = _apply_bins(enc.bins, t), enc.bins[2]
    day = t // _DAY
    # (column of each rating, its value, the names) per group, in TIME_GROUPS' order
    blocks = []
    if "time_bin" in enc.groups:
        blocks.append((b, np.ones(t.size), [f"time_bin={k}" for k in range(nb)]))
    if "item_time_bin" in enc.groups:
        col, names = _one_hot(cols * nb + b, lambda k: f"item_time_bin={k // nb}|{k % nb}")
        blocks.append((col, np.ones(t.size), names))
    if "user_day" in enc.groups:
        D = int(day.max()) + 1 if t.size else 1
        col, names = _one_hot(rows * D + day, lambda k: f"user_day={k // D}|{k % D}")
        blocks.append((col, np.ones(t.size), names))
    if "user_dev" in enc.groups:
        m1 = enc.user_mean.size
        # a user without ratings when the encoder was fitted has no mean date: no drift
        d = np.nan_to_num(t / _DAY - enc.user_mean[rows])
        dev = np.sign(d) * np.abs(d) ** enc.beta
        blocks.append((rows, dev, [f"user_dev={u}" for u in range(m1)]))
    offsets = np.cumsum([0] + [len(names) for _, _, names in blocks])
    indices = np.stack([col + off for (col, _, _), off in zip(blocks, offsets)], 1)
    values = np.stack([v for _, v, _ in blocks], 1)
    names = [name for _, _, ns in blocks for name in ns]
    indptr = np.arange(0, indices.size + 1, indices.shape[1])
    # each name is "group=...": the table's groups are those of the names
    return Features(indptr, indices.ravel(), values.ravel(), names)


@dataclasses.dataclass(frozen=True, eq=False)
class TimeEncoder:
    """The time features of :func:`time_features`, fitted on some ratings and applied to
    others in the same columns: a model fitted with them predicts later ratings (a new
    time, a new user-day) from the weights it learned.

    Build it with :meth:`fit`; :meth:`transform` encodes ratings (a time after the last
    bin is in the last bin, a user x day or item x bin pair not seen at fit time has no
    column and so no effect, ``dev_u(t)`` uses the fitted users' mean dates); ``table``
    is the fitted ratings' own table (that of :func:`time_features`).  :meth:`to_dict` and
    :meth:`from_dict` write and read it as JSON-ready data (``bmczoo fit --save`` keeps it
    with the model).

    Parameters
    ----------
    groups : tuple of str
        The groups built.
    bins : (str, numpy.ndarray, int)
        How a time is binned: ``"count"`` with the quantile edges, or ``"month"`` with the
        first month, and the number of bins.
    user_mean : numpy.ndarray, shape (m1,)
        Each user's mean date in days (NaN: no rating at fit time).
    beta : float
        The exponent of ``dev_u``.
    names : tuple of str
        The columns (the fitted ratings' features).
    table : Features or None
        The fitted ratings' table (None after :meth:`from_dict`).
    """

    groups: tuple[str, ...]
    bins: tuple
    user_mean: np.ndarray
    beta: float
    names: tuple[str, ...]
    table: Features | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def fit(
        cls,
        data,
        groups: Sequence[str] = TIME_GROUPS,
        *,
        bins: int = 30,
        by: str = "count",
        beta: float = 0.4,
    ) -> "TimeEncoder":
        """The encoder of ``data``'s ratings (the arguments of :func:`time_features`).

        Parameters
        ----------
        data : RatingData
            Ratings with timestamps.
        groups : sequence of str
            A subset of ``TIME_GROUPS``.
        bins, by
            The time bins (:func:`time_bins`).
        beta : float
            The exponent of ``dev_u``.
        """
        t = _times(data)
        groups = _check_groups(groups)
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
            raise ValueError(f"beta must be a positive number, got {beta!r}")
        rows = np.asarray(data.rows, np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):  # NaN: a user without ratings
            mean = np.bincount(rows, t / _DAY, minlength=data.shape[0]) / data.row_counts
        enc = cls(groups, _bin_rule(t, bins, by), mean, float(beta), ())
        table = _blocks(enc, rows, np.asarray(data.cols, np.int64), t)
        return dataclasses.replace(enc, names=table.names, table=table)

    def transform(self, data) -> Features:
        """The time features of ``data``'s ratings in the fitted columns.

        Parameters
        ----------
        data : RatingData
            Ratings with timestamps, of the fitted ratings' shape (or fewer users).
        """
        return self.encode(data.rows, data.cols, _times(data))

    def encode(self, rows, cols, timestamps) -> Features:
        """The time features of entries ``(rows[k], cols[k])`` at ``timestamps[k]`` (a pair
        may repeat, at two times) in the fitted columns.

        Parameters
        ----------
        rows, cols : array_like of int, shape (P,)
            The entries' users and items.
        timestamps : array_like of int, shape (P,)
            Their times, seconds since the epoch.
        """
        rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        t = np.asarray(timestamps, np.int64)
        if not (rows.ndim == 1 and rows.shape == cols.shape == t.shape):
            raise ValueError(
                f"rows, cols and timestamps must be 1-D of one length, got shapes {rows.shape}, "
                f"{cols.shape} and {t.shape}"
            )
        if rows.size and (rows.min() < 0 or rows.max() >= self.user_mean.size):
            bad = int(rows[(rows < 0) | (rows >= self.user_mean.size)][0])
            raise ValueError(
                f"user {bad} is not among the {self.user_mean.size} users the encoder was fitted on"
            )
        return _blocks(self, rows, cols, t).reindex(self.names)

    def to_dict(self) -> dict:
        """JSON-ready data (lists and numbers) that :meth:`from_dict` reads back."""
        by, edges, nb = self.bins
        return {
            "groups": list(self.groups),
            "by": by,
            "edges": [float(e) for e in edges],
            "num_bins": int(nb),
            "user_mean": [None if np.isnan(v) else float(v) for v in self.user_mean],
            "beta": self.beta,
            "names": list(self.names),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "TimeEncoder":
        """The encoder :meth:`to_dict` described.

        Parameters
        ----------
        d : dict
            What :meth:`to_dict` gave.
        """
        mean = np.array([np.nan if v is None else v for v in d["user_mean"]], np.float64)
        bins = (d["by"], np.asarray(d["edges"], np.float64), int(d["num_bins"]))
        return cls(_check_groups(d["groups"]), bins, mean, float(d["beta"]), tuple(d["names"]))
