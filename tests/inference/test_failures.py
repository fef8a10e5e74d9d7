"""A failed Cholesky factorisation (or an overflow) never yields a silent NaN result: the
error names the sweep, the block and the row, and suggests float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference import gibbs


def test_first_failing_row_is_named():
    """A negative likelihood precision makes every row with ratings non-positive-definite:
    the first such row of M is reported, rows without ratings are fine."""
    rows = np.array([2, 2, 3, 5])
    cols = np.array([0, 1, 1, 2])
    data = bmc.RatingData(rows, cols, np.ones(4), (6, 3))
    problem = gibbs.build_problem(data, -50.0)
    prior = bmc.priors.Fixed()
    state = gibbs.init(jax.random.key(0)[None], problem, prior, 2)
    gibbs.check_failure(state)  # nothing yet
    state = jax.jit(gibbs.step, static_argnums=2)(state, problem, prior)
    assert np.asarray(state.stats.failure).tolist() == [[1, 0, 2]]
    with pytest.raises(
        FloatingPointError,
        match=r"sweep 1, chain 0: non-finite draw of row 2 of M .*float32; "
        r"rerun with dtype=jnp.float64",
    ):
        gibbs.check_failure(state)
    # the first failure is kept: later sweeps do not overwrite it
    state = jax.jit(gibbs.step, static_argnums=2)(state, problem, prior)
    assert np.asarray(state.stats.failure).tolist() == [[1, 0, 2]]


@pytest.mark.parametrize("driver", ["numpyro", "checkpoint"])
def test_gibbs_fit_raises_instead_of_returning_nan(tmp_path, driver):
    sim = bmc.datasets.simulate_paper(30, seed=0)
    huge = sim.train.with_values(sim.train.values * 1e25)  # overflows float32 in the first sweep
    kw = dict(
        K=3,
        prior=bmc.priors.InverseGamma(),
        num_warmup=2,
        num_samples=4,
        thinning=1,
        progress_bar=False,
        center=False,
    )
    if driver == "checkpoint":
        kw["checkpoint"] = tmp_path / "c.npz"
    with pytest.raises(
        FloatingPointError, match=r"row \d+ of [MN] .*in float32; rerun with dtype=jnp.float64"
    ):
        bmc.fit(huge, **kw)


def test_vb_fit_names_the_row():
    sim = bmc.datasets.simulate_paper(30, seed=0)
    huge = sim.train.with_values(sim.train.values * 1e25)
    with pytest.raises(
        FloatingPointError, match=r"iteration 1 \(first at row \d+ of [MN].*float32; try dtype"
    ):
        bmc.fit(
            huge,
            K=3,
            prior=bmc.priors.InverseGamma(),
            method="vb",
            max_iter=5,
            progress_bar=False,
            center=False,
        )


def test_float64_mode_succeeds_where_float32_fails():
    """Values of order 1e18, fitted uncentred: float32 overflows (and says so), the float64
    run of the same VB fit is finite."""
    sim = bmc.datasets.simulate_paper(30, seed=0)
    big = sim.train.with_values(sim.train.values * 1e18)
    kw = dict(
        K=2,
        prior=bmc.priors.Fixed(gamma=1e36),
        method="vb",
        max_iter=20,
        progress_bar=False,
        center=False,
    )
    with pytest.raises(FloatingPointError, match="try dtype=jnp.float64"):
        bmc.fit(big, **kw)
    f64 = bmc.fit(big, dtype=jnp.float64, **kw)
    assert f64.meta["dtype"] == "float64"
    assert np.all(np.isfinite(f64.predict(big.rows, big.cols))) and np.all(np.isfinite(f64.elbo))
