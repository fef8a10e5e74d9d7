"""The eigendecomposition behind a feature link's coordinates, computed in whichever of two
equivalent ways is cheaper, and the size guard that runs before either.

``X`` (m x F) has the thin singular value decomposition ``X = U_r S^{1/2} V_r^T`` (``r``
its rank, ``S = diag(s_r)``), so ``X^T X = V_r S V_r^T`` and ``X X^T = U_r S U_r^T`` have
the same nonzero eigenvalues, and

* ``X V_r = U_r S^{1/2}``,
* ``V_r^T X^T 1 = S^{1/2} U_r^T 1``,
* ``V_r = X^T U_r S^{-1/2}``.

The sweep only reads the range coordinates (``d`` on the range, ``X V_r``, ``u``); the
``F - r`` null-space coordinates of ``B`` enter its conditionals only through the sums
``Bt_null^T Bt_null`` and ``tr(Bt_null Lambda Bt_null^T)``, which do not depend on the
null space's basis.  So the feature-side decomposition (F x F, :func:`feature_eigen`) and
the row-side one (m x m, :func:`gram_eigen`) give the same sweep up to the signs of the
eigenvectors; the row side never forms an F x F or F x r dense array.
"""

from __future__ import annotations

import os

import numpy as np

#: The row-side (m x m) decomposition is used when ``m < F`` and ``F`` exceeds this: up to
#: it the F x F decomposition is cheap, and the fits that use it (ML-100K's implicit
#: feedback, F = 1,682 items and the side information beside it) keep their draws.
GRAM_MIN_FEATURES = 4096

#: The size guard's budget is this fraction of the machine's physical memory ...
MEMORY_FRACTION = 0.5
#: ... for this many n x n float64 arrays (the matrix, its eigenvectors, LAPACK's
#: divide-and-conquer workspace of about two more).
EIGEN_COPIES = 4

_GRAM_BLOCK_ENTRIES = 1 << 24  # entries of a block of rows of X X^T built at once


def use_gram(m: int, F: int) -> bool:
    """Whether a table of ``m`` rows and ``F`` features is decomposed on its rows (``X
    X^T``, m x m) rather than its features (``X^T X``, F x F): ``m < F`` and ``F >``
    :data:`GRAM_MIN_FEATURES`."""
    return m < F and F > GRAM_MIN_FEATURES


_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def physical_memory() -> int:
    """The machine's physical memory in bytes, or a container's memory limit (cgroup) when
    smaller (16 GiB where the system says neither)."""
    try:
        total = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        total = 16 << 30
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) or a huge number (v1): no limit
            total = min(total, int(text))
    return total


def check_size(m: int, F: int, gram: bool, side: str, memory: int | None = None) -> None:
    """Raise a ValueError when the decomposition of a table of ``m`` rows and ``F``
    features (on its rows when ``gram``) needs more than :data:`MEMORY_FRACTION` of
    ``memory`` (the machine's physical memory by default): :data:`EIGEN_COPIES` float64
    arrays of ``n x n``, ``n = m`` or ``F``.  Only the shape is read: nothing is allocated."""
    n = m if gram else F
    need = EIGEN_COPIES * 8 * n * n
    budget = MEMORY_FRACTION * (physical_memory() if memory is None else memory)
    if need > budget:
        raise ValueError(
            f"NormalWishart: the feature link of the {side} ({m} rows, {F} features) needs the "
            f"eigendecomposition of a {n} x {n} matrix, about {need / 2**30:.1f} GiB "
            f"({EIGEN_COPIES} float64 copies), more than {budget / 2**30:.1f} GiB "
            f"({MEMORY_FRACTION:g} of this machine's memory): use fewer features (e.g. "
            f"implicit='rows' or 'cols' for one side only, or fewer feature columns)"
        )


def null_count(eigenvalues: np.ndarray, F: int) -> int:
    """The number of eigenvalues (ascending, clipped at zero) at or below ``F eps max``:
    the null space of ``X`` in ``R^F`` (the same rule whichever matrix they come from)."""
    return int(np.sum(eigenvalues <= F * np.finfo(np.float64).eps * eigenvalues.max(initial=0.0)))


def feature_eigen(X):
    """``(V, d, u, null)``: the eigenvectors ``V`` (F, F) and eigenvalues ``d`` (F,,
    ascending, the first ``null`` set to zero) of ``X^T X`` and ``u = V^T X^T 1`` (zero on
    the null space), in float64."""
    F = X.n_features
    d, V = np.linalg.eigh(X.gram())
    d = np.maximum(d, 0.0)
    null = null_count(d, F)
    d[:null] = 0.0
    u = V.T @ X.tdot(np.ones(X.n_rows))
    u[:null] = 0.0
    return V, d, u, null


def row_gram(X) -> np.ndarray:
    """``X X^T`` (m, m), dense float64, from sparse products by blocks of rows (bounded
    in memory beside the result)."""
    Xs = X.to_scipy().astype(np.float64)
    Xt = Xs.T.tocsc()
    m = X.n_rows
    out = np.empty((m, m), np.float64)
    step = max(1, _GRAM_BLOCK_ENTRIES // max(m, 1))
    for lo in range(0, m, step):
        hi = min(lo + step, m)
        out[lo:hi] = (Xs[lo:hi] @ Xt).toarray()
    return out


def gram_eigen(X):
    """``(d, u, XV)`` of the row-side decomposition ``X X^T = U diag(s) U^T`` (float64):
    ``d`` (F,) zero in its first ``F - r`` places and the ``r`` nonzero ``s`` (ascending)
    after them, ``u`` (F,) zero then ``sqrt(s_r) U_r^T 1``, and ``XV = U_r diag(sqrt(s_r))``
    (m, r): the arrays of :func:`feature_eigen` on the range, with ``V_r = X^T U_r
    diag(s_r^{-1/2})`` never formed."""
    m, F = X.shape
    s, U = np.linalg.eigh(row_gram(X))
    s = np.maximum(s, 0.0)
    null = null_count(s, F)
    r = m - null
    root = np.sqrt(s[null:])
    d = np.zeros(F)
    d[F - r :] = s[null:]
    u = np.zeros(F)
    u[F - r :] = root * U[:, null:].sum(0)
    return d, u, U[:, null:] * root
