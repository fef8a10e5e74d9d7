"""bmczoo._rng draws equal jax.random's bit for bit (they only compile faster)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bmczoo import _rng

EPS = np.finfo(np.float64).eps


@pytest.mark.parametrize("shape", [(), (5,), (4, 7, 3), (0, 3), (2, 1, 10)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_flat_draws_equal_jax_random(shape, dtype):
    key = jax.random.key(11)
    with jax.enable_x64(dtype == jnp.float64):
        np.testing.assert_array_equal(
            _rng.normal(key, shape, dtype), jax.random.normal(key, shape, dtype)
        )
        tiny = jnp.finfo(dtype).tiny
        np.testing.assert_array_equal(
            _rng.uniform(key, shape, dtype, minval=tiny, maxval=1.0),
            jax.random.uniform(key, shape, dtype, minval=tiny, maxval=1.0),
        )
        # under vmap over a batch of keys, as the samplers draw one array per chain
        keys = jax.random.split(key, 3)
        np.testing.assert_array_equal(
            jax.vmap(lambda k: _rng.normal(k, shape, dtype))(keys),
            jax.vmap(lambda k: jax.random.normal(k, shape, dtype))(keys),
        )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("compiled", [False, True])
def test_normals_together_equal_one_vmapped_call_per_request(dtype, compiled):
    """One threefry hash for several requests (chains' keys of different counts, sizes
    1, 0 and above 2^16) gives the values of ``jax.random.normal`` per request bit for bit."""
    keys = jax.random.split(jax.random.key(5), 4)
    requests = [
        (jax.random.split(keys[0], 3), 17),
        (jax.random.split(keys[1], 3), 1),
        (keys[2:3], 70_000),
        (jax.random.split(keys[3], 2), 0),
    ]

    def together():
        return _rng.normals_together(requests, dtype)

    def one_by_one():
        return [jax.vmap(lambda k, n=n: jax.random.normal(k, (n,), dtype))(k) for k, n in requests]

    with jax.enable_x64(dtype == jnp.float64):
        run = jax.jit if compiled else (lambda f: f)
        got, want = run(together)(), run(one_by_one)()
        for (k, n), x, y in zip(requests, got, want):
            assert x.shape == y.shape == (k.shape[0], n) and x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def test_normals_together_follow_another_generator_one_by_one():
    """With a generator whose first values depend on the number drawn (the original
    threefry), each request is drawn by ``jax.random.normal`` itself."""
    with jax.threefry_partitionable(False):
        keys = jax.random.split(jax.random.key(2), 3)
        (got,) = _rng.normals_together([(keys, 6)], jnp.float32)
        want = jax.vmap(lambda k: jax.random.normal(k, (6,)))(keys)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------- draw_together
def _sites(k, scale):
    """Gamma and normal sites of different sizes, one normal too large to be drawn together."""
    k1, k2, k3, k4, k5, k6 = jax.random.split(k, 6)
    a = _rng.gamma(k1, 0.5 * (7.0 - jnp.arange(3.0)), (3,), jnp.float64)
    n = _rng.normal(k4, (2, 3), jnp.float64)
    b = _rng.gamma(k2, jnp.asarray(2.5), (), jnp.float64) / scale
    c = _rng.gamma(k3, jnp.asarray(0.3), (2, 2), jnp.float64)
    z = _rng.normal(k5, (4,), jnp.float64)
    big = _rng.normal(k6, (_rng.TOGETHER_MAX + 1,), jnp.float64)
    return a, n, b, c, z, big


@pytest.mark.usefixtures("x64")
def test_draws_together_equal_one_call_per_site():
    """Made together (under vmap over chains, as the sweep does) the draws equal those of
    jax.random at each site: the normals bit for bit; the gamma variates bit for bit or up
    to their last bits (a shape parameter below one: its ``u^(1/a)`` is vectorised
    differently; and XLA's CPU code for the logarithms and exponentials of the rejection
    sampler may round the last bit differently for another batch shape, as jax 0.12 does op
    by op)."""
    keys = jax.random.split(jax.random.key(4), 5)
    scale = jnp.linspace(1.0, 2.0, 5)
    together = jax.vmap(_rng.draw_together(_sites))(keys, scale)
    plain = jax.vmap(_sites)(keys, scale)
    gammas = (0, 2, 3)  # a, b, c of _sites
    for k, (x, y) in enumerate(zip(together, plain)):
        if k in gammas:
            np.testing.assert_allclose(x, y, rtol=4 * EPS, atol=0)
        else:
            np.testing.assert_array_equal(x, y)
    compiled = jax.jit(jax.vmap(_rng.draw_together(_sites)))(keys, scale)
    for x, y in zip(compiled, plain):
        np.testing.assert_allclose(x, y, rtol=4 * EPS, atol=0)


@pytest.mark.usefixtures("x64")
def test_dependent_parameter_gives_nan_not_a_wrong_draw():
    """A shape parameter computed from the same function's earlier draw cannot be drawn
    ahead: the result is NaN (a non-finite draw the samplers report), never a silent error."""

    def dependent(k):
        k1, k2 = jax.random.split(k)
        g = _rng.gamma(k1, jnp.asarray(2.0), (), jnp.float64)
        return _rng.gamma(k2, 1.0 + g, (), jnp.float64)

    assert np.isnan(jax.jit(_rng.draw_together(dependent))(jax.random.key(0)))
    assert np.isfinite(jax.jit(dependent)(jax.random.key(0)))


SWEEP_MEMBERS = {
    "normal-wishart+noise+biases": dict(prior="normal-wishart", likelihood="learned", biases=True),
    "inverse-gamma+noise+biases": dict(prior="inverse-gamma", likelihood="learned", biases=True),
    "gamma+noise": dict(prior="gamma", likelihood="learned", biases=False),
    "normal-wishart+link": dict(prior="link", likelihood="learned", biases=False),
}


def _member_fit(member, tiny_ratings):
    import bmczoo as bmc
    from bmczoo.data import Features

    spec = SWEEP_MEMBERS[member]
    priors = {
        "normal-wishart": bmc.priors.NormalWishart(),
        "inverse-gamma": bmc.priors.InverseGamma(),
        "gamma": bmc.priors.Gamma(),
        "link": bmc.priors.NormalWishart(
            row_features=Features.from_dense(np.arange(18.0).reshape(6, 3) % 5), implicit="cols"
        ),
    }
    return bmc.fit(
        tiny_ratings,
        K=2,
        prior=priors[spec["prior"]],
        likelihood=bmc.likelihoods.LearnedNoise() if spec["likelihood"] else None,
        biases=spec["biases"],
        num_warmup=3,
        num_samples=4,
        num_chains=2,
        thinning=1,
        seed=3,
        progress_bar=False,
    )


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize(
    "member",
    # the default suite covers the Wishart, noise, bias and link draws; slow: the others
    [
        m
        if m in ("normal-wishart+noise+biases", "normal-wishart+link")
        else pytest.param(m, marks=pytest.mark.slow)
        for m in SWEEP_MEMBERS
    ],
)
def test_sweeps_with_draws_together_equal_one_call_per_site(member, tiny_ratings, monkeypatch):
    """The Gibbs sweep makes the small draws of its blocks after the factors together: the
    fit's draws are those of one jax.random call per site up to float64 rounding, for every
    member with such draws (a different draw of any variate changes them by O(1))."""
    batched = _member_fit(member, tiny_ratings)
    monkeypatch.setattr(_rng, "TOGETHER", False)
    plain = _member_fit(member, tiny_ratings)
    assert batched.samples.keys() == plain.samples.keys()
    for name in plain.samples:  # rounding only: a different draw differs by O(1)
        np.testing.assert_allclose(
            batched.samples[name], plain.samples[name], rtol=1e-9, atol=1e-12, err_msg=name
        )
