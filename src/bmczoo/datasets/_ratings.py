"""The MovieLens ratings files (``u.data``, ``ratings.dat``, ``ratings.csv``) read into a
:class:`~bmczoo.data.RatingData` with the original ids of its rows and columns, by the
reader of any ratings file (:func:`~bmczoo.datasets.read_ratings`)."""

from __future__ import annotations

import numpy as np

from ..data import RatingData
from ._reader import read_ratings_bytes
from ._releases import MovieLensInfo


def _is_movielens_header(names: list[str]) -> bool:
    """Whether ``names`` say user, movie (or item), rating [, timestamp], in this order
    (``userId,movieId,rating,timestamp`` and the usual variants such as ``user_id``)."""
    keys = ["".join(ch for ch in n.lower() if ch.isalnum()) for n in names]
    return (
        len(keys) in (3, 4)
        and keys[0].startswith("user")
        and keys[1].startswith(("movie", "item"))
        and keys[2].startswith("rating")
        and (len(keys) == 3 or keys[3].startswith("time"))
    )


def load_bytes(
    data: bytes, info: MovieLensInfo, source: str
) -> tuple[RatingData, np.ndarray, np.ndarray]:
    """``(RatingData, user_ids, item_ids)`` of the bytes of a MovieLens ratings file.

    The separator and the header line are detected, whatever ``info``'s release says, so
    that a file of any release with or without its header is read; a header must name the
    MovieLens columns in their order (another order would be read wrongly).  Ids must be
    non-negative (MovieLens ids start at 1: a sign is a corrupt line).
    """

    def check_header(names: list[str], line: int) -> None:
        if not _is_movielens_header(names):
            raise ValueError(
                f"{source}, line {line}: unexpected header {','.join(names)!r}; a MovieLens "
                "ratings file has the columns userId,movieId,rating,timestamp in this order "
                "(the header line is optional); bmczoo.datasets.read_ratings(path, columns=...) "
                "reads other layouts"
            )

    return read_ratings_bytes(
        data,
        source,
        labels=("user", "movie"),
        nonnegative_ids=True,
        check_header=check_header,
    )
