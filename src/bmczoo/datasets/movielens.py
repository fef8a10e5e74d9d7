"""MovieLens rating data: local files, a user cache, and verified downloads.

``load_movielens(name)`` returns the ratings of one of the GroupLens MovieLens releases as
a :class:`~bmczoo.data.RatingData` with users as rows and movies as columns, re-indexed to
contiguous 0-based indices in increasing order of the original ids, and with the ratings
in file order.

Where the file comes from, in order:

1. ``path``: the ratings file itself, a folder holding it (also the folder the official
   archive extracts to, e.g. ``ml-1m/ratings.dat`` or ``ml-10M100K/ratings.dat``), or the
   official ``.zip`` archive.
2. The cache, ``cache_dir`` or ``$BMCZOO_CACHE`` or ``$XDG_CACHE_HOME/bmczoo`` (by
   default ``~/.cache/bmczoo``), laid out as ``<cache>/movielens/<archive folder>/<file>``.
3. A download of the official GroupLens archive (only if ``download=True``): its MD5 is
   checked, it is extracted safely into a temporary folder beside the cache entry, and
   that folder is renamed into place only once complete, so a failed or interrupted
   download never leaves a half-written cache entry.

Nothing touches the network at import time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, overload

import numpy as np

from ..data import Features, RatingData, features_from_table
from ._locate import cache_root, locate, locate_side
from ._ratings import load_bytes
from ._releases import DATASETS, MovieLensInfo, resolve_name
from ._side_files import read_side_tables

__all__ = [
    "DATASETS",
    "SIDE_FEATURES",
    "MovieLensInfo",
    "cache_root",
    "load_movielens",
    "load_movielens_side",
    "movielens_features",
    "resolve_name",
]


#: How :func:`load_movielens` turns the side tables into features: the keyword arguments
#: of :func:`bmczoo.data.features_from_table` for the users' and the movies' table, as in
#: myFM's MovieLens example (five-year age buckets, gender, occupation, first zip-code
#: character; release year, genres).  ML-1M's ages are already coded in ranges, bucketed
#: at those ranges' edges.
SIDE_FEATURES: Mapping[str, Mapping[str, object]] = MappingProxyType(
    {
        "users-100k": MappingProxyType(
            {
                "categorical": ("gender", "occupation"),
                "prefix": MappingProxyType({"zip": 1}),
                "numeric_buckets": MappingProxyType({"age": 5}),
            }
        ),
        "users-1m": MappingProxyType(
            {
                "categorical": ("gender", "occupation"),
                "prefix": MappingProxyType({"zip": 1}),
                "numeric_buckets": MappingProxyType({"age": (18, 25, 35, 45, 50, 56)}),
            }
        ),
        "items": MappingProxyType(
            {
                "numeric_buckets": MappingProxyType({"year": 1}),
                "multilabel": MappingProxyType({"genres": None}),
            }
        ),
    }
)


def _aligned(table: dict, ids: np.ndarray, what: str) -> dict[str, np.ndarray]:
    """The rows of ``table`` for the matrix's ``ids`` (in that order); every id must be in
    the table."""
    source = table["_source"]
    order = np.argsort(table["id"], kind="stable")
    sorted_ids = table["id"][order]
    pos = np.searchsorted(sorted_ids, ids)
    pos = np.minimum(pos, sorted_ids.size - 1)
    missing = sorted_ids[pos] != ids
    if missing.any():
        bad = ids[missing]
        raise ValueError(
            f"{source}: no line for {what} id {int(bad[0])} ({int(missing.sum())} rated {what}s "
            "missing); the side file does not match the ratings (side_info=False loads the "
            "ratings alone)"
        )
    rows = order[pos]
    return {k: v[rows] for k, v in table.items() if k != "_source"}


def _as_column(v) -> np.ndarray:
    """A table column as a 1-D array (object dtype for anything but numbers, so that a
    list of label tuples stays one entry per row)."""
    if isinstance(v, np.ndarray) and v.ndim == 1:
        return v
    values = list(v)
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    if values and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)
        for x in values
    ):
        return arr.astype(
            np.float64 if any(isinstance(x, (float, np.floating)) for x in values) else np.int64
        )
    return arr


def movielens_features(
    name: str,
    users: Mapping | None,
    items: Mapping | None,
    user_ids: np.ndarray,
    item_ids: np.ndarray,
) -> tuple[Features | None, Features | None]:
    """The default feature tables (:data:`SIDE_FEATURES`) of MovieLens side tables, aligned
    with the matrix rows (``user_ids``) and columns (``item_ids``) of the loaded ratings.

    Parameters
    ----------
    name : str
        The release (its users table's ages are coded differently in ML-1M).
    users, items : mapping or None
        Side tables as returned by :func:`load_movielens_side` (``None``: no features).
    user_ids, item_ids : numpy.ndarray
        Original ids of the rows and columns (``load_movielens(..., return_ids=True)``).

    Raises
    ------
    ValueError
        A rated user or movie has no line in its side table.
    """
    key = resolve_name(name)
    out: list[Features | None] = []
    for table, ids, what, spec in (
        (users, user_ids, "user", SIDE_FEATURES["users-1m" if key == "1m" else "users-100k"]),
        (items, item_ids, "movie", SIDE_FEATURES["items"]),
    ):
        if table is None:
            out.append(None)
            continue
        t = {k: _as_column(v) for k, v in table.items() if k != "_source"}
        if "id" not in t:
            raise ValueError(f"the {what} table has no 'id' column")
        t["id"] = t["id"].astype(np.int64)
        t["_source"] = table.get("_source", f"the {what} table")
        aligned = _aligned(t, np.asarray(ids, dtype=np.int64), what)
        out.append(
            features_from_table(
                aligned, **{k: (dict(v) if isinstance(v, Mapping) else v) for k, v in spec.items()}
            )
        )
    return out[0], out[1]


def _check_flags(**flags) -> None:
    """Each flag must be a bool: a truthy string such as ``"no"`` must not silently mean
    "yes, use the network"."""
    for flag_name, flag in flags.items():
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{flag_name} must be True or False, got {flag!r}")


@overload
def load_movielens(
    name: str,
    path: str | os.PathLike | None = ...,
    *,
    cache_dir: str | os.PathLike | None = ...,
    download: bool = ...,
    return_ids: Literal[False] = ...,
    side_info: bool = ...,
    time_bins: int | None = ...,
) -> RatingData: ...


@overload
def load_movielens(
    name: str,
    path: str | os.PathLike | None = ...,
    *,
    cache_dir: str | os.PathLike | None = ...,
    download: bool = ...,
    return_ids: Literal[True],
    side_info: bool = ...,
    time_bins: int | None = ...,
) -> tuple[RatingData, np.ndarray, np.ndarray]: ...


def load_movielens(
    name: str,
    path: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
    return_ids: bool = False,
    side_info: bool = True,
    time_bins: int | None = None,
) -> RatingData | tuple[RatingData, np.ndarray, np.ndarray]:
    """Load a MovieLens ratings file as a :class:`~bmczoo.data.RatingData` (with
    ``time_bins``: a user x item x time-bin :class:`~bmczoo.data.TensorData`).

    Parameters
    ----------
    name : str
        ``"100k"``, ``"1m"``, ``"10m"``, ``"20m"``, ``"25m"``, ``"32m"`` or
        ``"latest-small"``; also ``"ml-100k"``-style names (case-insensitive).  It fixes
        the file format: ``u.data`` (tab-separated) for 100k, ``ratings.dat``
        (``::``-separated) for 1m and 10m, ``ratings.csv`` (comma-separated, header
        ``userId,movieId,rating,timestamp``) for the others.  Every line holds
        ``user item rating timestamp``.
    path : str or os.PathLike, optional
        The ratings file, a folder containing it (directly or in the archive's folder,
        e.g. ``ml-1m/ratings.dat``), or the official ``.zip`` archive.  If omitted, the
        cache is used, and filled by a download if needed.
    cache_dir : str or os.PathLike, optional
        Cache folder; default ``$BMCZOO_CACHE``, else ``$XDG_CACHE_HOME/bmczoo``
        (``~/.cache/bmczoo`` when ``XDG_CACHE_HOME`` is unset).
    download : bool
        Whether a missing cache entry may be downloaded from files.grouplens.org.
    return_ids : bool
        Also return the original ids.
    side_info : bool
        Read the side files found beside the ratings (in the same folder or archive
        folder) into ``row_features`` / ``col_features``: ML-100K's ``u.user`` and
        ``u.item`` (with ``u.genre``), ML-1M's ``users.dat`` and ``movies.dat``, the
        ``movies.dat`` / ``movies.csv`` of the larger releases and ``latest-small``.
        Absent files give ``None``.  The features are those of :data:`SIDE_FEATURES`
        (age buckets, gender, occupation, first zip character; release year, genres);
        :func:`load_movielens_side` gives the raw tables for other encodings.
    time_bins : int, optional
        A ``user x item x time`` array instead, ``time_bins`` equal-count time bins
        (:meth:`bmczoo.data.TensorData.from_ratings`; no side tables).

    Returns
    -------
    RatingData
        Users as rows, movies as columns, ``shape = (distinct users, distinct movies)``,
        float64 ratings in file order.  Row ``i`` is the ``i``-th smallest user id, column
        ``j`` the ``j``-th smallest movie id; feature row ``i`` describes row ``i`` (users
        or movies of a side file without ratings are not rows of the matrix and are left
        out).
    user_ids, item_ids : numpy.ndarray of int64
        Only with ``return_ids=True``: ``user_ids[i]`` is the original id of row ``i``,
        ``item_ids[j]`` that of column ``j`` (both sorted, read-only).

    Raises
    ------
    ValueError
        Unknown ``name``; ``download`` or ``return_ids`` not a bool; a corrupt or truncated
        file (wrong number of fields, empty or non-numeric field, negative or non-integer
        id, non-finite rating, duplicate rating): the message names the file and the line;
        a corrupt zip archive; a download whose checksum does not match or an unsafe
        archive; a malformed side file, or one without a line for a rated user or movie.
    FileNotFoundError
        ``path`` does not exist or holds no ratings file; or the data is not cached and
        ``download=False``.

    Examples
    --------
    >>> r = load_movielens("100k", "data/ml-100k")          # doctest: +SKIP
    >>> r.n, r.shape                                        # doctest: +SKIP
    (100000, (943, 1682))
    """
    flags = dict(download=download, return_ids=return_ids, side_info=side_info)
    ratings, user_ids, item_ids = _load(name, path, cache_dir, flags, time_bins)
    return (ratings, user_ids, item_ids) if return_ids else ratings


def _load(name, path, cache_dir, flags: dict, time_bins):
    """:func:`load_movielens`'s ratings with their side tables (or as a user x item x
    time array), and the ids."""
    info = DATASETS[resolve_name(name)]
    _check_flags(**flags)
    download, side_info = flags["download"], flags["side_info"]
    data, source, side = locate(info, path, cache_dir, download)
    ratings, user_ids, item_ids = load_bytes(data, info, source)
    if side_info:
        users, items = read_side_tables(info, side)
        if users is not None or items is not None:
            rf, cf = movielens_features(info.name, users, items, user_ids, item_ids)
            ratings = ratings.with_features(rf, cf)
    if time_bins is not None:
        from ..data import TensorData

        ratings = TensorData.from_ratings(ratings, time_bins=time_bins)
    return ratings, user_ids, item_ids


def load_movielens_side(
    name: str,
    path: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = False,
) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray] | None]:
    """The raw user and movie tables of a MovieLens release, for custom features.

    The files are looked for where :func:`load_movielens` finds the ratings (same
    ``path`` / cache rules).  Each table is a dict of read-only columns, one entry per
    line of the side file, in file order:

    - users (ML-100K ``u.user``, ML-1M ``users.dat``): ``id``, ``age`` (years in ML-100K;
      ML-1M's range code 1, 18, 25, 35, 45, 50 or 56), ``gender``, ``occupation`` (ML-1M's
      codes as their names), ``zip`` (strings);
    - movies (``u.item``, ``movies.dat``, ``movies.csv``): ``id``, ``title``, ``year``
      (release year, NaN when unknown: from ML-100K's release date, else from the title),
      ``genres`` (tuples of genre names), and ML-100K's ``release_date``.

    Returns ``(users, movies)``, ``None`` for a table whose file is absent.  Align them
    with a matrix through the ids ``load_movielens(..., return_ids=True)`` returns, e.g.
    with :func:`movielens_features`, or encode them with
    :func:`bmczoo.data.features_from_table`.

    Examples
    --------
    >>> data, uid, iid = load_movielens("100k", "data/ml-100k", return_ids=True)   # doctest: +SKIP
    >>> users, movies = load_movielens_side("100k", "data/ml-100k")               # doctest: +SKIP
    >>> users["age"][0], users["occupation"][0]                                   # doctest: +SKIP
    (24.0, 'technician')
    """
    info = DATASETS[resolve_name(name)]
    _check_flags(download=download)
    side = locate_side(info, path, cache_dir, download)
    users, items = read_side_tables(info, side)
    for t in (users, items):
        if t is not None:
            t.pop("_source")
    return users, items
