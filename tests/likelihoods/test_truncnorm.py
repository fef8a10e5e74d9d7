"""Tests of bmczoo.likelihoods.truncnorm (truncated standard normal utilities).

References are independent float64 computations: scipy.special (log_ndtr, erfcx, ndtr),
adaptive scipy.integrate.quad for the moments, and scipy.stats.truncnorm where it is
accurate (it loses ~1e-7 relative in the variance far in a tail, so it is used only in
the bulk).  float32 tolerances are multiples of float32 eps justified at each check.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import scipy.special as ss
import scipy.stats as st
from scipy.integrate import quad

from bmczoo.likelihoods import truncnorm as tn

INF = np.inf
EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
KS_LEVEL = 1e-3
N_KS = 4000


# ---------------------------------------------------------------- float64 references


def _ref_quad(a: float, b: float):
    """(log Z, E, Var, H) of N(0,1) on [a, b] by adaptive quadrature anchored at the
    point c of [a, b] nearest 0 (integrand exp(-(z^2 - c^2)/2) <= 1: no underflow)."""
    c = min(max(0.0, a), b)
    g = lambda t: np.exp(-0.5 * t * (t + 2 * c))  # noqa: E731
    # beyond |z| = sqrt(c^2 + 120) the integrand is < e^-60 (negligible, and it would
    # only make quad's job harder on a long flat-zero range)
    r = np.sqrt(c * c + 120.0)
    lo, hi = max(a, -r) - c, min(b, r) - c
    kw = dict(epsabs=0.0, epsrel=1e-12, limit=200, points=[0.0] if lo < 0 < hi else None)
    i0 = quad(g, lo, hi, **kw)[0]
    # absolute floor for integrals that may be ~0 (E[t] on an interval centred at 0)
    kw["epsabs"] = 1e-16 * i0
    m1 = quad(lambda t: t * g(t), lo, hi, **kw)[0] / i0
    var = quad(lambda t: (t - m1) ** 2 * g(t), lo, hi, **kw)[0] / i0
    msq = quad(lambda t: t * (t + 2 * c) * g(t), lo, hi, **kw)[0] / i0
    log_z = -0.5 * c * c - 0.5 * np.log(2 * np.pi) + np.log(i0)
    return log_z, c + m1, var, np.log(i0) + 0.5 * msq


def _ref_cdf(x, a: float, b: float):
    """CDF of N(0,1) truncated to [a, b], float64, from scipy's erfcx/ndtr.

    Lower-half intervals (b <= 0): F = (S(x) - S(a)) / (S(b) - S(a)) with
    S(t) = Phi(t) exp(b^2/2) = erfcx(-t/sqrt2)/2 * exp(-(t - b)(t + b)/2), which does
    not underflow even 40 sd out.  Upper-half intervals by symmetry; for straddling ones
    Phi(b) - Phi(a) is not a difference of tiny numbers, so ndtr is exact enough."""
    x = np.clip(np.asarray(x, np.float64), a, b)
    if a > 0:
        return 1.0 - _ref_cdf(-x, -b, -a)
    if b <= 0:
        s = lambda t: 0.5 * ss.erfcx(-t / np.sqrt(2)) * np.exp(-0.5 * (t - b) * (t + b))  # noqa: E731
        sa = 0.0 if a == -INF else s(a)
        return (s(x) - sa) / (s(b) - sa)
    return (ss.ndtr(x) - ss.ndtr(a)) / (ss.ndtr(b) - ss.ndtr(a))


def _ks_pvalue(z, mean, lo, hi):
    return st.kstest(
        np.asarray(z, np.float64) - mean, lambda x: _ref_cdf(x, lo - mean, hi - mean)
    ).pvalue


# ---------------------------------------------------------------------- log_ndtri


def test_log_ndtri_inverts_log_ndtr(dtype):
    # logp from -1e3 (exp underflows in both dtypes) up to -1e-30 (p rounds to 1).
    logp = -np.logspace(-30, 3, 3000).astype(dtype)
    x = np.asarray(tn.log_ndtri(logp), np.float64)
    assert x.dtype == np.float64 and np.isfinite(x).all()
    if dtype == np.float64:
        # Round trip through scipy's log_ndtr: relative error a few ulp of logp times the
        # conditioning of log_ndtr (<= x^2 ~ 2e3 at logp = -1e3); measured 5e-14.
        back = ss.log_ndtr(x)
        np.testing.assert_allclose(back, logp, rtol=1e-12, atol=0)
    else:
        # Compare with the float64 inverse at the same (float32) logp.  log_ndtr in float32
        # is good to a few ulp; Newton's fixed point moves by that error divided by the
        # slope phi/Phi, which is ~|x| in the lower tail (error ~ |x| * few eps / 2) and
        # ~1.6 near x = 0 (error ~ few eps absolute).  Hence rtol = 64 eps relative to
        # max(|x|, 1) (x itself crosses 0, where a pure relative error is meaningless).
        with jax.enable_x64(True):
            ref = np.asarray(tn.log_ndtri(logp.astype(np.float64)))
        err = np.abs(x - ref) / np.maximum(np.abs(ref), 1.0)
        assert err.max() <= 64 * EPS32, err.max() / EPS32
    assert np.all(np.diff(x) <= 0)  # monotone: logp decreases along the grid


def test_log_ndtri_special_values(dtype):
    out = np.asarray(tn.log_ndtri(np.array([-INF, 0.0, 0.5, -800.0], dtype)))
    assert out[0] == -INF and out[1] == INF and np.isnan(out[2])
    # log Phi(x) = -800 at x ~ -39.88 (x^2/2 + log|x| + log(2 pi)/2 ~ 800)
    assert -39.9 < out[3] < -39.85
    assert abs(ss.log_ndtr(float(out[3])) + 800) < 800 * 64 * float(np.finfo(dtype).eps)


# ----------------------------------------------------------------------- log_mass

MASS_CASES = [
    (-INF, INF),
    (0, INF),
    (-INF, 0),
    (0.5, 1.2),
    (-1e-3, 1e-3),
    (1e-3, 2e-3),
    (-1.001, -1.0),
    (2, 2.001),
    (5, 5.001),
    (-9.9, -9.899),
    (-30, -29.999),
    (36, 36.001),
    (30, INF),
    (-INF, -40),
    (-40, -39),
    (8, 40),
    (-3, 38),
    (-38, 0.1),
]


@pytest.mark.parametrize("a,b", MASS_CASES)
def test_log_mass_accuracy(dtype, a, b):
    a, b = dtype(a), dtype(b)  # reference at the exactly representable bounds
    got = float(tn.log_mass(a, b))
    fa, fb = float(a), float(b)
    if np.isinf(fa) and np.isinf(fb):
        ref = 0.0
    elif np.isinf(fa) or np.isinf(fb):  # one-sided: log Phi(b) or log Phi(-a)
        ref = ss.log_ndtr(fb if np.isinf(fa) else -fa)
    elif fa < 0 < fb:  # straddling: the two erf terms have opposite signs
        ref = np.log(0.5 * (ss.erf(fb / np.sqrt(2)) - ss.erf(fa / np.sqrt(2))))
    else:
        ref = _ref_quad(fa, fb)[0]
    # Condition number of log Z w.r.t. relative perturbations of the bounds:
    # |a| phi(a)/Z + |b| phi(b)/Z (~ |a|/(b - a) for narrow intervals, ~a^2 in tails).
    with np.errstate(invalid="ignore", over="ignore"):
        terms = [abs(t) * np.exp(-0.5 * t * t - 0.5 * np.log(2 * np.pi) - ref) for t in (fa, fb)]
    kappa = sum(0.0 if np.isinf(t) else k for t, k in zip((fa, fb), terms))
    eps = float(np.finfo(dtype).eps)
    # A backward-stable algorithm errs by a few ulp times the condition number (plus a
    # few ulp of log Z itself); measured worst ~0.5 * kappa ulp.
    assert abs(got - ref) <= 8 * eps * (1.0 + kappa + abs(ref)), (got, ref, kappa)


def test_log_mass_degenerate_and_vectorised(dtype):
    a = np.array([1.0, -2.0, 3.0], dtype)
    out = np.asarray(tn.log_mass(a, a))
    assert np.all(out == -INF)
    out = np.asarray(tn.log_mass(a[:, None], np.array([INF, 4.0], dtype)))
    assert out.shape == (3, 2) and np.isfinite(out).all() and out.dtype == dtype


# ------------------------------------------------------------------------- sample

# (mean, lo, hi): probit one-sided, ordinal intervals, narrow intervals far in a tail.
SAMPLE_CASES = [
    (0.0, 0.0, INF),
    (0.0, -INF, 0.0),
    (3.0, 0.0, INF),
    (3.0, -INF, 0.0),
    (-5.0, 0.0, INF),
    (-5.0, -INF, 0.0),
    (20.0, -INF, 0.0),
    (20.0, 0.0, INF),
    (-40.0, 0.0, INF),
    (40.0, -INF, 0.0),
    (-40.0, -INF, 0.0),
    (40.0, -INF, INF),
    (0.0, 0.5, 1.2),
    (3.0, 0.5, 1.2),
    (-5.0, 0.5, 1.2),
    (40.0, 0.5, 1.2),
    (-40.0, 0.5, 1.2),
    (0.0, -30.0, -29.99),
    (0.0, 8.0, 8.01),
    (-40.0, 0.0, 0.01),
    (40.0, -0.05, 0.0),
    (0.0, -1e-3, 1e-3),
    (-20.0, -1.0, 1.0),
]


# Draws with a plausible bug, for the power check: the bound off by 0.05 in a tail (true
# case: mean -5 on [0, inf)), and an ordinal interval drawn with the latent mean dropped
# (true case: mean 3 on [0.5, 1.2]).  They are extra rows of the same call, so that the
# (slow, ~3 s) compilation of ``sample`` happens once per dtype.
WRONG_CASES = [(-5.0, 0.05, INF), (0.0, 0.5, 1.2)]
WRONG_TRUTH = [(-5.0, 0.0, INF), (3.0, 0.5, 1.2)]
_DRAWS = {}


def _draws(dtype):
    """(mean, lo, hi, z): N_KS draws for each row of SAMPLE_CASES + WRONG_CASES."""
    if dtype not in _DRAWS:
        cases = SAMPLE_CASES + WRONG_CASES
        m, lo, hi = (np.array(c, dtype)[:, None] for c in zip(*cases))
        z = tn.sample(jax.random.key(0), np.broadcast_to(m, (len(cases), N_KS)), lo, hi)
        _DRAWS[dtype] = m, lo, hi, np.asarray(z)
    return _DRAWS[dtype]


def test_sample_matches_exact_truncated_cdf(dtype):
    m, lo, hi, z = _draws(dtype)
    assert z.dtype == dtype and z.shape == (len(SAMPLE_CASES) + len(WRONG_CASES), N_KS)
    assert np.isfinite(z).all()
    assert np.all((z >= lo) & (z <= hi))
    for i, case in enumerate(SAMPLE_CASES):
        # Reference CDF at the dtype-rounded parameters (what the sampler was given).
        p = _ks_pvalue(z[i], float(m[i, 0]), float(lo[i, 0]), float(hi[i, 0]))
        assert p > KS_LEVEL, (case, p)


def test_wrong_samplers_are_rejected(dtype):
    """Power: the same KS check rejects samplers with a plausible bug."""
    key = jax.random.key(1)
    # untruncated normal where [0, inf) was asked for
    z = np.asarray(jax.random.normal(key, (N_KS,), dtype))
    assert _ks_pvalue(z, 0.0, 0.0, INF) < KS_LEVEL, "untruncated"
    # wrong bound / dropped mean (rows of the main draw)
    z = _draws(dtype)[3][len(SAMPLE_CASES) :]
    for row, truth in zip(z, WRONG_TRUTH):
        assert _ks_pvalue(row, *truth) < KS_LEVEL, truth
    # distorted inverse CDF (u -> u^1.2) in a far tail
    u = np.asarray(jax.random.uniform(key, (N_KS,), dtype)) ** 1.2
    z = np.asarray(tn.sample_std(u, dtype(30.0), dtype(INF)))
    assert _ks_pvalue(z, 0.0, 30.0, INF) < KS_LEVEL, "distorted"


def test_sample_std_is_monotone_and_in_bounds(dtype):
    u = np.linspace(0.001, 0.999, N_KS).astype(dtype)  # shape of the KS check: one compile
    for a, b in [(-INF, INF), (30.0, INF), (-INF, -30.0), (-0.5, 40.0), (2.0, 2.001), (-1.0, 1.0)]:
        x = np.asarray(tn.sample_std(u, dtype(a), dtype(b)))
        assert np.isfinite(x).all() and np.all((x >= a) & (x <= b))
        assert np.all(np.diff(x) >= 0), (a, b)


def test_sample_is_deterministic_in_key(dtype):
    _, lo, hi, _ = _draws(dtype)  # same shapes as there: no new compilation
    args = (np.zeros((lo.shape[0], N_KS), dtype), lo, hi)
    np.testing.assert_array_equal(
        tn.sample(jax.random.key(3), *args), tn.sample(jax.random.key(3), *args)
    )
    assert not np.array_equal(
        tn.sample(jax.random.key(3), *args), tn.sample(jax.random.key(4), *args)
    )


# ------------------------------------------------------------- moments and entropy

MOMENT_CASES = [
    (-INF, INF),
    (0.0, INF),
    (-INF, 0.0),
    (0.5, 1.2),
    (-1.0, 8.0),
    (2.0, 3.0),
    (5.0, 5.5),
    (-3.0, -2.9),
    (-1e-3, 1e-3),
    (30.0, INF),
    (-INF, -40.0),
    (40.0, 41.0),
    (-40.0, -39.999),
    (-30.0, -29.999),
    (10.0, 10.3),
    (-0.2, 0.1),
]


@pytest.mark.parametrize("a,b", MOMENT_CASES)
def test_moments_entropy_float64_vs_quadrature(x64, a, b):
    _, e_ref, v_ref, h_ref = _ref_quad(a, b)
    e, v = tn.moments(0.0, a, b)
    h = tn.entropy(0.0, a, b)
    # quad is asked for 1e-12 relative (usually reaching ~1e-14, as does the
    # Gauss-Legendre rule); the variance of a narrow interval is ~1e-7 of E[z^2].
    np.testing.assert_allclose(float(e), e_ref, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(float(v), v_ref, rtol=1e-10)
    np.testing.assert_allclose(float(h), h_ref, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize(
    "mean,lo,hi", [(0.0, 0.0, INF), (1.0, -INF, 0.0), (3.0, 0.5, 1.2), (-0.7, -1.0, 2.5)]
)
def test_moments_entropy_vs_scipy_in_the_bulk(x64, mean, lo, hi):
    d = st.truncnorm(lo - mean, hi - mean, loc=mean)
    e, v = tn.moments(mean, lo, hi)
    np.testing.assert_allclose([float(e), float(v)], [d.mean(), d.var()], rtol=1e-10)
    if np.isfinite(lo) and np.isfinite(hi):  # scipy's entropy is NaN with an infinite bound
        np.testing.assert_allclose(float(tn.entropy(mean, lo, hi)), d.entropy(), rtol=1e-10)


@pytest.mark.parametrize("a", [10.0, 20.0, 40.0])
def test_one_sided_far_tail_asymptotics(x64, a):
    """[a, inf) for large a: E = a + 1/a - 2/a^3 + O(a^-5), Var = 1/a^2 - 6/a^4 + O(a^-6),
    H = 1 - log a - 2/a^2 + O(a^-4) (from the Mills-ratio series 1/a - 1/a^3 + 3/a^5).
    Tolerances are the next term's order with coefficient 20 (the exact next coefficients
    are 10, 50 and ~9), so an error in any printed term would exceed them."""
    e, v = tn.moments(0.0, a, INF)
    h = tn.entropy(0.0, a, INF)
    assert abs(float(e) - (a + 1 / a - 2 / a**3)) < 20 / a**5
    assert abs(float(v) - (1 / a**2 - 6 / a**4)) < 100 / a**6
    assert abs(float(h) - (1 - np.log(a) - 2 / a**2)) < 20 / a**4
    # and mirrored: (-inf, -a]
    e2, v2 = tn.moments(0.0, -INF, -a)
    np.testing.assert_allclose([-float(e2), float(v2)], [float(e), float(v)], rtol=4 * EPS64)


def test_float32_far_tails_finite_and_close_to_float64():
    """float32 in far tails: finite, Var in (0, 1], and equal to the float64 values at the
    same (float32-representable) standardized bounds within 256 eps32: the quadrature
    exponent t(t + 2c)/2 reaches 40, whose rounding (~40 eps) scales every weight; the
    64-term sums add a few eps more."""
    means = np.array([0, 3, -5, 20, -40, 40, 40, -40, 0, 0], np.float32)
    los = np.array([0, -INF, 0.5, -INF, 0, 0, 0.5, -1.0, -30.0, 8.0], np.float32)
    his = np.array([INF, 0, 1.2, 0, INF, INF, 1.2, -0.999, -29.999, 8.001], np.float32)
    a, b = los - means, his - means  # standardized in float32, as the functions do
    e32, v32 = (np.asarray(t) for t in tn.moments(np.zeros_like(a), a, b))
    h32 = np.asarray(tn.entropy(np.zeros_like(a), a, b))
    assert e32.dtype == np.float32
    assert np.isfinite(e32).all() and np.isfinite(h32).all()
    assert np.all((v32 > 0) & (v32 <= 1))
    assert np.all((e32 >= a) & (e32 <= b))
    with jax.enable_x64(True):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        e64, v64 = (np.asarray(t) for t in tn.moments(np.zeros_like(a64), a64, b64))
        h64 = np.asarray(tn.entropy(np.zeros_like(a64), a64, b64))
    tol = 256 * EPS32
    np.testing.assert_allclose(e32, e64, rtol=tol)
    np.testing.assert_allclose(v32, v64, rtol=tol)
    np.testing.assert_allclose(h32, h64, rtol=tol, atol=tol)


def test_moments_broadcast_and_dtype(dtype):
    e, v = tn.moments(
        np.zeros((3, 1), dtype), np.array([0.0, -INF], dtype), np.array([INF, 0.0], dtype)
    )
    assert e.shape == v.shape == (3, 2) and e.dtype == v.dtype == dtype
    assert tn.entropy(np.zeros((3, 1), dtype), dtype(0.0), dtype(1.0)).shape == (3, 1)


def test_log_mass_gradient_is_finite_on_both_branches(dtype):
    """Each branch of log_mass is evaluated where it is not used too; its gradient must
    stay finite there (a NaN would poison NUTS, SVI and the VB cut-point step).  It equals
    the closed form ``(-phi(a) / Z, phi(b) / Z)`` up to a float tolerance."""
    import jax.numpy as jnp

    a = jnp.asarray([-1.0, -1.0, 0.5, 3.0, -5.0, -30.0, -0.2], dtype)
    b = a + jnp.asarray([1.0, 2.0, 1.0, 1e-3, 1.0, 1.0, 0.1], dtype)
    ga, gb = jax.grad(lambda x, y: jnp.sum(tn.log_mass(x, y)), argnums=(0, 1))(a, b)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    Z = np.where(a64 > 0, st.norm.sf(a64) - st.norm.sf(b64), st.norm.cdf(b64) - st.norm.cdf(a64))
    assert np.all(np.isfinite(np.asarray(ga))) and np.all(np.isfinite(np.asarray(gb)))
    # relative to the gradient's size |ga| + |gb| (a partial derivative ~1e-12 beside one of
    # ~30, at a = -30, is only known to that absolute precision); the condition number grows
    # like |a| / (b - a) for the narrow tail interval, hence the 1e4 ulp
    ref_a, ref_b = -st.norm.pdf(a64) / Z, st.norm.pdf(b64) / Z
    tol = 1e4 * float(np.finfo(dtype).eps) * (np.abs(ref_a) + np.abs(ref_b))
    assert np.all(np.abs(np.asarray(ga, np.float64) - ref_a) <= tol)
    assert np.all(np.abs(np.asarray(gb, np.float64) - ref_b) <= tol)


def test_fast_sampler_equals_the_log_space_inverse_cdf(dtype):
    """``sample`` inverts most entries in probability space and only the far-tail /
    narrow ones in log space (:func:`truncnorm._sample_std_fast`); both are inverse CDFs
    of the same uniforms, so every draw must equal :func:`sample_std`'s up to rounding:
    ``dx = dp / phi(x)`` with ``dp`` a few ulp of ``p``, i.e. about ``eps (1 + |x|)``
    (Mills ratio); 1e3 ulp leaves room for the Newton steps of the log-space inverse.
    Both buffer paths run: a few tail entries (gathered) and mostly tail entries (all)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(3)
    n = 4096
    eps = float(np.finfo(dtype).eps)
    for tail_share in (0.01, 0.9):  # ~3% of entries for the log-space buffer (1/16), then ~90%
        far = rng.random(n) < tail_share
        centre = np.where(far, rng.choice([-35.0, -12.0, 9.0, 30.0], n), rng.normal(size=n) * 2)
        width = np.where(rng.random(n) < 2 * tail_share, 1e-3, rng.exponential(1.0, n))
        a = np.where(rng.random(n) < 0.2, -np.inf, centre - width / 2)
        b = np.where(rng.random(n) < 0.2, np.inf, centre + width / 2)
        u = rng.uniform(1e-6, 1 - 1e-6, n)
        u, a, b = (jnp.asarray(x, dtype) for x in (u, a, b))
        share = float(np.mean(~np.asarray(tn._sample_std_bulk(u, a, b)[1])))
        assert (share < tn._TAIL_SHARE) == (tail_share < 0.5)  # both paths of the lax.cond
        fast = np.asarray(tn._sample_std_fast(u, a, b), np.float64)
        slow = np.asarray(tn.sample_std(u, a, b), np.float64)
        assert np.all(np.isfinite(fast))
        np.testing.assert_array_less(np.abs(fast - slow), 1e3 * eps * (1.0 + np.abs(slow)))
