"""The MovieLens ratings files (``u.data``, ``ratings.dat``, ``ratings.csv``) read into a
:class:`~bmczoo.data.RatingData` with the original ids of its rows and columns."""

from __future__ import annotations

import numpy as np

from ..data import RatingData
from ._parse import parse_numeric_table
from ._releases import MovieLensInfo

_CSV_HEADER = ("userid", "movieid", "rating", "timestamp")


def _read_ratings(data: bytes, info: MovieLensInfo, source: str) -> tuple[np.ndarray, int]:
    """Parse the ratings text of ``info``'s format.

    Returns the ``(n, 3)`` float64 table ``(user, movie, rating)`` and the file line
    number of its first row.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    first_line = 1
    if info.header:  # optional: a numeric first line means there is none
        head, _, rest = data.partition(b"\n")
        stripped = head.rstrip(b"\r")
        if stripped[:1].isalpha():
            fields = tuple(
                f.strip().decode("utf-8", "replace").lower() for f in stripped.split(b",")
            )
            if fields != _CSV_HEADER:
                raise ValueError(
                    f"{source}, line 1: unexpected header {stripped.decode('utf-8', 'replace')!r}; "
                    f"expected 'userId,movieId,rating,timestamp'"
                )
            data, first_line = rest, 2
    # the timestamps (4th field) are checked to be numbers but not converted
    table = parse_numeric_table(data, info.sep.encode(), 4, source, first_line, usecols=(0, 1, 2))

    def fail(mask: np.ndarray, what: str) -> None:
        k = int(np.flatnonzero(mask)[0])
        raise ValueError(f"{source}, line {first_line + k}: {what}, got {table[k].tolist()}")

    for col, label in ((0, "user id"), (1, "movie id")):
        c = table[:, col]
        bad = ~np.isfinite(c) | (c != np.round(c)) | (np.abs(c) > 2.0**53)
        if bad.any():
            fail(bad, f"{label} must be an integer")
        if (c < 0).any():  # MovieLens ids start at 1; a sign is a corrupt line
            fail(c < 0, f"{label} must be a non-negative integer")
    bad = ~np.isfinite(table[:, 2])
    if bad.any():
        fail(bad, "rating must be finite")
    return table, first_line


def _reindex(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted distinct ids, index of each id among them)``: ``np.unique(ids,
    return_inverse=True)``, in O(n) through a presence table when the id range is small."""
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo > max(4 * ids.size, 1 << 20):
        uniq, inverse = np.unique(ids, return_inverse=True)
        return uniq, inverse.reshape(-1)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[ids - lo] = True
    rank = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present) + lo, rank[ids - lo]


def to_ratingdata(
    table: np.ndarray, source: str, first_line: int
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    """``(RatingData, user_ids, item_ids)`` of a ``(user, item, rating)`` table whose first
    row is line ``first_line`` of ``source``; a duplicate rating names both lines."""
    user_ids, rows = _reindex(table[:, 0].astype(np.int64))
    item_ids, cols = _reindex(table[:, 1].astype(np.int64))
    shape = (len(user_ids), len(item_ids))
    try:
        data = RatingData(rows, cols, table[:, 2].copy(), shape)
    except ValueError as exc:
        key = rows.astype(np.int64) * shape[1] + cols
        order = np.argsort(key, kind="stable")
        dup = np.flatnonzero(key[order][1:] == key[order][:-1])
        if dup.size:
            a, b = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            raise ValueError(
                f"{source}: duplicate rating of movie {int(item_ids[cols[b]])} by user "
                f"{int(user_ids[rows[b]])} on lines {first_line + a} and {first_line + b}"
            ) from exc
        raise ValueError(f"{source}: {exc}") from exc
    user_ids.setflags(write=False)
    item_ids.setflags(write=False)
    return data, user_ids, item_ids


def load_bytes(
    data: bytes, info: MovieLensInfo, source: str
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    """``(RatingData, user_ids, item_ids)`` of the bytes of a ratings file of ``info``'s format."""
    table, first_line = _read_ratings(data, info, source)
    return to_ratingdata(table, source, first_line)
