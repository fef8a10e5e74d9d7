"""Splits of :class:`~bmczoo.data.RatingData` beyond the uniform one: per-user leave-out
(:meth:`~bmczoo.data.RatingData.split_per_user`) and the official MovieLens 100K folds
(:meth:`~bmczoo.data.RatingData.official_split`)."""

from __future__ import annotations

import hashlib
import numbers

import numpy as np

#: Names of the official MovieLens 100K folds made by ``mku.sh`` (see
#: :meth:`RatingData.official_split`).
OFFICIAL_FOLDS = ("u1", "u2", "u3", "u4", "u5", "ua", "ub")

# ML-100K's u.data: 100,000 lines, 943 users, 1682 movies; mku.sh's blocks of 20,000
# lines and allbut.pl's held-out rating numbers per user (1-10 for ua, 11-20 for ub) with
# at most 100,000 test lines.
_ML100K_N, _ML100K_SHAPE, _ML100K_BLOCK, _ML100K_MAXTEST = 100_000, (943, 1682), 20_000, 100_000
_ALLBUT = {"ua": (1, 10), "ub": (11, 20)}
# SHA-256 of the 0-based (user, movie) pairs of u.data in file order, as little-endian
# int32 rows then cols: the folds are defined by line positions, so official_split checks
# it is given that order (tests/data/test_official_split.py recomputes it from the file).
_ML100K_PAIRS_SHA256 = "bf16594b7287cfaf17641920286d2a666a384577651f6b32574008651f9316d3"


def per_user_test_mask(rows: np.ndarray, m1: int, test_fraction, test_count, seed) -> np.ndarray:
    """Boolean mask of the held-out positions: of each row's ``n_u`` pairs, ``round(
    test_fraction * n_u)`` (or ``test_count``), at most ``n_u - 1``, chosen uniformly with
    ``numpy.random.default_rng(seed)``."""
    if test_count is not None:
        if isinstance(test_count, (bool, np.bool_)) or not isinstance(
            test_count, (numbers.Integral, np.integer)
        ):
            raise TypeError(f"test_count must be a positive integer, got {test_count!r}")
        if test_count < 1:
            raise ValueError(f"test_count must be a positive integer, got {test_count!r}")
    elif (
        isinstance(test_fraction, (str, bytes, bool, np.bool_))
        or not isinstance(test_fraction, (numbers.Real, np.number))
        or not (0.0 < float(test_fraction) < 1.0)
    ):
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    n_u = np.bincount(rows, minlength=m1)
    if test_count is not None:
        want = np.full(m1, int(test_count))
    else:  # numpy's round: halves to even, as RatingData.split's count
        want = np.round(float(test_fraction) * n_u).astype(np.int64)
    want = np.minimum(want, np.maximum(n_u - 1, 0))  # every user keeps a training pair
    key = np.random.default_rng(seed).random(rows.size)
    order = np.lexsort((key, rows))  # each row's positions in a random order
    start = np.concatenate([[0], np.cumsum(n_u)])[rows[order]]
    rank = np.arange(rows.size) - start
    mask = np.zeros(rows.size, bool)
    mask[order] = rank < want[rows[order]]
    return mask


def official_test_mask(rows, cols, shape, fold, check_order) -> np.ndarray:
    """The test positions of the official fold ``fold`` of the ML-100K ratings
    ``(rows, cols)`` in ``u.data``'s order (:meth:`RatingData.official_split`)."""
    key = fold.strip().lower() if isinstance(fold, str) else fold
    if key not in OFFICIAL_FOLDS:
        raise ValueError(
            f"unknown MovieLens 100K fold {fold!r}; the official folds are {', '.join(OFFICIAL_FOLDS)}"
        )
    if not isinstance(check_order, (bool, np.bool_)):
        raise ValueError(f"check_order must be True or False, got {check_order!r}")
    if rows.size != _ML100K_N or shape != _ML100K_SHAPE:
        raise ValueError(
            f"official_split needs the MovieLens 100K ratings ({_ML100K_N} ratings of a "
            f"{_ML100K_SHAPE[0]} x {_ML100K_SHAPE[1]} matrix, as load_movielens('100k') returns them); "
            f"got {rows.size} ratings of a {shape[0]} x {shape[1]} matrix"
        )
    if check_order and _pairs_sha256(rows, cols) != _ML100K_PAIRS_SHA256:
        raise ValueError(
            "official_split: these are not the MovieLens 100K (user, movie) pairs in u.data's line "
            "order (the folds are defined by line positions); load the data with "
            "bmczoo.datasets.load_movielens('100k', ...) and split before any reordering, or pass "
            "check_order=False to apply mku.sh's rules to these entries as they are"
        )
    return _official_test_mask(rows, key, _ML100K_BLOCK, _ML100K_MAXTEST)


def _pairs_sha256(rows: np.ndarray, cols: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(rows, dtype="<i4").tobytes())
    h.update(np.ascontiguousarray(cols, dtype="<i4").tobytes())
    return h.hexdigest()


def _official_test_mask(rows: np.ndarray, fold: str, block: int, maxtest: int) -> np.ndarray:
    """Test-set mask of an official fold over the lines of a ``u.data``-like file.

    ``"u1"``..``"u5"`` (mku.sh): lines ``block*(k-1)`` .. ``block*k - 1`` (0-based) are
    the test set.  ``"ua"``/``"ub"`` (allbut.pl): a line is a test line when its user's
    running count of lines (1-based, in file order) is within the fold's range and fewer
    than ``maxtest`` test lines came before it.
    """
    n = rows.shape[0]
    test = np.zeros(n, dtype=bool)
    if fold in _ALLBUT:
        start, stop = _ALLBUT[fold]
        order = np.argsort(rows, kind="stable")  # each user's lines, in file order
        sorted_rows = rows[order]
        first = np.r_[0, np.flatnonzero(sorted_rows[1:] != sorted_rows[:-1]) + 1]
        count = np.empty(n, dtype=np.int64)
        count[order] = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n])) + 1
        test = (count >= start) & (count <= stop)
        if maxtest > 0:  # allbut.pl: maxtest <= 0 means no limit
            test &= np.cumsum(test) <= maxtest
        return test
    k = int(fold[1:])
    test[block * (k - 1) : block * k] = True
    return test
