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

import hashlib
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
from collections.abc import Mapping
from typing import Literal, overload

import numpy as np

from ..data import RatingData
from ._parse import parse_numeric_table

__all__ = ["DATASETS", "MovieLensInfo", "load_movielens", "cache_root", "resolve_name"]

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
    return MovieLensInfo(name, _BASE_URL + archive, folder, filename, sep, header, md5, n, shape, rr)


# MD5 sums: these are the values GroupLens publishes beside each archive
# (``https://files.grouplens.org/datasets/movielens/<archive>.md5``), as reproduced
# identically by many independent projects that pin them.  They could not be re-verified
# from this machine (no access to files.grouplens.org).  GroupLens publishes MD5 only, so
# no SHA-256 is claimed.  ``ml-latest-small.zip`` is regenerated in place by GroupLens,
# so no fixed value is pinned for it: the ``.md5`` companion file is fetched and used.
_TABLE = (
    _info("100k", "ml-100k.zip", "ml-100k", "u.data", "\t", False,
          "0e33842e24a9c977be4e0107933c0723", 100_000, (943, 1682), (1.0, 5.0)),
    _info("1m", "ml-1m.zip", "ml-1m", "ratings.dat", "::", False,
          "c4d9eecfca2ab87c1945afe126590906", 1_000_209, (6040, 3706), (1.0, 5.0)),
    _info("10m", "ml-10m.zip", "ml-10M100K", "ratings.dat", "::", False,
          "ce571fd55effeba0271552578f2648bd", 10_000_054, (69878, 10677)),
    _info("20m", "ml-20m.zip", "ml-20m", "ratings.csv", ",", True,
          "cd245b17a1ae2cc31bb14903e1204af3", 20_000_263),
    _info("25m", "ml-25m.zip", "ml-25m", "ratings.csv", ",", True,
          "6b51fb2759a8657d3bfcbfc42b592ada", 25_000_095),
    _info("32m", "ml-32m.zip", "ml-32m", "ratings.csv", ",", True,
          "d472be332d4daa821edc399621853b57", 32_000_204),
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
            key = key[len(prefix):]
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
            fields = tuple(f.strip().decode("utf-8", "replace").lower() for f in stripped.split(b","))
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


def _to_ratingdata(table: np.ndarray, source: str, first_line: int) -> tuple[RatingData, np.ndarray, np.ndarray]:
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


def _load_bytes(data: bytes, info: MovieLensInfo, source: str) -> tuple[RatingData, np.ndarray, np.ndarray]:
    table, first_line = _read_ratings(data, info, source)
    return _to_ratingdata(table, source, first_line)


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
            total=int(total) if total else None, unit="B", unit_scale=True,
            desc=dest.name, disable=None, leave=False,
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
                    raise ValueError(f"{archive.name}: refusing to extract member {m.filename!r} ({reason})")
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
@overload
def load_movielens(
    name: str, path: str | os.PathLike | None = ..., *, cache_dir: str | os.PathLike | None = ...,
    download: bool = ..., return_ids: Literal[False] = ...,
) -> RatingData: ...


@overload
def load_movielens(
    name: str, path: str | os.PathLike | None = ..., *, cache_dir: str | os.PathLike | None = ...,
    download: bool = ..., return_ids: Literal[True],
) -> tuple[RatingData, np.ndarray, np.ndarray]: ...


def load_movielens(
    name: str,
    path: str | os.PathLike | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    download: bool = True,
    return_ids: bool = False,
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

    Returns
    -------
    RatingData
        Users as rows, movies as columns, ``shape = (distinct users, distinct movies)``,
        float64 ratings in file order.  Row ``i`` is the ``i``-th smallest user id, column
        ``j`` the ``j``-th smallest movie id.
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
        archive.
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
    _check_flags(download=download, return_ids=return_ids)
    if path is not None:
        data, source = _read_given(Path(path).expanduser(), info)
    else:
        data, source = _read_cached(info, cache_root(cache_dir), download)
    ratings, user_ids, item_ids = _load_bytes(data, info, source)
    return (ratings, user_ids, item_ids) if return_ids else ratings
