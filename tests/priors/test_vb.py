"""Each prior's mean-field VB update ``vb_update(ES, d)`` against quadrature.

The optimal factor is ``q(g) = prior(g) g^(-d/2) exp(-ES/(2g)) / Z``.  We check, in float64:

* ``inv_mean == E_q[1/g]``,
* ``log_normalizer == log Z`` (with the prior normalised),
* ``params`` describe ``q`` (its log density matches the quadrature density pointwise).

Tolerances: the reference is a uniform-grid (trapezoid) quadrature on ``log g`` with 2e5
points over a region outside which the integrands are below e^-60 of their peak; for
these smooth, unimodal integrands its relative error is far below 1e-10 (checked against
closed forms in ``test_conditionals.py::test_quadrature_helper_*``).  Float64 rounding of
log densities of size up to ~1e5 (d = 12000) contributes ~1e-11 absolute.  So
``rtol=1e-6`` on ``E[1/g]`` and ``atol=1e-6`` (plus ``rtol=1e-9``) on ``log Z`` leave a
wide margin while catching any formula error (an error of one unit in a shape parameter
shifts ``E[1/g]`` by at least 1/(a + d/2) ~ 1.7e-4 relative at d = 12000).
This is deterministic: no Monte Carlo.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from bmczoo.priors import Discrete, Fixed, Gamma, InverseGamma, VBGamma

from ._quadrature import LogScalePosterior

RTOL_INV_MEAN = 1e-6
ATOL_LOGZ, RTOL_LOGZ = 1e-6, 1e-9


def _vb(prior, ES_values, d):
    ES = jnp.asarray(ES_values, jnp.float64)
    out = prior.vb_update(ES, d)
    assert isinstance(out, VBGamma)
    assert out.inv_mean.shape == ES.shape and out.log_normalizer.shape == ES.shape
    assert out.inv_mean.dtype == jnp.float64 and out.log_normalizer.dtype == jnp.float64
    return out


ES_CASES = [
    # (d, ES values)  tiny / moderate / large, MovieLens-sized d
    (10, (1e-10, 0.3, 50.0, 1e4)),
    (2625, (1e-10, 1.0, 2000.0, 1e6)),
    (12000, (1e-8, 30.0, 5000.0, 2e6)),
]


# ----------------------------------------------------------------------------- inverse gamma
@pytest.mark.parametrize("a, b", [(1.0, 0.01), (0.5, 2.0), (3.0, 1e-4)])
@pytest.mark.parametrize("d, ES_values", ES_CASES)
def test_inverse_gamma_vb_matches_quadrature(x64, a, b, d, ES_values):
    out = _vb(InverseGamma(a=a, b=b), ES_values, d)
    log_prior = lambda g: st.invgamma.logpdf(g, a, scale=b)  # noqa: E731
    for j, ES in enumerate(ES_values):
        post = LogScalePosterior(log_prior, ES, d)
        np.testing.assert_allclose(out.inv_mean[j], post.raw_moment(-1), rtol=RTOL_INV_MEAN)
        np.testing.assert_allclose(
            out.log_normalizer[j], post.log_z, rtol=RTOL_LOGZ, atol=ATOL_LOGZ
        )
        shape, scale = float(out.params["shape"][j]), float(out.params["scale"][j])
        # q = InvGamma(a + d/2, b + ES/2) -- including the prior b (the paper's VB drops it)
        np.testing.assert_allclose(shape, a + d / 2, rtol=1e-14)
        np.testing.assert_allclose(scale, b + ES / 2, rtol=1e-14)
        g = post.quantile([0.01, 0.5, 0.99])
        np.testing.assert_allclose(
            st.invgamma.logpdf(g, shape, scale=scale), post.log_density(g), rtol=1e-8, atol=1e-7
        )


# ----------------------------------------------------------------------------- gamma
@pytest.mark.parametrize("beta", [100.0, 1.0, 0.05])
@pytest.mark.parametrize("d, ES_values", ES_CASES)
def test_gamma_vb_matches_quadrature(x64, beta, d, ES_values):
    out = _vb(Gamma(beta=beta), ES_values, d)
    log_prior = lambda g: st.gamma.logpdf(g, 0.5 * (d + 1), scale=2.0 / beta**2)  # noqa: E731
    for j, ES in enumerate(ES_values):
        post = LogScalePosterior(log_prior, ES, d)
        np.testing.assert_allclose(out.inv_mean[j], post.raw_moment(-1), rtol=RTOL_INV_MEAN)
        np.testing.assert_allclose(
            out.log_normalizer[j], post.log_z, rtol=RTOL_LOGZ, atol=ATOL_LOGZ
        )
        # q(1/g) = InverseGaussian(mean ig_mean, shape ig_shape); scipy: invgauss(mean/shape, scale=shape)
        mu, lam = float(out.params["ig_mean"][j]), float(out.params["ig_shape"][j])
        np.testing.assert_allclose(mu, beta / math.sqrt(ES), rtol=1e-14)
        np.testing.assert_allclose(lam, beta**2, rtol=1e-14)
        g = post.quantile([0.01, 0.5, 0.99])
        x = 1.0 / g  # precision; density of x is q_g(1/x) / x^2
        log_q_x = post.log_density(g) - 2.0 * np.log(x)
        np.testing.assert_allclose(
            st.invgauss.logpdf(x, mu / lam, scale=lam), log_q_x, rtol=1e-8, atol=1e-7
        )


# ----------------------------------------------------------------------------- discrete
def _two_atoms(ES, d, p, C, eps):
    """Exact log Z, E[1/g] and q(C) by summing the two atoms (log-sum-exp, float64)."""
    l1 = math.log(p) - 0.5 * d * math.log(C) - ES / (2 * C)
    l0 = math.log1p(-p) - 0.5 * d * math.log(eps) - ES / (2 * eps)
    log_z = float(np.logaddexp(l0, l1))
    q = math.exp(l1 - log_z)
    return log_z, q / C + (1 - q) / eps, q


@pytest.mark.parametrize("C, p, eps", [(1.0, 0.05, 0.05), (2.0, 0.5, 0.01), (1.0, 0.3, 0.2)])
@pytest.mark.parametrize("d, ES_values", ES_CASES)
def test_discrete_vb_matches_sum_over_atoms(x64, C, p, eps, d, ES_values):
    # add ES near the switch point, where q is neither 0 nor 1
    switch = 2.0 * (0.5 * d * math.log(C / eps) - math.log(p / (1 - p))) / (1 / eps - 1 / C)
    ES_values = tuple(ES_values) + (switch, 0.9 * switch, 1.1 * switch)
    out = _vb(Discrete(C=C, p=p, eps=eps), ES_values, d)
    for j, ES in enumerate(ES_values):
        log_z, inv_mean, q = _two_atoms(ES, d, p, C, eps)
        np.testing.assert_allclose(out.inv_mean[j], inv_mean, rtol=1e-12)
        np.testing.assert_allclose(out.log_normalizer[j], log_z, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(out.params["slab_prob"][j], q, rtol=1e-10, atol=1e-300)


# ----------------------------------------------------------------------------- fixed
@pytest.mark.parametrize("gamma0", [1.0, 0.01, 7.5])
@pytest.mark.parametrize("d, ES_values", ES_CASES)
def test_fixed_vb_is_point_mass(x64, gamma0, d, ES_values):
    out = _vb(Fixed(gamma=gamma0), ES_values, d)
    ES = np.asarray(ES_values)
    np.testing.assert_allclose(out.inv_mean, 1.0 / gamma0, rtol=1e-15)
    np.testing.assert_allclose(
        out.log_normalizer, -0.5 * d * math.log(gamma0) - ES / (2 * gamma0), rtol=1e-12, atol=1e-9
    )
    assert out.params == {}


# ----------------------------------------------------------------------------- all priors
ALL_PRIORS = [Fixed(), InverseGamma(), Gamma(), Discrete()]


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=lambda p: p.name)
def test_vb_batched_shape(x64, prior):
    ES = jnp.linspace(0.5, 80.0, 6).reshape(2, 3)
    out = prior.vb_update(ES, 40)
    assert out.inv_mean.shape == (2, 3) and out.log_normalizer.shape == (2, 3)
    for v in out.params.values():
        assert jnp.shape(v) == (2, 3)
    # elementwise: the batch gives the same numbers as one-at-a-time calls
    single = prior.vb_update(ES[1, 2:3], 40)
    np.testing.assert_allclose(out.inv_mean[1, 2], single.inv_mean[0], rtol=1e-14)
    np.testing.assert_allclose(out.log_normalizer[1, 2], single.log_normalizer[0], rtol=1e-14)


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=lambda p: p.name)
@pytest.mark.parametrize("d, ES", [(2625, 1e-6), (2625, 3e3), (12000, 1e-6), (12000, 5e5)])
def test_vb_float32_finite_at_large_d(prior, d, ES):
    """Default precision, MovieLens-sized d: everything finite (no overflow of the raw
    weights), inverse means positive, and close to the float64 value."""
    out = prior.vb_update(jnp.full((3,), ES, jnp.float32), d)
    assert out.inv_mean.dtype == jnp.float32
    inv, logz = np.asarray(out.inv_mean), np.asarray(out.log_normalizer)
    assert np.all(np.isfinite(inv)) and np.all(inv > 0)
    assert np.all(np.isfinite(logz))
