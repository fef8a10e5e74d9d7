"""Per-user leave-out splits (:meth:`bmczoo.RatingData.split_per_user`)."""

from __future__ import annotations

import numbers

import numpy as np


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
