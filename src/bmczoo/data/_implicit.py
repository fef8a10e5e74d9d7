"""SVD++-style implicit feedback features: which columns each row rated
(:func:`implicit_features`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .features import Features
from .ratings import RatingData

__all__ = ["implicit_features"]


def implicit_features(
    data: RatingData,
    axis: Literal["rows", "cols"] = "rows",
    *,
    extra: RatingData | Sequence[RatingData] | None = None,
) -> Features:
    """SVD++-style implicit feedback: which columns each row rated, ``|R(i)|^-1/2`` scaled.

    For ``axis="rows"`` row ``i`` of the result is ``|R(i)|^-1/2 1_{R(i)}`` over the
    ``m2`` columns, ``R(i)`` the set of columns rated by row ``i``; ``axis="cols"`` gives
    the ``m2 x m1`` transpose construction (for column ``j``, the rows that rated it).
    Only which pairs are observed matters, not the values.  A row without ratings is a
    zero row.

    Parameters
    ----------
    data : RatingData
        The pairs (usually the training set).
    axis : {"rows", "cols"}
        Which side the features describe.
    extra : RatingData or sequence of RatingData, optional
        Further known pairs of the same shape (e.g. the test set's pairs, in settings
        where which entries will be asked about is known in advance); a pair present in
        several sources counts once.

    Returns
    -------
    Features
        ``m1 x m2`` (``axis="rows"``; features named ``"implicit=<j>"``) or ``m2 x m1``
        (``axis="cols"``), group ``"implicit"``.
    """
    if axis not in ("rows", "cols"):
        raise ValueError(f"axis must be 'rows' or 'cols', got {axis!r}")
    sources = [data] + (
        [] if extra is None else ([extra] if not isinstance(extra, (list, tuple)) else list(extra))
    )
    shape = tuple(data.shape)
    for k, s in enumerate(sources):
        if not hasattr(s, "rows") or not hasattr(s, "shape"):
            raise ValueError(f"implicit_features takes RatingData, got {type(s).__name__}")
        if tuple(s.shape) != shape:
            raise ValueError(f"extra[{k - 1}] has shape {s.shape}, data has {shape}")
    major = np.concatenate(
        [np.asarray(s.rows if axis == "rows" else s.cols, dtype=np.int64) for s in sources]
    )
    minor = np.concatenate(
        [np.asarray(s.cols if axis == "rows" else s.rows, dtype=np.int64) for s in sources]
    )
    m_major, m_minor = (shape[0], shape[1]) if axis == "rows" else (shape[1], shape[0])
    key = np.unique(major * m_minor + minor)  # sorted: grouped by major, minor ascending
    major, minor = np.divmod(key, m_minor)
    counts = np.bincount(major, minlength=m_major)
    indptr = np.zeros(m_major + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    values = 1.0 / np.sqrt(counts[major].astype(np.float64))
    names = [f"implicit={j}" for j in range(m_minor)]
    return Features(indptr, minor, values, names, ["implicit"] * m_minor)
