"""Consecutive fits in one process must not accumulate device memory or compiled programs.

After a fit's result is deleted and ``gc.collect()`` ran (no ``jax.clear_caches()``), the
total bytes of ``jax.live_arrays()`` must not grow from one fit to the next.  The
comparison starts after the first fit, so that per-process state created once (if any)
is not counted; any growth after that is a leak (a Gibbs fit through NumPyro's ``MCMC``
used to leave its problem's device arrays and final state alive in NumPyro's and JAX's
process-wide caches, about 37 arrays per fit).
"""

from __future__ import annotations

import gc

import jax
import numpy as np
import pytest

import bmczoo as bmc

NUM_FITS = 5


@pytest.fixture(scope="module")
def split():
    # a 300 x 200 rank-3 matrix, 12,000 ratings: each leaked fit would be ~0.3 MB
    rng = np.random.default_rng(7)
    m1, m2, n = 300, 200, 12_000
    rows, cols = np.divmod(rng.choice(m1 * m2, size=n, replace=False), m2)
    U, V = rng.normal(size=(m1, 3)), rng.normal(size=(m2, 3))
    vals = np.sum(U[rows] * V[cols], axis=1) + 0.5 * rng.normal(size=n)
    return bmc.RatingData(rows, cols, vals, (m1, m2)).split(0.1, seed=0)


def _live_bytes() -> int:
    gc.collect()
    return sum(a.nbytes for a in jax.live_arrays())


def _fit(method: str, train, test, seed: int):
    prior = bmc.priors.Discrete()
    if method == "vb":
        return bmc.fit(
            train,
            K=2,
            prior=prior,
            method="vb",
            max_iter=3,
            seed=seed,
            progress_bar=False,
            test=test,
        )
    return bmc.fit(
        train,
        K=2,
        prior=prior,
        method="gibbs",
        num_warmup=1,
        num_samples=2,
        thinning=1,
        seed=seed,
        progress_bar=False,
        test=test,
    )


@pytest.mark.slow  # ~15 s of fits; a memory property, not a per-change check
@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_consecutive_fits_do_not_grow_live_arrays(split, method):
    train, test = split
    after = []
    for i in range(NUM_FITS):
        result = _fit(method, train, test, seed=i)
        assert np.isfinite(result.rmse(test))
        del result
        after.append(_live_bytes())
    grown = [(i + 1, b - after[0]) for i, b in enumerate(after) if b > after[0]]
    assert not grown, (
        f"{method}: live JAX bytes after each of {NUM_FITS} fits (result deleted, gc.collect()): {after}; "
        f"fits (number, bytes above fit 1) that grew: {grown}"
    )


def _memory_maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.slow  # ~20 s of fits; a process-lifetime property
@pytest.mark.skipif(
    not __import__("os").path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps"
)
@pytest.mark.parametrize("method", ["gibbs", "vb"])
def test_consecutive_fits_do_not_keep_compiled_programs(split, method):
    """Each fit's compiled programs are released with it.  A compiled XLA CPU program holds
    memory mappings of its machine code; programs kept in process-wide caches (NumPyro's
    ``fori_collect`` and JAX's jit caches, when a fit ran through NumPyro's ``MCMC``) added
    hundreds of mappings per fit, and after some 70 fits in one process LLVM could not map
    more (the kernel's ``vm.max_map_count``, 65,530 by default): ``LLVM ERROR: Unable to
    allocate section memory``, an abort.  Fits after the first two (which create what a
    process creates once) must not add mappings: the bound is a tenth of what one kept
    fit adds."""
    train, test = split
    counts = []
    for i in range(NUM_FITS):
        result = _fit(method, train, test, seed=i)
        del result
        gc.collect()
        counts.append(_memory_maps())
    growth = counts[-1] - counts[1]
    assert growth < 90, f"{method}: memory mappings after each of {NUM_FITS} fits: {counts}"
