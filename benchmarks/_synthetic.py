"""Synthetic rating data of MovieLens sizes, with skewed (realistic) degrees.

Vectorised: rows and columns are drawn from lognormal / Zipf-like popularity weights in a
few batched rounds, duplicate ``(row, col)`` pairs are dropped with ``np.unique`` and the
rounds repeat (a handful of times, never a Python loop over ratings) until there are
enough distinct pairs; then exactly ``n`` of them are kept at random.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SIZES", "synthetic_ratings", "load_ml100k", "parse_sizes"]

# name -> (m1, m2, n): the MovieLens 100K, 1M and 10M shapes
SIZES: dict[str, tuple[int, int, int]] = {
    "100k": (943, 1682, 100_000),
    "1m": (6040, 3706, 1_000_209),
    "10m": (69_878, 10_677, 10_000_054),
}


def parse_sizes(text: str) -> list[str]:
    out = []
    for s in text.split(","):
        s = s.strip().lower()
        if not s:
            continue
        if s not in SIZES:
            raise SystemExit(f"unknown size {s!r}; choose from {', '.join(SIZES)}")
        out.append(s)
    return out


def _popularity(rng: np.random.Generator, m: int, n: int, other: int, kind: str) -> np.ndarray:
    """Probabilities of the ``m`` rows (or columns): heavy-tailed, each capped so that its
    expected number of ratings is at most half of the ``other`` dimension."""
    if kind == "lognormal":  # users: lognormal activity
        w = rng.lognormal(mean=0.0, sigma=1.0, size=m)
    else:  # items: Zipf-like popularity, exponent ~1, randomly assigned to item ids
        w = 1.0 / (np.arange(1, m + 1) + 5.0) ** 1.0
        w = w[rng.permutation(m)]
    p = w / w.sum()
    cap = 0.5 * other / n
    for _ in range(20):  # water-filling: clip, renormalise the rest
        over = p > cap
        if not over.any():
            break
        excess = p[over].sum() - cap * over.sum()
        p[over] = cap
        p[~over] += excess * p[~over] / p[~over].sum()
    return p / p.sum()


def _draw(rng: np.random.Generator, p: np.ndarray, size: int, shuffle: bool) -> np.ndarray:
    """``size`` iid draws from ``p``: multinomial counts expanded with ``np.repeat`` (sorted),
    optionally shuffled (cheaper than ``searchsorted`` on random uniforms)."""
    out = np.repeat(np.arange(p.size, dtype=np.int64), rng.multinomial(size, p))
    if shuffle:
        rng.shuffle(out)
    return out


def _dedupe_sorted(keys: np.ndarray) -> np.ndarray:
    keys.sort()
    keep = np.empty(keys.size, bool)
    keep[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def synthetic_ratings(m1: int, m2: int, n: int, seed: int = 0, rank: int = 5):
    """``(rows, cols, values)`` of ``n`` distinct entries of an ``m1 x m2`` matrix.

    Rows (users) have lognormal activity, columns (items) Zipf-like popularity; the values
    are 1..5 stars from a rank-``rank`` signal plus noise (int32 indices, float32 values).
    """
    if n > m1 * m2 // 2:
        raise ValueError("too dense for rejection sampling")
    rng = np.random.default_rng(seed)
    p_r = _popularity(rng, m1, n, m2, "lognormal")
    p_c = _popularity(rng, m2, n, m1, "zipf")
    keys = np.zeros(0, np.int64)
    for _ in range(100):  # rounds of batched draws (typically 1-3)
        need = n - keys.size
        if need <= 0:
            break
        size = int(need * 1.3) + 1000
        new = _draw(rng, p_r, size, False) * m2
        new += _draw(rng, p_c, size, True)  # independent of the rows: shuffled
        keys = _dedupe_sorted(np.concatenate([keys, new]))
        del new
    else:  # pragma: no cover
        raise RuntimeError("could not draw enough distinct pairs")
    if keys.size > n:  # drop the excess at random
        keep = np.ones(keys.size, bool)
        keep[rng.choice(keys.size, size=keys.size - n, replace=False)] = False
        keys = keys[keep]
        del keep
    rows = (keys // m2).astype(np.int32)
    cols = (keys - rows.astype(np.int64) * m2).astype(np.int32)
    del keys
    U = rng.normal(size=(m1, rank)).astype(np.float32) / np.sqrt(rank)
    V = rng.normal(size=(m2, rank)).astype(np.float32) / np.sqrt(rank)
    vals = np.empty(n, np.float32)
    for a in range(0, n, 1 << 20):  # chunks of ratings: bounded memory
        b = min(n, a + (1 << 20))
        sig = np.einsum("nk,nk->n", U[rows[a:b]], V[cols[a:b]])
        sig += 3.5 + 0.9 * rng.standard_normal(b - a, dtype=np.float32)
        vals[a:b] = np.clip(np.rint(sig), 1, 5)
    # shuffle the (row-sorted) entries like a ratings file
    perm = rng.permutation(n).astype(np.int64)
    return rows[perm], cols[perm], vals[perm]


def load_ml100k(path: str):
    """``(rows, cols, values, shape)`` of a MovieLens ``u.data`` file, ids re-indexed to 0..m-1."""
    raw = np.loadtxt(path, dtype=np.int64, usecols=(0, 1, 2), delimiter="\t")
    users, rows = np.unique(raw[:, 0], return_inverse=True)
    items, cols = np.unique(raw[:, 1], return_inverse=True)
    return (
        rows.astype(np.int32),
        cols.astype(np.int32),
        raw[:, 2].astype(np.float32),
        (users.size, items.size),
    )
