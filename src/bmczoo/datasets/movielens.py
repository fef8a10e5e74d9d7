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

import csv
import hashlib
import io
import math
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from collections.abc import Mapping, Sequence
from typing import Literal, overload

import numpy as np

from ..data import Features, RatingData, features_from_table
from ._parse import parse_numeric_table

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

_BASE_URL = "https://files.grouplens.org/datasets/movielens/"


@dataclass(frozen=True)
class MovieLensInfo:
    """Metadata of one MovieLens release.

    Attributes
    ----------
    name : str
        Canonical short name (``"100k"``, ``"1m"``, ...).
    url : str
        Official GroupLens archive URL.
    folder : str
        Top-level folder of the archive (``"ml-10M100K"`` for the 10M release).
    filename : str
        Ratings file inside ``folder``.
    sep : str
        Field separator: ``"\\t"``, ``"::"`` or ``","``.
    header : bool
        Whether the ratings file starts with a header line.
    md5 : str or None
        MD5 of the archive as published by GroupLens in ``<url>.md5``; ``None`` where the
        archive is updated in place (``latest-small``), in which case the published
        ``.md5`` companion file is downloaded and used instead.
    n_ratings : int or None
        Number of ratings, where known (from the release README).
    shape : tuple of int or None
        ``(users, movies with at least one rating)`` where known; this is the ``shape``
        of the loaded :class:`~bmczoo.data.RatingData`.
    rating_range : tuple of float
        Smallest and largest possible rating.
    """

    name: str
    url: str
    folder: str
    filename: str
    sep: str
    header: bool
    md5: str | None
    n_ratings: int | None = None
    shape: tuple[int, int] | None = None
    rating_range: tuple[float, float] = (0.5, 5.0)

    @property
    def archive(self) -> str:
        """File name of the archive (``"ml-100k.zip"``)."""
        return self.url.rsplit("/", 1)[-1]


def _info(name, archive, folder, filename, sep, header, md5, n=None, shape=None, rr=(0.5, 5.0)):
    return MovieLensInfo(
        name, _BASE_URL + archive, folder, filename, sep, header, md5, n, shape, rr
    )


# MD5 sums: these are the values GroupLens publishes beside each archive
# (``https://files.grouplens.org/datasets/movielens/<archive>.md5``), as reproduced
# identically by many independent projects that pin them.  They could not be re-verified
# from this machine (no access to files.grouplens.org).  GroupLens publishes MD5 only, so
# no SHA-256 is claimed.  ``ml-latest-small.zip`` is regenerated in place by GroupLens,
# so no fixed value is pinned for it: the ``.md5`` companion file is fetched and used.
_TABLE = (
    _info(
        "100k",
        "ml-100k.zip",
        "ml-100k",
        "u.data",
        "\t",
        False,
        "0e33842e24a9c977be4e0107933c0723",
        100_000,
        (943, 1682),
        (1.0, 5.0),
    ),
    _info(
        "1m",
        "ml-1m.zip",
        "ml-1m",
        "ratings.dat",
        "::",
        False,
        "c4d9eecfca2ab87c1945afe126590906",
        1_000_209,
        (6040, 3706),
        (1.0, 5.0),
    ),
    _info(
        "10m",
        "ml-10m.zip",
        "ml-10M100K",
        "ratings.dat",
        "::",
        False,
        "ce571fd55effeba0271552578f2648bd",
        10_000_054,
        (69878, 10677),
    ),
    _info(
        "20m",
        "ml-20m.zip",
        "ml-20m",
        "ratings.csv",
        ",",
        True,
        "cd245b17a1ae2cc31bb14903e1204af3",
        20_000_263,
    ),
    _info(
        "25m",
        "ml-25m.zip",
        "ml-25m",
        "ratings.csv",
        ",",
        True,
        "6b51fb2759a8657d3bfcbfc42b592ada",
        25_000_095,
    ),
    _info(
        "32m",
        "ml-32m.zip",
        "ml-32m",
        "ratings.csv",
        ",",
        True,
        "d472be332d4daa821edc399621853b57",
        32_000_204,
    ),
    _info("latest-small", "ml-latest-small.zip", "ml-latest-small", "ratings.csv", ",", True, None),
)

#: Metadata of the supported MovieLens releases, keyed by canonical name (read-only).
DATASETS: Mapping[str, MovieLensInfo] = MappingProxyType({d.name: d for d in _TABLE})

_CSV_HEADER = ("userid", "movieid", "rating", "timestamp")


def resolve_name(name: str) -> str:
    """Canonical dataset name: ``"ML-100K"``, ``"ml_1m"``, ``"ml-10M100K"`` -> ``"100k"``, ...

    Raises
    ------
    ValueError
        If ``name`` is not a known MovieLens release.
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {type(name).__name__}")
    key = name.strip().lower().replace("_", "-")
    for prefix in ("movielens-", "movielens", "ml-", "ml"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    key = {"10m100k": "10m", "latestsmall": "latest-small"}.get(key, key)
    if key not in DATASETS:
        raise ValueError(
            f"unknown MovieLens dataset {name!r}; known: {', '.join(DATASETS)} (also as 'ml-100k' etc.)"
        )
    return key


# --------------------------------------------------------------------------- parsing
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


def _to_ratingdata(
    table: np.ndarray, source: str, first_line: int
) -> tuple[RatingData, np.ndarray, np.ndarray]:
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


def _load_bytes(
    data: bytes, info: MovieLensInfo, source: str
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    table, first_line = _read_ratings(data, info, source)
    return _to_ratingdata(table, source, first_line)


# --------------------------------------------------------------------------- side files
#: The 19 genres of ML-100K's ``u.item`` flags, in column order (its ``u.genre``).
_ML100K_GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)

#: ML-1M's occupation codes (its README).
_ML1M_OCCUPATIONS = (
    "other",
    "academic/educator",
    "artist",
    "clerical/admin",
    "college/grad student",
    "customer service",
    "doctor/health care",
    "executive/managerial",
    "farmer",
    "homemaker",
    "K-12 student",
    "lawyer",
    "programmer",
    "retired",
    "sales/marketing",
    "scientist",
    "self-employed",
    "technician/engineer",
    "tradesman/craftsman",
    "unemployed",
    "writer",
)

#: The side files of each release: ``(users file, items file)`` (``None``: none shipped).
_SIDE_FILES = {
    "100k": ("u.user", "u.item"),
    "1m": ("users.dat", "movies.dat"),
    "10m": (None, "movies.dat"),
    "20m": (None, "movies.csv"),
    "25m": (None, "movies.csv"),
    "32m": (None, "movies.csv"),
    "latest-small": (None, "movies.csv"),
}

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

_TITLE_YEAR = re.compile(r"\((\d{4})(?:[-\u2013]\d{0,4})?\)\s*$")


def _text(data: bytes, source: str) -> list[tuple[int, str]]:
    """Non-blank lines with their 1-based line numbers; UTF-8, else Latin-1 (ML-100K's
    ``u.item`` and ML-1M's ``movies.dat`` are Latin-1)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return [(k, line) for k, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _side_id(field: str, source: str, lineno: int) -> int:
    try:
        v = int(field)
    except ValueError:
        raise ValueError(f"{source}, line {lineno}: the id {field!r} is not an integer") from None
    if v < 0:
        raise ValueError(f"{source}, line {lineno}: the id {v} is negative")
    return v


def _fields(line: str, sep: str, n: int, source: str, lineno: int) -> list[str]:
    parts = line.split(sep)
    if len(parts) != n:
        raise ValueError(
            f"{source}, line {lineno}: expected {n} fields separated by {sep!r}, found {len(parts)} "
            f"(file corrupt or truncated?): {line[:80]!r}"
        )
    return parts


def _year_of_title(title: str) -> float:
    m = _TITLE_YEAR.search(title)
    return float(m.group(1)) if m else math.nan


def _table(columns: dict[str, list], source: str) -> dict[str, np.ndarray]:
    ids = columns["id"]
    if len(set(ids)) != len(ids):
        seen: set[int] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        raise ValueError(f"{source}: id {dup} appears on more than one line")
    out = {}
    for name, col in columns.items():
        if name == "genres":
            arr = np.empty(len(col), dtype=object)
            arr[:] = [tuple(g) for g in col]
        elif name == "id":
            arr = np.asarray(col, dtype=np.int64)
        elif name in ("age", "year"):
            arr = np.asarray(col, dtype=np.float64)
        else:
            arr = np.asarray(col, dtype=object)
        arr.setflags(write=False)
        out[name] = arr
    return out


def _parse_users(data: bytes, name: str, source: str) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {"id": [], "age": [], "gender": [], "occupation": [], "zip": []}
    for lineno, line in _text(data, source):
        if name == "100k":  # id|age|gender|occupation|zip
            uid, age, gender, occ, zipc = _fields(line, "|", 5, source, lineno)
        else:  # 1m: id::gender::age::occupation code::zip
            uid, gender, age, occ, zipc = _fields(line, "::", 5, source, lineno)
            try:
                code = int(occ)
                occ = _ML1M_OCCUPATIONS[code] if 0 <= code < len(_ML1M_OCCUPATIONS) else occ
            except ValueError:
                pass  # kept as written
        try:
            a = float(age) if age.strip() else math.nan
        except ValueError:
            raise ValueError(f"{source}, line {lineno}: the age {age!r} is not a number") from None
        cols["id"].append(_side_id(uid, source, lineno))
        cols["age"].append(a)
        cols["gender"].append(gender.strip())
        cols["occupation"].append(occ.strip())
        cols["zip"].append(zipc.strip())
    if not cols["id"]:
        raise ValueError(f"{source}: no lines")
    return _table(cols, source)


def _parse_items(
    data: bytes, name: str, source: str, genre_names: Sequence[str]
) -> dict[str, np.ndarray]:
    cols: dict[str, list] = {"id": [], "title": [], "year": [], "genres": []}
    lines = _text(data, source)
    if name in ("100k",):
        n_flags = len(genre_names)
        cols["release_date"] = []
        for lineno, line in lines:  # id|title|release date|video release date|url|flags
            f = _fields(line, "|", 5 + n_flags, source, lineno)
            flags = f[5:]
            if any(v not in ("0", "1") for v in flags):
                raise ValueError(
                    f"{source}, line {lineno}: the genre flags must be 0 or 1: {line[:80]!r}"
                )
            date = f[2].strip()
            m = re.search(r"(\d{4})$", date)
            cols["id"].append(_side_id(f[0], source, lineno))
            cols["title"].append(f[1])
            cols["release_date"].append(date)
            cols["year"].append(float(m.group(1)) if m else math.nan)
            cols["genres"].append([g for g, v in zip(genre_names, flags) if v == "1"])
    else:
        if name in ("1m", "10m"):  # id::title::genres
            rows = []
            for lineno, line in lines:
                uid, sep, rest = line.partition("::")
                title, sep2, genres = rest.rpartition("::")
                if not sep or not sep2:
                    raise ValueError(
                        f"{source}, line {lineno}: expected 3 fields separated by '::': {line[:80]!r}"
                    )
                rows.append((lineno, uid, title, genres))
        else:  # movies.csv: movieId,title,genres with a header, titles quoted
            body = [line for _, line in lines]
            reader = csv.reader(io.StringIO("\n".join(body)))
            rows = []
            for k, rec in enumerate(reader):
                lineno = lines[k][0] if k < len(lines) else k + 1
                if k == 0 and rec and rec[0].strip().lower() == "movieid":
                    continue
                if len(rec) != 3:
                    raise ValueError(
                        f"{source}, line {lineno}: expected 3 comma-separated fields, found {len(rec)}"
                    )
                rows.append((lineno, *rec))
        for lineno, uid, title, genres in rows:
            genres = genres.strip()
            cols["id"].append(_side_id(uid, source, lineno))
            cols["title"].append(title.strip())
            cols["year"].append(_year_of_title(title))
            cols["genres"].append(
                []
                if genres in ("", "(no genres listed)")
                else [g.strip() for g in genres.split("|") if g.strip()]
            )
    if not cols["id"]:
        raise ValueError(f"{source}: no lines")
    return _table(cols, source)


def _genre_names(side: "_SideFiles") -> tuple[str, ...]:
    """ML-100K's genre names from ``u.genre`` (``name|index`` lines) when present."""
    got = side.read("u.genre")
    if got is None:
        return _ML100K_GENRES
    data, source = got
    names: dict[int, str] = {}
    for lineno, line in _text(data, source):
        genre, _, idx = line.rpartition("|")
        try:
            names[int(idx)] = genre
        except ValueError:
            raise ValueError(
                f"{source}, line {lineno}: expected 'name|index': {line[:80]!r}"
            ) from None
    if sorted(names) != list(range(len(names))):
        raise ValueError(f"{source}: the genre indices must be 0..{len(names) - 1}")
    return tuple(names[k] for k in range(len(names)))


def _read_side_tables(info: MovieLensInfo, side: "_SideFiles") -> tuple[dict | None, dict | None]:
    users_file, items_file = _SIDE_FILES[info.name]
    users = items = None
    if users_file is not None and (got := side.read(users_file)) is not None:
        users = _parse_users(got[0], info.name, got[1])
        users["_source"] = got[1]
    if items_file is not None and (got := side.read(items_file)) is not None:
        genres = _genre_names(side) if info.name == "100k" else ()
        items = _parse_items(got[0], info.name, got[1], genres)
        items["_source"] = got[1]
    return users, items


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
            f"{source}: no line for {what} id {int(bad[0])} ({int(missing.sum())} rated {what}s missing); "
            "the side file does not match the ratings (side_info=False loads the ratings alone)"
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


# --------------------------------------------------------------------------- locating files
def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$BMCZOO_CACHE``, else
    ``$XDG_CACHE_HOME/bmczoo`` (``~/.cache/bmczoo`` by default)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("BMCZOO_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "bmczoo"


def _find_in_folder(folder: Path, info: MovieLensInfo) -> Path | None:
    for cand in (folder / info.filename, folder / info.folder / info.filename):
        if cand.is_file():
            return cand
    return None


def _read_from_zip(path: Path, info: MovieLensInfo) -> tuple[bytes, str]:
    member = f"{info.folder}/{info.filename}"
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            for cand in (member, info.filename):
                if cand in names:
                    return zf.read(cand), f"{path}!{cand}"
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{path}: not a valid zip archive ({exc})") from exc
    raise ValueError(f"{path}: the archive has no member {member!r}")


# --------------------------------------------------------------------------- download
def _fetch(url: str, dest: Path) -> None:  # pragma: no cover - needs the network
    """Download ``url`` to the file ``dest`` (streamed, with a progress bar on a terminal)."""
    import urllib.request

    from tqdm.auto import tqdm

    req = urllib.request.Request(url, headers={"User-Agent": "bmczoo (Python urllib)"})
    with urllib.request.urlopen(req, timeout=60) as resp, open(dest, "wb") as out:
        total = resp.headers.get("Content-Length")
        with tqdm(
            total=int(total) if total else None,
            unit="B",
            unit_scale=True,
            desc=dest.name,
            disable=None,
            leave=False,
        ) as bar:
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                out.write(block)
                bar.update(len(block))


def _md5_of(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _published_md5(info: MovieLensInfo, workdir: Path) -> str:
    """Fetch and read ``<url>.md5`` (``MD5 (x.zip) = <hex>`` or ``<hex>  x.zip``)."""
    dest = workdir / (info.archive + ".md5")
    _fetch(info.url + ".md5", dest)
    text = dest.read_text(encoding="utf-8", errors="replace")
    found = {h.lower() for h in re.findall(r"\b[0-9a-fA-F]{32}\b", text)}
    if len(found) != 1:
        raise ValueError(f"could not read an MD5 sum from {info.url}.md5: {text[:200]!r}")
    return found.pop()


def _unsafe_reason(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    if not name:
        return "empty member name"
    if "\\" in name or "\x00" in name:
        return "backslash or NUL in the member name"
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in PurePosixPath(name).parts:
        return "'..' in the path"
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if mode and stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "special file"
    return None


def _safe_extract(archive: Path, dest: Path) -> None:
    """Extract ``archive`` into the folder ``dest``, refusing unsafe members.

    Raises
    ------
    ValueError
        For a corrupt archive, or any member with an absolute path, a ``..`` component,
        a backslash, or which is a symbolic link or special file (nothing is extracted
        in that case: all members are checked first).
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            for m in members:
                reason = _unsafe_reason(m)
                if reason:
                    raise ValueError(
                        f"{archive.name}: refusing to extract member {m.filename!r} ({reason})"
                    )
            root = dest.resolve()
            for m in members:
                target = dest.joinpath(*PurePosixPath(m.filename).parts)
                if not target.resolve().is_relative_to(root):  # belt and braces
                    raise ValueError(f"{archive.name}: member {m.filename!r} would escape {dest}")
                if m.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    out = open(target, "xb")
                except FileExistsError:
                    raise ValueError(f"{archive.name}: duplicate member {m.filename!r}") from None
                with zf.open(m) as src, out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{archive.name}: corrupt zip archive ({exc})") from exc


def _download_into_cache(info: MovieLensInfo, root: Path) -> Path:
    """Download, verify and extract ``info``'s archive; return the cached ratings file."""
    parent = root / "movielens"
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / info.folder
    staging = Path(tempfile.mkdtemp(prefix=f".{info.folder}-", suffix=".partial", dir=parent))
    try:
        archive = staging / info.archive
        _fetch(info.url, archive)
        expected = info.md5 if info.md5 is not None else _published_md5(info, staging)
        got = _md5_of(archive)
        if got != expected.lower():
            raise ValueError(
                f"checksum mismatch for {info.url}: expected MD5 {expected}, got {got}; "
                "the download was discarded"
            )
        extracted = staging / "extracted"
        extracted.mkdir()
        _safe_extract(archive, extracted)
        if not (extracted / info.folder / info.filename).is_file():
            raise ValueError(f"{info.archive} does not contain {info.folder}/{info.filename}")
        try:
            os.rename(extracted / info.folder, final)  # atomic on one file system
        except OSError as exc:
            if not (final / info.filename).is_file():  # not a concurrent download that won
                raise FileExistsError(
                    f"cannot create the cache entry {final}: {exc}; remove that folder and retry"
                ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final / info.filename


# --------------------------------------------------------------------------- public API helpers
def _check_flags(**flags) -> None:
    """Each flag must be a bool: a truthy string such as ``"no"`` must not silently mean
    "yes, use the network"."""
    for flag_name, flag in flags.items():
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{flag_name} must be True or False, got {flag!r}")


class _SideFiles:
    """Where the side files of a ratings file are: its folder, or its folder in a zip."""

    def __init__(self, folder: Path | None = None, archive: Path | None = None, prefix: str = ""):
        self.folder, self.archive, self.prefix = folder, archive, prefix

    def read(self, filename: str) -> tuple[bytes, str] | None:
        """The bytes of ``filename`` beside the ratings and its name for messages, or
        ``None`` when there is no such file."""
        if self.folder is not None:
            p = self.folder / filename
            return (p.read_bytes(), str(p)) if p.is_file() else None
        if self.archive is not None:
            member = self.prefix + filename
            with zipfile.ZipFile(self.archive) as zf:
                if member in set(zf.namelist()):
                    return zf.read(member), f"{self.archive}!{member}"
        return None


def _side_of(path: Path, source: str) -> _SideFiles:
    """The side files beside the ratings read from ``path`` (as given to the loader) and
    named ``source`` in messages (``<archive>!<member>`` for a zip archive)."""
    if path.is_file() and path.suffix.lower() == ".zip":
        member = source[len(str(path)) + 1 :]
        return _SideFiles(
            archive=path, prefix=member.rpartition("/")[0] + "/" if "/" in member else ""
        )
    return _SideFiles(folder=Path(source).parent)


def _read_given(p: Path, info: MovieLensInfo) -> tuple[bytes, str]:
    """The bytes of the ratings file at ``p`` (the file, a folder holding it, or the
    ``.zip`` archive) and the name to use in error messages."""
    if p.is_dir():
        found = _find_in_folder(p, info)
        if found is None:
            raise FileNotFoundError(
                f"no MovieLens {info.name} ratings file in {p}: looked for {info.filename} "
                f"and {info.folder}/{info.filename}"
            )
        p = found
    elif not p.is_file():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.suffix.lower() == ".zip":
        return _read_from_zip(p, info)
    return p.read_bytes(), str(p)


def _read_cached(info: MovieLensInfo, root: Path, download: bool) -> tuple[bytes, str]:
    """The bytes of the cached ratings file under ``root`` (downloaded first when missing
    and ``download``) and its path as a string."""
    found = root / "movielens" / info.folder / info.filename
    if not found.is_file():
        if not download:
            raise FileNotFoundError(
                f"MovieLens {info.name} is not in the cache {root / 'movielens' / info.folder}; "
                f"pass path=... or download=True (fetches {info.url})"
            )
        found = _download_into_cache(info, root)
    return found.read_bytes(), str(found)


# --------------------------------------------------------------------------- public API
def _locate(info: MovieLensInfo, path, cache_dir, download: bool) -> tuple[bytes, str, _SideFiles]:
    """The ratings bytes, their name for messages, and where their side files are."""
    if path is not None:
        p = Path(path).expanduser()
        data, source = _read_given(p, info)
        return data, source, _side_of(p, source)
    data, source = _read_cached(info, cache_root(cache_dir), download)
    return data, source, _SideFiles(folder=Path(source).parent)


def _locate_side(info: MovieLensInfo, path, cache_dir, download: bool) -> _SideFiles:
    """Where the side files are (the ratings file is found as by ``_locate``, not read)."""
    if path is None:
        found = cache_root(cache_dir) / "movielens" / info.folder / info.filename
        if not found.is_file():
            _read_cached(info, cache_root(cache_dir), download)  # the cache's error, or a download
        return _SideFiles(folder=found.parent)
    p = Path(path).expanduser()
    if p.is_dir():
        found = _find_in_folder(p, info)
        if found is None:
            _read_given(p, info)  # raises the loader's error
        p = found
    elif not p.is_file():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.suffix.lower() == ".zip":
        member = f"{info.folder}/{info.filename}"
        try:
            with zipfile.ZipFile(p) as zf:
                names = set(zf.namelist())
        except (zipfile.BadZipFile, zlib.error) as exc:
            raise ValueError(f"{p}: not a valid zip archive ({exc})") from exc
        if member not in names and info.filename not in names:
            raise ValueError(f"{p}: the archive has no member {member!r}")
        return _SideFiles(archive=p, prefix=f"{info.folder}/" if member in names else "")
    return _SideFiles(folder=p.parent)


@overload
def load_movielens(
    name: str,
    path: str | os.PathLike | None = ...,
    *,
    cache_dir: str | os.PathLike | None = ...,
    download: bool = ...,
    return_ids: Literal[False] = ...,
    side_info: bool = ...,
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
) -> tuple[RatingData, np.ndarray, np.ndarray]: ...


def load_movielens(
    name: str,
    path: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
    return_ids: bool = False,
    side_info: bool = True,
) -> RatingData | tuple[RatingData, np.ndarray, np.ndarray]:
    """Load a MovieLens ratings file as a :class:`~bmczoo.data.RatingData`.

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
    info = DATASETS[resolve_name(name)]
    _check_flags(download=download, return_ids=return_ids, side_info=side_info)
    data, source, side = _locate(info, path, cache_dir, download)
    ratings, user_ids, item_ids = _load_bytes(data, info, source)
    if side_info:
        users, items = _read_side_tables(info, side)
        if users is not None or items is not None:
            rf, cf = movielens_features(info.name, users, items, user_ids, item_ids)
            ratings = ratings.with_features(rf, cf)
    return (ratings, user_ids, item_ids) if return_ids else ratings


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
    side = _locate_side(info, path, cache_dir, download)
    users, items = _read_side_tables(info, side)
    for t in (users, items):
        if t is not None:
            t.pop("_source")
    return users, items
