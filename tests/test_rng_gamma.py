"""bmczoo._rng.standard_gamma: Marsaglia and Tsang's gamma variates with one hash per round.

Its law is checked against scipy's gamma distribution (a Kolmogorov-Smirnov test at level
1e-4 on 20,000 draws, and the mean's z-score against the exact variance), with a power
check that the same test rejects a shape 5% off; its structure (the prefix property that
``draw_together`` relies on, vmapped keys, invalid shapes, the fallback for other key
generators) exactly; and the sweep's ``gamma_sampler`` option that selects it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bmczoo as bmc
from bmczoo import _rng

N = 20_000
LEVEL = 1e-4  # KS p-value below which the law is rejected (fixed seeds: deterministic)
Z_MAX = 4.5  # the mean's z-score bound (two-sided 7e-6 under the right law)


def _draw(a: float, dtype, seed: int = 0, n: int = N) -> np.ndarray:
    with jax.enable_x64(dtype == jnp.float64):
        g = jax.jit(lambda k: _rng.standard_gamma(k, jnp.full((n,), a, dtype)))(
            jax.random.key(seed)
        )
        assert g.dtype == dtype
        return np.asarray(g, np.float64)


def _law_ok(g: np.ndarray, a: float) -> tuple[float, float]:
    """The KS p-value against Gamma(a, 1) and the z-score of the mean."""
    p = stats.kstest(g, stats.gamma(a).cdf).pvalue
    z = (g.mean() - a) / np.sqrt(a / g.size)
    return p, z


@pytest.mark.parametrize(
    "a, dtype",
    [
        # float32 below a ~ 0.1 puts a visible mass at 0 (values below the smallest normal
        # float), as jax.random.gamma does: small shapes are checked in float64
        (0.02, jnp.float64),
        (0.3, jnp.float64),
        (0.3, jnp.float32),
        (1.0, jnp.float32),
        (3.5, jnp.float32),
        (3.5, jnp.float64),
        (250.0, jnp.float32),
        (5e4, jnp.float32),
        (5e4, jnp.float64),
    ],
)
def test_standard_gamma_law(a, dtype):
    g = _draw(a, dtype, seed=int(a * 100) % 97)
    assert np.isfinite(g).all() and (g >= 0).all()
    p, z = _law_ok(g, a)
    assert p > LEVEL, f"KS p-value {p:.2e} for shape {a}"
    assert abs(z) < Z_MAX, f"mean z-score {z:.2f} for shape {a}"


@pytest.mark.parametrize("a", [0.3, 3.5, 250.0])
def test_standard_gamma_law_test_has_power(a):
    """The checks above reject the law of a shape 5% off (a sampler that got a shape
    parameter slightly wrong, e.g. the boost of small shapes, would fail)."""
    g = _draw(a * 1.05, jnp.float64, seed=1)
    p, z = _law_ok(g, a)
    assert p < LEVEL or abs(z) > Z_MAX


def test_large_shapes_are_always_drawn():
    """Shapes in the thousands (a learned noise precision's a + n/2, Wishart degrees of
    freedom) in float32: every value drawn, none left NaN after the rounds (the
    acceptance test's terms of size ``d`` do not cancel into rounding noise)."""
    g = _draw(5e3, jnp.float32, seed=1, n=200_000)
    assert np.isfinite(g).all()


def test_prefix_property():
    """Value i depends on the key, i and its shape only: the first k of n values are the
    k values of a call with k (what draw_together's padded requests rely on)."""
    key = jax.random.key(3)
    a = jnp.asarray(np.random.default_rng(0).uniform(0.05, 20.0, 300), jnp.float32)
    full = _rng.standard_gamma(key, a)
    for k in (1, 7, 100):
        np.testing.assert_array_equal(_rng.standard_gamma(key, a[:k]), full[:k])
    # and under vmap over keys, each row is its key's own call
    keys = jax.random.split(key, 3)
    A = jnp.stack([a[:50], a[50:100] * 2, a[100:150] + 1])
    rows = jax.jit(jax.vmap(_rng.standard_gamma))(keys, A)
    for k, x, row in zip(keys, A, rows):
        np.testing.assert_allclose(_rng.standard_gamma(k, x), row, rtol=1e-6)


@pytest.mark.usefixtures("x64")
def test_rows_drawn_as_one_problem_equal_one_call_per_row():
    """``draw_together``'s gamma draws with the one-hash sampler: its requests, drawn as one
    flat problem (no vmap), are each row's own call bit for bit, also where the rows need
    different numbers of rounds (tiny and huge shapes, invalid values, padding)."""
    keys = jax.random.split(jax.random.key(8), 4)
    a = np.random.default_rng(1).uniform(0.05, 30.0, (4, 40))
    a[1, :5] = [1e-3, 5e4, np.nan, -1.0, 0.0]
    a[3] = 1.0  # the padding's shape parameter
    A = jnp.asarray(a)
    rows = jax.jit(_rng._standard_gamma_rows)(jax.random.key_data(keys), A)
    one = jax.jit(_rng.standard_gamma)
    for k, x, row in zip(keys, A, rows):
        np.testing.assert_array_equal(one(k, x), row)

    # and through draw_together, requests of different sizes
    def sites(k):
        k1, k2, k3 = jax.random.split(k, 3)
        return (
            _rng.gamma(k1, A[0, :7], (7,), jnp.float64),
            _rng.gamma(k2, A[1, :3], (3,), jnp.float64),
            _rng.gamma(k3, jnp.asarray(2.5), (), jnp.float64),
        )

    with _rng.using_gamma_sampler("one-hash"):
        together = jax.jit(_rng.draw_together(sites))(keys[0])
        plain = jax.jit(sites)(keys[0])
    for x, y in zip(together, plain):
        np.testing.assert_array_equal(x, y)


def test_shapes_and_invalid_values():
    key = jax.random.key(4)
    assert _rng.standard_gamma(key, jnp.zeros((0, 3))).shape == (0, 3)
    g = _rng.standard_gamma(key, jnp.full((2, 3), 2.0))
    assert g.shape == (2, 3) and np.isfinite(np.asarray(g)).all()
    bad = jnp.asarray([jnp.nan, -1.0, 0.0, jnp.inf, 2.0])
    g = np.asarray(_rng.standard_gamma(key, bad))
    assert np.isnan(g[:4]).all() and np.isfinite(g[4])
    # through the public wrapper with a broadcast shape parameter
    g = _rng.gamma(key, 2.5, (4, 2), jnp.float32)
    assert g.shape == (4, 2) and g.dtype == jnp.float32


def test_other_generators_draw_with_jax_random_gamma():
    """Keys whose first values depend on the number drawn (threefry without the
    partitionable mode, rbg) are drawn by jax.random.gamma itself."""
    a = jnp.asarray([0.5, 2.0, 30.0])
    with jax.threefry_partitionable(False):
        key = jax.random.key(2)
        np.testing.assert_array_equal(
            _rng.standard_gamma(key, a), jax.random.gamma(key, a, a.shape)
        )
    key = jax.random.key(2, impl="rbg")
    np.testing.assert_array_equal(_rng.standard_gamma(key, a), jax.random.gamma(key, a, a.shape))


# ---------------------------------------------------------------------- the sweep's option
def _tiny(**kw):
    rng = np.random.default_rng(0)
    r, c = np.nonzero(rng.random((30, 20)) < 0.4)
    data = bmc.RatingData(r, c, rng.normal(size=len(r)), shape=(30, 20))
    return bmc.fit(
        data,
        K=2,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
        num_warmup=3,
        num_samples=6,
        thinning=1,
        num_chains=2,
        seed=0,
        progress_bar=False,
        **kw,
    )


def test_the_sweep_draws_with_the_chosen_sampler():
    """``gamma_sampler="one-hash"`` (the default) draws the gamma variates (noise
    precision, bias variances, Wishart) from :func:`standard_gamma`; ``"jax"`` from
    ``jax.random.gamma``: other draws, the same ones when run again."""
    default, one, jax_, again = (
        _tiny(),
        _tiny(gamma_sampler="one-hash"),
        _tiny(gamma_sampler="jax"),
        _tiny(gamma_sampler="jax"),
    )
    for site in ("tau", "Lambda_M", "row_bias_var"):
        np.testing.assert_array_equal(default.samples[site], one.samples[site])
        np.testing.assert_array_equal(jax_.samples[site], again.samples[site])
        assert not np.allclose(one.samples[site], jax_.samples[site])
        assert np.isfinite(one.samples[site]).all() and np.isfinite(jax_.samples[site]).all()


def test_a_checkpoint_names_the_sampler(tmp_path):
    """A run checkpointed with one sampler is not resumed with the other."""
    path = tmp_path / "c.npz"
    _tiny(gamma_sampler="jax", checkpoint=path)
    with pytest.raises(ValueError, match="gamma_sampler"):
        _tiny(checkpoint=path)
