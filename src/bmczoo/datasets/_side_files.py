"""The MovieLens side files (users and movies) beside a ratings file, read into raw tables."""

from __future__ import annotations

import csv
import io
import math
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._releases import MovieLensInfo

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
            f"{source}, line {lineno}: expected {n} fields separated by {sep!r}, found "
            f"{len(parts)} (file corrupt or truncated?): {line[:80]!r}"
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
                        f"{source}, line {lineno}: expected 3 fields separated by '::': "
                        f"{line[:80]!r}"
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
                        f"{source}, line {lineno}: expected 3 comma-separated fields, found "
                        f"{len(rec)}"
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


def _genre_names(side: SideFiles) -> tuple[str, ...]:
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


def read_side_tables(info: MovieLensInfo, side: SideFiles) -> tuple[dict | None, dict | None]:
    """The raw users and movies tables of ``info``'s side files found in ``side`` (None: no
    such file), each with its ``"_source"`` for messages."""
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


class SideFiles:
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
