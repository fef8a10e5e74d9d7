"""Shared fixtures of the bmczoo test-suite.

Float64 is enabled per test through the ``x64`` fixture (a context manager around the
test), never globally, so that the default float32 behaviour stays what the other tests
see.  (JAX 0.10 removed ``jax.experimental.enable_x64``; ``jax.enable_x64(True)`` is the
same context manager under its current name.)
"""

from __future__ import annotations

import jax
import numpy as np
import pytest


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    Libraries keep jitted functions in process-wide caches (NumPyro's ``fori_collect``
    takes the sampler's loop body as a static argument: one program per run), so a long
    test process accumulates thousands of compiled programs; the slow suite once crashed
    inside XLA compilation after hours of that.  Clearing per module bounds it."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()


@pytest.fixture
def x64():
    """Run the test with ``jax_enable_x64`` on (restored afterwards)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def tiny_ratings():
    """A 6 x 5 matrix with 18 observed entries of a rank-2 signal plus noise (float64)."""
    import bmczoo as bmc

    rng = np.random.default_rng(12345)
    m1, m2 = 6, 5
    keys = rng.choice(m1 * m2, size=18, replace=False)
    rows, cols = np.divmod(keys, m2)
    U = rng.normal(size=(m1, 2))
    V = rng.normal(size=(m2, 2))
    vals = np.sum(U[rows] * V[cols], axis=1) + 0.3 * rng.normal(size=keys.size)
    return bmc.RatingData(rows, cols, vals, (m1, m2))
