"""The MovieLens releases: their archives, files, formats and checksums."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

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
            f"unknown MovieLens dataset {name!r}; known: {', '.join(DATASETS)} (also as 'ml-100k' "
            "etc.)"
        )
    return key
