"""Seconds to prepare a feature link's arrays (:func:`bmczoo.priors.macau.link_arrays`) for
implicit-feedback tables of MovieLens' shapes, through the decomposition on the features
(``X^T X``, F x F) and the one on the rows (``X X^T``, m x m).

    nice -n 10 python benchmarks/bench_link_arrays.py
    nice -n 10 python benchmarks/bench_link_arrays.py --cases ml-1m

The tables are the items' implicit feedback (each item's raters, ``|R(j)|^-1/2``
scaled: :func:`bmczoo.data.implicit_features` with ``axis="cols"``) of synthetic pairs
with skewed user activity and item popularity (log-normal weights, pairs drawn without
repeats):

* ``ml-1m``: m = 3,706 items, F = 6,040 users, 1,000,000 pairs (ML-1M's shape), both
  decompositions;
* ``ml-10m``: m = 10,677 items, F = 69,878 users, 2,000,000 pairs (ML-10M's shape with a
  fifth of its ratings), the row decomposition only: the feature one would hold an
  F x F float64 matrix of 39 GB, which the size guard refuses.

The table gives the seconds of one call in float32 (the eigendecomposition dominates; its
LAPACK runs on the BLAS threads numpy has), the rank ``r`` found and the largest array
kept besides ``X`` (``V`` (F, F) for the feature decomposition, ``XV`` (m, r) for the row
one).
"""

from __future__ import annotations

import argparse
import os
import time

CASES = {
    "ml-1m": (6040, 3706, 1_000_000, (False, True)),
    "ml-10m": (69878, 10677, 2_000_000, (True,)),
}


def skewed_pairs(n_users: int, n_items: int, n_pairs: int, seed: int = 0):
    """``n_pairs`` distinct (user, item) pairs, users and items drawn with log-normal
    weights (a few heavy users and popular items, as in MovieLens)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    wu = rng.lognormal(0.0, 1.2, n_users)
    wi = rng.lognormal(0.0, 1.5, n_items)
    wu, wi = wu / wu.sum(), wi / wi.sum()
    keys = np.empty(0, np.int64)
    while keys.size < n_pairs:
        need = int(1.3 * (n_pairs - keys.size)) + 1000
        u = rng.choice(n_users, need, p=wu)
        i = rng.choice(n_items, need, p=wi)
        keys = np.unique(np.concatenate([keys, u.astype(np.int64) * n_items + i]))
    keys = rng.permutation(keys)[:n_pairs]
    return keys // n_items, keys % n_items


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", choices=tuple(CASES), default=list(CASES))
    a = p.parse_args(argv)

    import jax.numpy as jnp
    import numpy as np

    import bmczoo as bmc
    from bmczoo.priors import macau

    print(f"load average {os.getloadavg()}, {os.cpu_count()} CPUs")
    print("| case | m | F | nnz | decomposition | seconds | rank r | largest kept array |")
    print("|---|---|---|---|---|---|---|---|")
    for case in a.cases:
        n_users, n_items, n_pairs, paths = CASES[case]
        users, items = skewed_pairs(n_users, n_items, n_pairs)
        data = bmc.RatingData(users, items, np.zeros(users.size), (n_users, n_items))
        X = bmc.data.implicit_features(data, "cols")
        m, F = X.shape
        for gram in paths:
            t0 = time.perf_counter()
            link = macau.link_arrays(X, jnp.float32, side="cols", gram=gram)
            link["d"].block_until_ready()
            sec = time.perf_counter() - t0
            kept = "V" if "V" in link else "XV"
            shape = " x ".join(f"{n:,}" for n in link[kept].shape)
            r = (link["Vr"] if "Vr" in link else link["XV"]).shape[1]
            name = "rows (X X^T)" if gram else "features (X^T X)"
            print(
                f"| {case} | {m:,} | {F:,} | {X.nnz:,} | {name} | {sec:.1f} | {r:,} "
                f"| {kept} {shape} |",
                flush=True,
            )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
