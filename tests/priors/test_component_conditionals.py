"""Monte Carlo checks of the learned-noise and bias-variance Gibbs conditionals against their
closed forms (float64, fixed keys).

* ``LearnedNoise.sample_tau(key, sse, n)`` ~ ``Gamma(a + t n/2, rate b + t SSE/2)``
  (``t`` the temper), for t = 1 and t = 0.3;
* ``Biases.sample_variance(key, sumsq, m)`` ~ ``InvGamma(a + m/2, b + sumsq/2)``.

One call draws ``N_DRAWS`` values for each of several ``(SSE or sumsq)`` in a batch (the
samplers work elementwise).  Mean and variance of each column are compared with the exact
ones; the MCSEs come from the exact moments (``Var(mean) = sigma^2 / n``,
``Var(s^2) ~ (mu_4 - sigma^4) / n`` with the exact fourth central moment), so the test has
no tuned tolerance: every ``|z|`` must be below the two-sided Bonferroni threshold at
familywise level 1% over the statistics of the test.  The inverse-gamma shapes are > 4 so
that the fourth moment is finite.  Power: the same draws reject the shape ``a + t n``
(the factor 1/2 forgotten) and an untempered conditional.
"""

from __future__ import annotations

from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc

pytestmark = pytest.mark.usefixtures("x64")

N_DRAWS = 200_000
FAMILYWISE_ALPHA = 0.01


def _z_crit(n_stats):
    return NormalDist().inv_cdf(1.0 - FAMILYWISE_ALPHA / (2 * n_stats))


def _z_mean_var(x, mean, var, mu4):
    """z-scores of the sample mean and the sample variance of the columns of ``x``."""
    n = x.shape[0]
    s2 = x.var(0, ddof=1)
    return (x.mean(0) - mean) / np.sqrt(var / n), (s2 - var) / np.sqrt((mu4 - var**2) / n)


def _batch(values):
    return jnp.broadcast_to(jnp.asarray(values, jnp.float64), (N_DRAWS, len(values)))


def _gamma_moments(shape, rate):
    """Mean, variance and fourth central moment of Gamma(shape, rate)."""
    return shape / rate, shape / rate**2, 3 * shape * (shape + 2) / rate**4


def _invgamma_moments(alpha, beta):
    """Mean, variance and fourth central moment of InvGamma(alpha, beta) (alpha > 4), from
    the raw moments ``E[X^k] = beta^k / prod_{i=1..k} (alpha - i)``."""
    raw = [beta**k / np.prod([alpha - i for i in range(1, k + 1)]) for k in range(5)]
    m = raw[1]
    var = raw[2] - m**2
    mu4 = raw[4] - 4 * m * raw[3] + 6 * m**2 * raw[2] - 3 * m**4
    return m, var, mu4


@pytest.mark.parametrize("temper", [1.0, 0.3])
def test_sample_tau_is_the_gamma_conditional(temper):
    lik = bmc.likelihoods.LearnedNoise(a=1.5, b=0.7, temper=temper)
    n = 40
    sse = np.array([0.0, 3.0, 37.5, 400.0])
    key = jax.random.key(31)
    tau = lik.sample_tau(key, _batch(sse), n)
    assert tau.shape == (N_DRAWS, sse.size) and tau.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(lik.sample_tau(key, _batch(sse), n)), np.asarray(tau))
    tau = np.asarray(tau)
    assert np.all(tau > 0) and np.all(np.isfinite(tau))
    shape, rate = lik.a + 0.5 * temper * n, lik.b + 0.5 * temper * sse
    z_m, z_v = _z_mean_var(tau, *_gamma_moments(shape, rate))
    z = np.concatenate([z_m, z_v])
    zc = _z_crit(z.size)
    assert np.max(np.abs(z)) < zc, (
        f"temper={temper}: z(mean) {np.round(z_m, 2)}, z(var) {np.round(z_v, 2)}"
    )
    # power: shape a + t n (no 1/2), and the untempered conditional when t < 1
    wrong = [(lik.a + temper * n, rate)]
    if temper < 1:
        wrong.append((lik.a + 0.5 * n, lik.b + 0.5 * sse))
    for sh, rt in wrong:
        z_m, _ = _z_mean_var(tau, *_gamma_moments(sh, rt))
        assert np.max(np.abs(z_m)) > 2 * zc


@pytest.mark.parametrize("a, b, m", [(1.0, 1.0, 20), (0.5, 2.0, 943), (3.0, 0.01, 9)])
def test_sample_variance_is_the_inverse_gamma_conditional(a, b, m):
    biases = bmc.offsets.Biases(a=a, b=b)
    sumsq = np.array([0.0, 0.8, 12.0, 2500.0])
    key = jax.random.key(32)
    s2 = biases.sample_variance(key, _batch(sumsq), m)
    assert s2.shape == (N_DRAWS, sumsq.size) and s2.dtype == jnp.float64
    np.testing.assert_array_equal(
        np.asarray(biases.sample_variance(key, _batch(sumsq), m)), np.asarray(s2)
    )
    s2 = np.asarray(s2)
    assert np.all(s2 > 0) and np.all(np.isfinite(s2))
    alpha, beta = a + 0.5 * m, b + 0.5 * sumsq
    assert alpha > 4
    z_m, z_v = _z_mean_var(s2, *_invgamma_moments(alpha, beta))
    z = np.concatenate([z_m, z_v])
    zc = _z_crit(z.size)
    assert np.max(np.abs(z)) < zc, (
        f"a={a} b={b} m={m}: z(mean) {np.round(z_m, 2)}, z(var) {np.round(z_v, 2)}"
    )
    z_m, _ = _z_mean_var(s2, *_invgamma_moments(a + m, beta))  # power: shape a + m
    assert np.max(np.abs(z_m)) > 2 * zc
