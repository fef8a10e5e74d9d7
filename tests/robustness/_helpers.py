"""Shared helpers of the robustness tests: small problems and finiteness checks."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

import bmczoo as bmc

FAST = dict(progress_bar=False)


@functools.lru_cache(maxsize=None)
def paper_problem(m: int, seed: int = 1):
    """The paper's simulation design at size ``m`` (20% observed, rank 2, N(0, 1) noise)."""
    return bmc.datasets.simulate_paper(m, seed=seed)


def all_entries(shape) -> tuple[np.ndarray, np.ndarray]:
    m1, m2 = shape
    return np.divmod(np.arange(m1 * m2), m2)


def fit_checked(train, K, prior, method, dtype=jnp.float32, **kw):
    """``bmc.fit`` predicting every entry; asserts that nothing it returns is NaN or inf.

    Gibbs: the posterior mean at all ``m1 * m2`` entries (accumulated during sampling),
    every gamma draw (> 0).  VB: ``m_i . n_j`` at all entries, every ELBO, ``E[1/gamma]``
    (> 0) and the variances of ``q(M_i)``, ``q(N_j)`` (> 0).
    """
    rows, cols = all_entries(train.shape)
    if method == "gibbs":
        kw = {"num_warmup": 10, "num_samples": 10, "thinning": 2, **kw}
        fit = bmc.fit(
            train, K, prior, "gibbs", predict=(rows, cols), dtype=dtype, track=0, **FAST, **kw
        )
        gamma = fit.samples["gamma"]
        assert gamma.dtype == jnp.dtype(dtype)
        assert np.all(np.isfinite(gamma)) and np.all(gamma > 0), (
            f"gamma draws {gamma.min()}..{gamma.max()}"
        )
    else:
        kw = {"max_iter": 25, **kw}
        fit = bmc.fit(train, K, prior, "vb", dtype=dtype, **FAST, **kw)
        assert fit.m.dtype == jnp.dtype(dtype)
        assert np.all(np.isfinite(fit.elbo)), fit.elbo
        w = fit.q_gamma["inv_mean"]
        assert np.all(np.isfinite(w)) and np.all(w > 0), w
        for name in ("V_diag", "W_diag"):
            v = getattr(fit, name)
            assert np.all(np.isfinite(v)) and np.all(v > 0), name
    pred = fit.predict(rows, cols)
    assert pred.shape == (rows.size,)
    bad = ~np.isfinite(pred)
    assert not bad.any(), (
        f"{int(bad.sum())} non-finite predictions, first at entry {int(np.flatnonzero(bad)[0])}"
    )
    return fit


def fit_finite_or_clear_error(train, K, prior, method, **kw):
    """The float32 fit either returns finite results or raises ``FloatingPointError``
    pointing to float64 (never a silent NaN); in the second case the float64 fit must
    succeed.  Returns ``(fit, float32_failed)``."""
    try:
        return fit_checked(train, K, prior, method, jnp.float32, **kw), False
    except FloatingPointError as err:
        assert "float64" in str(err), str(err)
    return fit_checked(train, K, prior, method, jnp.float64, **kw), True
