"""Monte Carlo checks of each prior's Gibbs conditional ``sample_conditional(key, S, d)``.

The reference is the exact conditional of ``gamma_h`` given ``S_h``, with unnormalised
density ``prior(g) g^(-d/2) exp(-S/(2g))``, computed here by quadrature in log space
(``_quadrature.LogScalePosterior``) -- never by the formulas the package uses.  Draws are
compared through their mean, variance and five CDF values, each within 5 Monte Carlo
standard errors (MCSE) computed from the exact moments (see ``assert_draws_match``).

All draws are float64 (``x64`` fixture) with fixed keys, so the tests are deterministic;
at 5 MCSE a correct sampler fails with probability ~1e-6 per statistic for a new key.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from bmczoo.priors import Discrete, Fixed, Gamma, InverseGamma

from ._quadrature import LogScalePosterior, assert_draws_match

N_DRAWS = 200_000


def _draws(prior, S_values, d, seed, n=N_DRAWS):
    """``n`` draws for each S in ``S_values`` in ONE call (S has shape (n, len(S_values)):
    the sampler must work elementwise on a batch of different S).  Also checks, on a batch
    of 1000 rows (a property of the sampler, not of the batch size, at a fraction of the
    cost of the float64 draws): same key, same draws; another key, other draws (unless the
    conditional is a point mass)."""
    S = jnp.broadcast_to(jnp.asarray(S_values, jnp.float64), (n, len(S_values)))
    g = prior.sample_conditional(jax.random.key(seed), S, d)
    assert g.shape == S.shape
    assert g.dtype == jnp.float64
    g = np.asarray(g)
    small = S[:1000]
    first = np.asarray(prior.sample_conditional(jax.random.key(seed), small, d))
    np.testing.assert_array_equal(
        np.asarray(prior.sample_conditional(jax.random.key(seed), small, d)), first
    )
    if np.unique(g).size > 1:
        assert not np.array_equal(
            np.asarray(prior.sample_conditional(jax.random.key(seed + 1000), small, d)), first
        )
    return g


# ----------------------------------------------------------------------------- helper
def test_quadrature_helper_matches_inverse_gamma_closed_form():
    """The quadrature reproduces InvGamma(a + d/2, b + S/2) (known in closed form) to ~1e-9,
    including d = 12000 where raw weights overflow, so MC discrepancies are the sampler's."""
    for a, b, S, d in [(1.0, 0.01, 3.0, 20), (0.5, 2.0, 1e-10, 2625), (3.0, 1e-4, 5e4, 12000)]:
        post = LogScalePosterior(lambda g: st.invgamma.logpdf(g, a, scale=b), S, d)
        ref = st.invgamma(a + d / 2, scale=b + S / 2)
        np.testing.assert_allclose(post.mean, ref.mean(), rtol=1e-9)
        np.testing.assert_allclose(post.var, ref.var(), rtol=1e-8)
        for p in (0.01, 0.5, 0.99):
            np.testing.assert_allclose(post.cdf(ref.ppf(p)), p, atol=1e-8)
        log_z = (
            a * math.log(b)
            - math.lgamma(a)
            + math.lgamma(a + d / 2)
            - (a + d / 2) * math.log(b + S / 2)
        )
        np.testing.assert_allclose(post.log_z, log_z, rtol=1e-10, atol=1e-8)


def test_quadrature_helper_matches_scipy_gig():
    """Cross-check on a GIG: prior Gamma(shape 1.7, rate 0.8) gives GIG(1.7 - d/2, 1.6, S),
    which scipy parametrises as geninvgauss(p, sqrt(a b), scale=sqrt(b/a))."""
    shape, rate, S, d = 1.7, 0.8, 2.5, 3
    post = LogScalePosterior(lambda g: st.gamma.logpdf(g, shape, scale=1 / rate), S, d)
    p, a, b = shape - d / 2, 2 * rate, S
    ref = st.geninvgauss(p, math.sqrt(a * b), scale=math.sqrt(b / a))
    np.testing.assert_allclose(post.mean, ref.mean(), rtol=1e-8)
    np.testing.assert_allclose(post.var, ref.var(), rtol=1e-7)
    np.testing.assert_allclose(post.cdf(ref.ppf(0.3)), 0.3, atol=1e-8)


# ----------------------------------------------------------------------------- fixed
def test_fixed_returns_gamma_exactly(x64):
    prior = Fixed(gamma=0.37)
    S = jnp.array([[0.0, 1e-12, 3.0], [1e6, 2.0, 5.0]], jnp.float64)
    g = prior.sample_conditional(jax.random.key(0), S, 12000)
    assert g.shape == S.shape and g.dtype == S.dtype
    assert np.all(np.asarray(g) == 0.37)


def test_fixed_float32():
    g = Fixed(gamma=2.0).sample_conditional(jax.random.key(0), jnp.ones((4, 3), jnp.float32), 10)
    assert g.dtype == jnp.float32 and np.all(np.asarray(g) == 2.0)


# ----------------------------------------------------------------------------- inverse gamma
IG_CASES = [
    # (a, b, d, S values: tiny, moderate, large)
    (1.0, 0.01, 20, (1e-10, 1.0, 1e4)),
    (0.5, 2.0, 2625, (1e-10, 30.0, 1e6)),  # MovieLens-100K size d = 943 + 1682
    (3.0, 1e-4, 12000, (1e-10, 200.0, 5e5)),  # d ~ 10^4 (MovieLens-10M scale)
]


@pytest.mark.parametrize("a, b, d, S_values", IG_CASES)
def test_inverse_gamma_conditional_matches_quadrature(x64, a, b, d, S_values):
    prior = InverseGamma(a=a, b=b)
    draws = _draws(prior, S_values, d, seed=11)
    for j, S in enumerate(S_values):
        post = LogScalePosterior(lambda g: st.invgamma.logpdf(g, a, scale=b), S, d)
        assert_draws_match(draws[:, j], post, label=f"InverseGamma(a={a}, b={b}) S={S} d={d}")


# ----------------------------------------------------------------------------- gamma
GAMMA_CASES = [
    # (beta, d, S values); shape (d + 1)/2 and rate beta^2/2 as in the paper
    (100.0, 11, (1e-8, 0.5, 1e5)),
    (1.0, 2625, (1e-8, 0.01, 3.0, 1e4)),
    (0.05, 12000, (1e-8, 1.0, 1e6)),
    (22.0, 12000, (1e-8, 1e-4, 40.0)),
]


def _gamma_log_prior(beta, d):
    return lambda g: st.gamma.logpdf(g, 0.5 * (d + 1), scale=2.0 / beta**2)


@pytest.mark.parametrize("beta, d, S_values", GAMMA_CASES)
def test_gamma_conditional_matches_quadrature(x64, beta, d, S_values):
    """The conditional of gamma_h is GIG(1/2, beta^2, S), i.e. the inverse Gaussian is on
    the PRECISION 1/gamma_h (the paper's table puts it on gamma_h: erratum).  The reference
    here is the quadrature of the gamma prior times the likelihood, not any of those forms."""
    prior = Gamma(beta=beta)
    draws = _draws(prior, S_values, d, seed=12)
    for j, S in enumerate(S_values):
        post = LogScalePosterior(_gamma_log_prior(beta, d), S, d)
        assert_draws_match(draws[:, j], post, label=f"Gamma(beta={beta}) S={S} d={d}")


def test_gamma_conditional_is_not_inverse_gaussian_on_gamma(x64):
    """Sanity check of the test's power: the paper's reading (gamma_h ~ IG(beta/sqrt(S),
    beta^2)) is far from the quadrature reference, so the test above can tell them apart."""
    beta, S, d = 1.0, 3.0, 2625
    post = LogScalePosterior(_gamma_log_prior(beta, d), S, d)
    wrong = st.invgauss(mu=(beta / math.sqrt(S)) / beta**2, scale=beta**2)
    se = math.sqrt(post.var / N_DRAWS)
    assert abs(wrong.mean() - post.mean) > 50 * se


@pytest.mark.parametrize("beta, S, d", [(100.0, 0.5, 11), (1.0, 3.0, 2625), (0.05, 1e-4, 12000)])
def test_column_scale_precision_is_inverse_gaussian(beta, S, d):
    """The corrected conditional of docs/algorithms.md ("Column scales"), checked against
    quadrature (not the paper's table):
    with shape (d+1)/2, 1/gamma_h ~ InverseGaussian(mean beta/sqrt(S), shape beta^2)."""
    post = LogScalePosterior(_gamma_log_prior(beta, d), S, d)
    mu, lam = beta / math.sqrt(S), beta**2
    g = post.quantile([0.001, 0.1, 0.5, 0.9, 0.999])
    x = 1.0 / g
    log_q_x = post.log_density(g) - 2.0 * np.log(x)  # change of variables g -> 1/g
    np.testing.assert_allclose(
        st.invgauss.logpdf(x, mu / lam, scale=lam), log_q_x, rtol=1e-8, atol=1e-7
    )


@pytest.mark.parametrize("beta, S", [(1.0, 1e-6), (22.0, 1e-8), (100.0, 1e-9)])
def test_gamma_conditional_float32_is_accurate(beta, S):
    """Default (float32) precision, tiny S (a shrunk column): every draw must be positive
    and finite and the draws must follow the exact conditional.

    With mu/lambda = 1/(beta sqrt(S)) >= 1e3, the textbook Michael-Schucany-Haas formula
    ``x = mu + mu^2 y/2 - mu/2 sqrt(4 mu y + mu^2 y^2)`` used by ``jax.random.wald``
    cancels catastrophically in float32 and returns negative precisions."""
    n, d = N_DRAWS, 2625
    g = Gamma(beta=beta).sample_conditional(jax.random.key(3), jnp.full((n,), S, jnp.float32), d)
    assert g.dtype == jnp.float32
    g = np.asarray(g, dtype=np.float64)
    n_bad = int(np.sum(~np.isfinite(g) | (g <= 0)))
    assert n_bad == 0, f"{n_bad} of {n} float32 draws are negative, zero or non-finite"
    post = LogScalePosterior(_gamma_log_prior(beta, d), S, d)
    # float32 rounding (relative 6e-8) is far below the MCSE; CDF checks only
    assert_draws_match(g, post, check_var=False, label=f"float32 Gamma(beta={beta}) S={S}")


# ----------------------------------------------------------------------------- discrete
def _exact_slab_prob(S, d, p, C, eps):
    """P(gamma = C | S) computed from the two log weights with a log-sum-exp (float64)."""
    l1 = math.log(p) - 0.5 * d * math.log(C) - S / (2 * C)
    l0 = math.log1p(-p) - 0.5 * d * math.log(eps) - S / (2 * eps)
    return math.exp(l1 - np.logaddexp(l0, l1))


def _S_at_logit(L, d, p, C, eps):
    """S at which the log-odds of the slab equal L (only used to place S where P is
    interesting; the reference probability itself comes from ``_exact_slab_prob``)."""
    return 2.0 * (L - math.log(p / (1 - p)) + 0.5 * d * math.log(C / eps)) / (1 / eps - 1 / C)


DISCRETE_CASES = [
    # (C, p, eps, d)
    (1.0, 0.05, 0.05, 11),
    (1.0, 0.05, 0.05, 2625),
    (2.0, 0.5, 0.01, 12000),
    (1.0, 0.3, 0.2, 12000),
]


@pytest.mark.parametrize("C, p, eps, d", DISCRETE_CASES)
def test_discrete_conditional_probability(x64, C, p, eps, d):
    prior = Discrete(C=C, p=p, eps=eps)
    S_values = [_S_at_logit(L, d, p, C, eps) for L in (-3.0, -0.5, 0.0, 1.0, 4.0)]
    S_values = [max(S, 1e-12) for S in S_values] + [1e-12]
    draws = _draws(prior, S_values, d, seed=13)
    assert np.all((draws == C) | (draws == eps)), "draws must be exactly C or eps"
    n = draws.shape[0]
    for j, S in enumerate(S_values):
        P = _exact_slab_prob(S, d, p, C, eps)
        freq = np.mean(draws[:, j] == C)
        se = math.sqrt(max(P * (1 - P), 1e-300) / n)
        if P * n < 1e-3:  # essentially never the slab
            assert freq == 0.0, f"S={S}: P(C)={P:.3g} but frequency {freq}"
        else:
            assert abs(freq - P) < 5 * se + 1e-12, (
                f"Discrete({C}, {p}, {eps}) d={d} S={S}: freq(C)={freq:.6f} vs exact {P:.6f} "
                f"({(freq - P) / se:+.2f} MCSE)"
            )


def test_discrete_large_d_where_naive_weights_overflow(x64):
    """d = 12000: the raw weights p C^(-d/2) e^(-S/2C) overflow / underflow in float64, yet the
    sampler must give the exact probability (and never NaN)."""
    C, p, eps, d = 1.0, 0.05, 0.05, 12000
    S = _S_at_logit(0.7, d, p, C, eps)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        w1 = p * C ** (-d / 2) * np.exp(-S / (2 * C))
        w0 = (1 - p) * np.float64(eps) ** (-d / 2) * np.exp(-S / (2 * eps))
        naive = w1 / (w1 + w0)
    assert not np.isfinite(naive) or not np.isfinite(w0), "the case must be in the overflow regime"
    P = _exact_slab_prob(S, d, p, C, eps)
    assert 0.6 < P < 0.7
    draws = _draws(Discrete(C=C, p=p, eps=eps), [S], d, seed=14)[:, 0]
    se = math.sqrt(P * (1 - P) / draws.size)
    assert abs(np.mean(draws == C) - P) < 5 * se


@pytest.mark.parametrize("S", [0.0, 1e-30, 1e9])
def test_discrete_extreme_S_deterministic(x64, S):
    """Far in the tails the conditional is (numerically) a point mass; no NaN at S = 0."""
    C, p, eps, d = 1.0, 0.05, 0.05, 12000
    draws = _draws(Discrete(C=C, p=p, eps=eps), [S], d, seed=15, n=10_000)[:, 0]
    expected = C if S > 1e3 else eps
    assert np.all(draws == expected)


def test_discrete_float32_large_d():
    """Float32 at d = 12000 (default precision): finite log-odds, exact binary values, and
    the right frequency (float32 rounding of S*(1/eps - 1/C) ~ 2e4 moves the logit by
    ~1e-3 at most, invisible at this sample size)."""
    C, p, eps, d = 1.0, 0.05, 0.05, 12000
    S = _S_at_logit(0.0, d, p, C, eps)
    n = N_DRAWS
    g = Discrete(C=C, p=p, eps=eps).sample_conditional(
        jax.random.key(5), jnp.full((n,), S, jnp.float32), d
    )
    assert g.dtype == jnp.float32
    g = np.asarray(g)
    assert np.all((g == np.float32(C)) | (g == np.float32(eps)))
    P = _exact_slab_prob(float(np.float32(S)), d, p, C, eps)
    assert abs(np.mean(g == np.float32(C)) - P) < 5 * math.sqrt(P * (1 - P) / n) + 2e-3


@pytest.mark.parametrize(
    "prior", [Fixed(), InverseGamma(), Gamma(), Discrete()], ids=lambda p: p.name
)
def test_conditional_is_jittable(prior):
    """Under ``jax.jit`` with ``d`` static (how the Gibbs sweep calls it), default float32."""
    f = jax.jit(prior.sample_conditional, static_argnums=2)
    g = f(jax.random.key(0), jnp.ones((5, 3), jnp.float32), 100)
    assert g.shape == (5, 3) and g.dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g) > 0)
