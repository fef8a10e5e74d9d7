"""Every random primitive of the Gibbs samplers stays finite and in its support at the
extreme values its random-number generator can return.

JAX's ``uniform`` maps 32 (float32) or 64 (float64) random bits to ``[minval, maxval)``: all
bits zero give exactly ``minval`` (0, or ``tiny`` for the truncated normal's uniforms), all
ones give ``1 - 2^-nmant``; its ``normal`` is ``sqrt2 erfinv`` of such a uniform, so it
spans about [-5.4, 5.2] (float32) and [-8.3, 8.2] (float64).  These happen once in 2^23 (or
2^52) draws, i.e. about once per 100 sweeps of an 80,000-rating probit fit in float32.

The tests feed them in two ways:

* the truncated normal's inverse CDF is a function of ``u`` (``truncnorm.sample_uniform``),
  given every extreme ``u`` directly (0, the smallest subnormal, ``tiny``, the generator's
  two smallest and its largest value, ``1 - ulp``, 1), for means far in both tails, in
  float32 and float64, with an exact float64 reference at the reachable extremes;
* the other primitives run with JAX's bit generator replaced by one that returns all-zero
  or all-one bits (``_random_bits``; JAX's caches are cleared before and after, so that
  the jitted functions are traced with the replacement and not kept), so their uniforms
  and normals are the generator's own extremes; the gamma sampler (either of
  ``bmczoo._rng.GAMMA_SAMPLERS``: a rejection loop, which would never accept on constant
  bits) is replaced by the extreme values its Marsaglia-Tsang rounds can return, from the
  same bounds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as ss
from scipy.optimize import brentq

import bmczoo as bmc
from bmczoo import _rng
from bmczoo.likelihoods import truncnorm as tn

INF = np.inf


# ------------------------------------------------------------------ the generator's extremes


def _constant_bits(fill):
    """A ``_random_bits`` returning all-zero (``fill = 0``) or all-one bits."""

    # JAX 0.12.1 passes ``out_sharding`` by keyword; it does not change the bits
    def bits(key, bit_width, shape, **kwargs):
        dt = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[bit_width]
        return jnp.full(shape, np.array(fill).astype(np.dtype(dt)), dt)

    return bits


def _jax_gamma_extreme(alpha, dtype, smallest):
    """The smallest or largest draw of JAX's Marsaglia-Tsang gamma sampler of shape ``alpha``.

    A draw is ``d V boost`` with ``d = alpha' - 1/3`` (``alpha' = alpha``, or ``alpha + 1``
    below 1), ``V = v^3``, ``v = 1 + c x > 0`` for a normal ``x``, and ``boost = 1`` (alpha
    >= 1) or ``s^(1/alpha)`` with ``s = 1 - uniform`` in ``[2^-nmant, 1]``.  The rejection
    test accepts any ``V`` when its uniform is exactly 0, so ``v`` can be as small as the
    smallest positive ``1 + c x``: half an ulp of 1, ``2^-(nmant+1)``.  The largest ``v`` is
    ``1 + c x_max`` with ``x_max`` the normal's largest value."""
    nmant = np.finfo(dtype).nmant
    alpha = np.asarray(alpha, np.float64)
    a1 = np.where(alpha >= 1, alpha, alpha + 1)
    d = a1 - 1.0 / 3.0
    if smallest:
        boost = np.where(alpha >= 1, 1.0, 2.0 ** (-nmant / alpha))
        return np.asarray(d * 2.0 ** (-3 * (nmant + 1)) * boost, dtype)
    x_max = math.sqrt(2) * ss.erfinv(1 - 2.0**-nmant)
    return np.asarray(d * (1 + x_max / np.sqrt(9 * d)) ** 3, dtype)


def _log1p_remainder(t):
    """``log1p(y) - y + y^2/2 - y^3/3`` at ``y = t - 1``, in float64 (``t`` in (0, 1])."""
    y = t - 1
    return math.log(t) - y + y * y / 2 - y**3 / 3


def _one_hash_gamma_extreme(alpha, dtype, smallest):
    """The smallest or largest draw of ``bmczoo._rng.standard_gamma`` of shape ``alpha``.

    A draw is ``d (1 + y)^3 boost`` as above with ``y = x / sqrt(9 d)``; it is accepted
    when ``log s' < 3 d (log1p(y) - y + y^2/2 - y^3/3)`` for ``s' = 1 - uniform``, at best
    ``log 2^-nmant``: the smallest ``1 + y`` is where the right-hand side reaches that
    value.  The largest is ``1 + c x_max`` (accepted: the right-hand side is above ``-11``
    there)."""
    nmant = np.finfo(dtype).nmant
    alpha = np.asarray(alpha, np.float64)
    d = np.where(alpha >= 1, alpha, alpha + 1) - 1.0 / 3.0
    if not smallest:
        return _jax_gamma_extreme(alpha, dtype, False)
    floor = -nmant * math.log(2)
    t = np.vectorize(
        lambda dd: brentq(lambda t: 3 * dd * _log1p_remainder(t) - floor, 1e-300, 1.0)
    )(d)
    boost = np.where(alpha >= 1, 1.0, 2.0 ** (-nmant / alpha))
    return np.asarray(d * t**3 * boost, dtype)


GAMMA_EXTREMES = {"jax": _jax_gamma_extreme, "one-hash": _one_hash_gamma_extreme}


@pytest.fixture(params=_rng.GAMMA_SAMPLERS)
def gamma_sampler(request):
    """The sweep's gamma sampler, selected for the test."""
    with _rng.using_gamma_sampler(request.param):
        yield request.param


@pytest.fixture(params=["zeros", "ones"])
def extreme_bits(request, monkeypatch):
    """JAX's random bits all zero or all one; gammas at the extremes of the sampler selected
    when they are drawn (the tests of gamma draws take the ``gamma_sampler`` fixture)."""
    import jax._src.random.core as core

    zeros = request.param == "zeros"
    monkeypatch.setattr(core, "_random_bits", _constant_bits(0 if zeros else -1))

    def gamma(key, a):
        extreme = GAMMA_EXTREMES[_rng._SAMPLER.name]
        return jnp.asarray(extreme(np.asarray(a), np.dtype(a.dtype), zeros), a.dtype)

    monkeypatch.setattr(_rng, "_standard_gamma", gamma)
    # jitted functions traced before (or during) the test would keep their bits: retrace
    jax.clear_caches()
    yield request.param
    monkeypatch.undo()
    jax.clear_caches()


def _generator_values(dtype):
    """``(smallest, largest)`` of ``truncnorm.uniform`` and of ``jax.random.uniform``, read
    off JAX's own code with constant bits."""
    import jax._src.random.core as core

    real = core._random_bits
    out = {}
    try:
        for fill in (0, -1):
            core._random_bits = _constant_bits(fill)
            jax.clear_caches()
            out[fill] = (
                float(tn.uniform(jax.random.key(0), (1,), dtype)[0]),
                float(jax.random.uniform(jax.random.key(0), (1,), dtype)[0]),
            )
    finally:
        core._random_bits = real
        jax.clear_caches()
    return out[0], out[-1]


def test_generator_extremes_are_as_documented(dtype):
    """The premise of the tests below: ``truncnorm.uniform`` returns ``tiny`` for zero bits
    and ``1 - 2^-nmant`` for all-one bits; ``jax.random.uniform`` returns 0 for zero bits."""
    (t_lo, u_lo), (t_hi, u_hi) = _generator_values(dtype)
    fi = np.finfo(dtype)
    assert t_lo == float(fi.tiny) and u_lo == 0.0
    assert t_hi == u_hi == 1.0 - 2.0**-fi.nmant


def extreme_uniforms(dtype):
    """0, the smallest subnormal, tiny, the generator's two smallest values, 1/2, its
    largest value, 1 - ulp and 1 (the clamped ones stand for out-of-range inputs)."""
    fi = np.finfo(dtype)
    return np.array(
        [
            0.0,
            np.nextafter(dtype(0), dtype(1)),
            fi.tiny,
            2.0**-fi.nmant,
            0.5,
            1.0 - 2.0**-fi.nmant,
            1.0 - fi.epsneg,
            1.0,
        ],
        dtype,
    )


MEANS = (-1e3, -40.0, -13.0, -5.0, -1.0, 0.0, 1.0, 5.0, 13.0, 40.0, 1e3)
INTERVALS = (
    (-INF, 0.0),
    (0.0, INF),
    (-INF, INF),
    (-INF, -2.0),
    (1.5, INF),
    (-0.5, 0.5),
    (1.0, 2.0),
    (0.0, 1e-3),
    (-INF, 30.0),
    (-30.0, INF),
)


def _grid(dtype):
    u = extreme_uniforms(dtype)
    U, M, J = np.meshgrid(
        np.arange(u.size), np.arange(len(MEANS)), np.arange(len(INTERVALS)), indexing="ij"
    )
    lo = np.array([INTERVALS[i][0] for i in J.ravel()], dtype)
    hi = np.array([INTERVALS[i][1] for i in J.ravel()], dtype)
    return u[U.ravel()], np.array(MEANS, dtype)[M.ravel()], lo, hi


def _assert_in_support(z, lo, hi, label):
    z = np.asarray(z)
    bad = ~(np.isfinite(z) & (z >= lo) & (z <= hi))
    assert not bad.any(), (
        f"{label}: {int(bad.sum())} draws outside their interval, first at "
        f"lo={lo[bad][0]}, hi={hi[bad][0]}: {z[bad][0]}"
    )


def test_truncnorm_finite_and_inside_at_every_extreme_uniform(dtype):
    """``sample_uniform`` on the whole grid at once (the gathered log-space buffer and the
    all-log-space branch both run: most entries are tails), entry by entry in small batches
    (the no-buffer path), and ``sample_std`` (the log-space inverse) on the standardised
    bounds."""
    u, mean, lo, hi = _grid(dtype)
    _assert_in_support(tn.sample_uniform(u, mean, lo, hi), lo, hi, "whole grid")
    # one mean per batch: the share of tail entries changes from batch to batch
    for m in MEANS:
        sel = mean == dtype(m)
        _assert_in_support(
            tn.sample_uniform(u[sel], mean[sel], lo[sel], hi[sel]), lo[sel], hi[sel], f"mean {m}"
        )
    for k in range(0, u.size, 50):
        s = slice(k, k + 50)
        _assert_in_support(
            tn.sample_uniform(u[s], mean[s], lo[s], hi[s]), lo[s], hi[s], "small batches"
        )
    a, b = lo - mean, hi - mean
    ok = a < b  # (|mean| = 1e3 on a narrow interval rounds it to a point in float32)
    _assert_in_support(tn.sample_std(u[ok], a[ok], b[ok]), a[ok], b[ok], "sample_std")


def _ref_quantile(u: float, a: float, b: float) -> float:
    """Exact float64 quantile at ``u`` of N(0, 1) truncated to a one-sided interval.

    ``[-inf, b]``: ``log p = log u + log Phi(b)``; ``[a, inf]`` is the reflection
    ``x(u; a, inf) = -x(1 - u; -inf, -a)``, with ``log(1 - u)`` from ``log1p``.  The side
    whose probability is below 1/2 is solved for with Brent's method on scipy's
    ``log_ndtr`` (accurate to a few ulp in both tails)."""
    if b == INF:
        return -_ref_quantile_lower(math.log1p(-u), math.log(u), -a)
    return _ref_quantile_lower(math.log(u), math.log1p(-u), b)


def _ref_quantile_lower(log_u, log_1mu, b):
    log_p = log_u + ss.log_ndtr(b)
    if log_p < math.log(0.5):
        return brentq(
            lambda x: ss.log_ndtr(x) - log_p, -60.0, 1.0, xtol=1e-300, rtol=4 * np.finfo(float).eps
        )
    log_q = np.logaddexp(
        ss.log_ndtr(-b), log_1mu + ss.log_ndtr(b)
    )  # 1 - p = Phi(-b) + (1 - u) Phi(b)
    return -brentq(
        lambda x: ss.log_ndtr(x) - log_q, -60.0, 1.0, xtol=1e-300, rtol=4 * np.finfo(float).eps
    )


def test_truncnorm_exact_in_float64_at_the_generator_extremes():
    """At ``u = tiny``, the generator's second value and its largest value, the float64 draw
    on one-sided intervals equals the exact quantile.  Tolerance from the condition
    number: the target log-probability ``log p`` (or ``log q``) carries a few ulp of its
    size, and ``dx = d(log p) Phi(x) / phi(x)``; 64 ulp of ``1 + |log p|`` times that Mills
    ratio, plus the rounding of ``mean + x`` (a few ulp of ``|mean| + |x|``)."""
    eps = np.finfo(np.float64).eps
    fi = np.finfo(np.float64)
    with jax.enable_x64(True):
        for u in (float(fi.tiny), 2.0**-52, 1.0 - 2.0**-52):
            for m in (-40.0, -13.0, -5.0, 0.0, 5.0, 13.0, 40.0):
                for lo, hi in ((-INF, 0.0), (0.0, INF), (-INF, -2.0), (1.5, INF)):
                    a, b = lo - m, hi - m
                    ref = _ref_quantile(u, a, b)
                    z = float(
                        tn.sample_uniform(
                            np.full(3, u), np.full(3, m), np.full(3, lo), np.full(3, hi)
                        )[0]
                    )
                    side = ref if ref < 0 else -ref  # the lower-tail point of the inverted side
                    log_side = ss.log_ndtr(side)
                    mills = math.exp(log_side - (-0.5 * side * side - 0.5 * math.log(2 * math.pi)))
                    tol = 64 * eps * (1 + abs(log_side)) * mills + 4 * eps * (abs(m) + abs(ref))
                    assert abs((z - m) - ref) <= tol, (u, m, lo, hi, z - m, ref, tol)


def test_truncnorm_sample_draws_are_finite_with_extreme_bits(dtype, extreme_bits):
    """``truncnorm.sample`` and the probit / ordered-probit latent blocks with the
    generator's own extreme uniforms (all-zero bits give ``u = tiny``: before the fix a
    ``-inf`` latent on ``(-inf, 0]`` at means 0 and -5, the float32 probit failure)."""
    mean = np.array([-40.0, -5.0, 0.0, 5.0, 40.0] * 2, dtype)
    lo = np.array([-INF] * 5 + [0.0] * 5, dtype)
    hi = np.array([0.0] * 5 + [INF] * 5, dtype)
    _assert_in_support(tn.sample(jax.random.key(0), mean, lo, hi), lo, hi, "sample")

    keys = jax.random.split(jax.random.key(0), 2)
    theta = np.tile(mean, (2, 1))
    probit = bmc.likelihoods.Probit()
    level = (lo == 0).astype(np.int32)  # 0: y = 0, interval (-inf, 0]; 1: y = 1, [0, inf)
    _, z = probit.gibbs_latent(keys, theta, level, jnp.zeros((2, 1), dtype), None)
    _assert_in_support(z, np.tile(lo, (2, 1)), np.tile(hi, (2, 1)), "probit latent")

    ordered = bmc.likelihoods.OrderedProbit()
    cuts = jnp.tile(jnp.asarray([-1.5, -0.5, 0.5, 1.5], dtype), (2, 1))
    level = np.arange(mean.size) % 5
    new_cuts, z = ordered.gibbs_latent(keys, theta, level, cuts, np.full(4, 0.1))
    assert np.all(np.isfinite(np.asarray(new_cuts))) and np.all(
        np.diff(np.asarray(new_cuts), axis=1) > 0
    )
    edges = np.concatenate(
        [np.full((2, 1), -INF), np.asarray(new_cuts), np.full((2, 1), INF)], axis=1
    )
    _assert_in_support(
        z,
        np.take_along_axis(edges, np.tile(level, (2, 1)), 1),
        np.take_along_axis(edges, np.tile(level + 1, (2, 1)), 1),
        "ordered-probit latent",
    )


# ------------------------------------------------------------------ scale and precision draws

# Sums of squares over a column (or residuals): zero, the smallest normal float, tiny values
# of a collapsed column and large ones of a diverging chain.
STATS = (0.0, "tiny", 1e-30, 1e-6, 1.0, 1e6, 1e12)
DIMS = (1, 2, 100, 2000)


def _stats(dtype):
    return np.array([np.finfo(dtype).tiny if s == "tiny" else s for s in STATS], dtype)


def _assert_positive_finite(x, label):
    x = np.asarray(x)
    assert np.all(np.isfinite(x) & (x > 0)), f"{label}: {x}"


@pytest.mark.parametrize(
    "prior",
    [bmc.priors.InverseGamma(1.0, 0.01), bmc.priors.Gamma(10.0), bmc.priors.Gamma(1000.0)],
    ids=["inverse-gamma", "gamma-10", "gamma-1000"],
)
def test_column_scale_draws_positive_and_finite(dtype, gamma_sampler, extreme_bits, prior):
    """``gamma_h | S_h`` (inverse gamma; GIG(1/2) through the inverse Gaussian) is finite and
    positive for every sum of squares and generator extreme."""
    S = _stats(dtype)
    for d in DIMS:
        _assert_positive_finite(prior.sample_conditional(jax.random.key(0), S, d), f"{prior} d={d}")


def test_discrete_draws_stay_on_the_grid(dtype, extreme_bits):
    prior = bmc.priors.Discrete()
    S = _stats(dtype)
    for d in DIMS:
        g = np.asarray(prior.sample_conditional(jax.random.key(0), S, d))
        assert np.all((g == dtype(prior.C)) | (g == dtype(prior.eps))), g


def test_noise_and_bias_variance_draws_positive_and_finite(dtype, gamma_sampler, extreme_bits):
    """``tau`` of the learned noise and ``s^2`` of the biases."""
    stats = _stats(dtype)
    for lik in (
        bmc.likelihoods.LearnedNoise(),
        bmc.likelihoods.LearnedNoise(a=0.5, b=1e-3, temper=0.1),
    ):
        for n in (1, 100, 10**6):
            _assert_positive_finite(lik.sample_tau(jax.random.key(0), stats, n), f"{lik} n={n}")
    offsets = bmc.offsets.Biases()
    for m in (1, 100, 10**5):
        _assert_positive_finite(
            offsets.sample_variance(jax.random.key(0), stats, m), f"biases m={m}"
        )


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_normal_wishart_draws_finite_and_positive_definite(
    dtype, gamma_sampler, extreme_bits, scale, monkeypatch
):
    """``(mu, Lambda)`` of both factors (Bartlett decomposition): finite, ``Lambda``
    symmetric and positive semi-definite up to the rounding of the Gram product
    ``X X^T`` (eigenvalues >= ``-4 K eps`` times the largest), for factors of very different
    sizes and for ``m`` from 1 (few degrees of freedom: shapes near 1/2) to 2000.  (With a
    chi-square variate at the gamma sampler's smallest value, ~1e-22 in float32, the draw
    is singular to working precision: exactly the Wishart draw of that variate.)

    The K chi-square variates of one draw are independent gamma draws; the last one (the
    smallest shape, ``(nu - K + 1)/2``) is put at the sampler's extreme, the others at
    their median (all K at 1e-22 at once, which constant bits cannot produce in JAX's
    rejection loop, would overflow the triangular solve)."""
    K = 5
    extreme = _rng._standard_gamma

    def gamma(key, a):
        g = np.asarray(extreme(key, a), np.float64)
        median = np.broadcast_to(ss.gammaincinv(np.asarray(a, np.float64), 0.5), g.shape).copy()
        median[..., -1] = g[..., -1]
        return jnp.asarray(median, a.dtype)

    monkeypatch.setattr(_rng, "_standard_gamma", gamma)
    prior = bmc.priors.NormalWishart()
    rng = np.random.default_rng(0)
    for m in (1, 3, 2000):
        F = jnp.asarray(scale * rng.normal(size=(m, K)), dtype)
        stats = prior.factor_stats(F)
        out = prior.gibbs_update(jax.random.key(0), stats, stats, m, m)
        for side in ("M", "N"):
            mu, Lam = (
                np.asarray(out[f"mu_{side}"], np.float64),
                np.asarray(out[f"Lambda_{side}"], np.float64),
            )
            assert np.all(np.isfinite(mu)) and np.all(np.isfinite(Lam)), (m, scale)
            np.testing.assert_array_equal(Lam, Lam.T)
            eig = np.linalg.eigvalsh(Lam)
            assert eig[-1] > 0 and eig[0] >= -4 * K * np.finfo(dtype).eps * eig[-1], (m, scale, eig)
