"""Truncated standard normal utilities for probit / ordered-probit data augmentation.

Albert & Chib's augmentation draws a latent ``z ~ N(mean, 1)`` truncated to the interval
``[lo, hi]`` implied by the observed category; its variational version needs the mean,
variance and entropy of that truncated normal.  With ``|mean|`` up to about 40 the
interval can sit 40 standard deviations out in a tail, where ``Phi`` underflows (float32
below about -13, float64 below about -37) and naive formulas give NaN or cancel to 0.

Everything here therefore works in log space and chooses, case by case, the side of the
normal on which the relevant probability is *small* (the symmetry
``Phi(b) - Phi(a) = Phi(-a) - Phi(-b)``), so that no quantity is ever ``1 - tiny``.

Public functions (pure, vectorised, broadcasting, in the dtype of their inputs):

* :func:`log_ndtri` -- inverse of ``log_ndtr``;
* :func:`log_mass` -- ``log(Phi(b) - Phi(a))``;
* :func:`sample_std` / :func:`sample` -- inverse-CDF truncated normal draws;
* :func:`moments` / :func:`entropy` -- mean, variance and differential entropy.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf, erfc, erfcx, ndtri

from .. import _rng

__all__ = [
    "log_ndtri",
    "log_mass",
    "sample_std",
    "sample",
    "sample_uniform",
    "uniform",
    "unit_interval",
    "moments",
    "entropy",
]

_LOG_HALF = math.log(0.5)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)

# Newton steps of log_ndtri (quadratic convergence).  Measured over logp in [-1e3, -1e-38]
# in float64: 1 step leaves 1.6e-6 relative error in log Phi(x), 2 steps reach round-off
# (5e-14); 3 keeps a margin.  The tests check the worst case over that grid.
_NEWTON_STEPS = 3
# Below this log-probability the start is the asymptotic tail expansion instead of
# ndtri(exp(logp)): float32 ndtri returns -inf for p < ~1e-38 (logp ~ -87).
_ASYMPTOTIC_BELOW = -40.0

# Gauss-Legendre rule for the moments.  The integrand exp(-(z^2 - c^2)/2) is integrated
# only where the exponent is below _CUT (the rest weighs < e^-40 ~ 4e-18 relative, under
# float64 eps), so the integrand spans at most 40 e-folds over the interval: 64 nodes
# integrate that to float64 round-off (checked against scipy in the tests).
_CUT = 40.0
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)


def _float_dtype(*xs) -> jnp.dtype:
    """The common floating dtype of the arguments (all-integer arguments: the default float)."""
    dtype = jnp.result_type(*xs)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


# Asymptotic series erfcx(x) ~ (1 / (x sqrt(pi))) sum_k (-1)^k (2k-1)!! / (2x^2)^k.
_ERFCX_SERIES = tuple((-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(9))


def _erfcx(x: jax.Array) -> jax.Array:
    """``exp(x^2) erfc(x)``, i.e. jax's ``erfcx`` with a hole patched.

    jax 0.10's ``erfcx`` returns 0 for x in about [9.19, 9.42] (float32) and
    [26.54, 26.65] (float64).  Above 9 (float32) / 26 (float64) the 9-term asymptotic
    series is exact to round-off (first omitted term < 1e-12 resp. 1e-20 relative).
    """
    big = 9.0 if x.dtype == jnp.float32 else 26.0
    xs = jnp.maximum(x, big)  # series only evaluated where it converges
    inv = 1.0 / (2.0 * xs * xs)
    acc = jnp.zeros_like(xs)
    for coef in reversed(_ERFCX_SERIES):
        acc = acc * inv + coef
    series = acc / (xs * math.sqrt(math.pi))
    return jnp.where(x > big, series, erfcx(jnp.minimum(x, big)))


def _log1m(y: jax.Array) -> jax.Array:
    """``log(1 - y)`` for ``0 <= y <= 1``.

    jax 0.10's float64 ``log1p`` is off by ~120 ulp for arguments near -0.41; it is used
    only for small ``y``, where it is needed (1 - y would round).  Above 1/4, 1 - y is
    exact to half an ulp and ``|log(1 - y)| > 0.28``, so ``log`` is as accurate.
    """
    return jnp.where(y < 0.25, jnp.log1p(-jnp.minimum(y, 0.25)), jnp.log(1.0 - y))


def _log_ndtr(x: jax.Array) -> jax.Array:
    """``log Phi(x)`` to a few ulp everywhere.

    jax's ``log_ndtr`` uses a 3-term asymptotic series below -20 in float64, which is off
    by up to ~1e-11 relative (~5e4 ulp) near -20..-40.  For x < 0 use
    ``log Phi(x) = log(erfcx(-x/sqrt2)/2) - x^2/2`` (both parts exact to round-off);
    for x >= 0 ``log(1 - Phi(-x))``.
    """
    neg = jnp.minimum(x, 0.0)
    lower = jnp.log(0.5 * _erfcx(-neg * _SQRT_HALF)) - 0.5 * neg * neg
    upper = _log1m(0.5 * erfc(jnp.maximum(x, 0.0) * _SQRT_HALF))
    return jnp.where(x < 0, lower, upper)


def _log_phi(x: jax.Array) -> jax.Array:
    """log of the standard normal density."""
    return -0.5 * x * x - _HALF_LOG_2PI


def _log_ndtri_lower(logp: jax.Array) -> jax.Array:
    """``log_ndtri`` for ``logp <= log(1/2)``, where Phi is a small probability.

    Newton on log_ndtr is well conditioned here: its slope phi(x)/Phi(x) is >= 0.8 and
    grows like |x| in the tail.
    """
    neg_inf = logp == -jnp.inf
    lp = jnp.where(neg_inf, -1.0, logp)  # keep the dead branch finite (no NaN gradients)

    # Start 1: ndtri(p) where p = exp(lp) is comfortably representable.
    lp_direct = jnp.maximum(lp, _ASYMPTOTIC_BELOW)
    x_direct = ndtri(jnp.exp(lp_direct))
    # Start 2: log Phi(x) ~ -x^2/2 - log(-x) - log(2 pi)/2  =>  x^2 ~ t - log(t),
    # t = -2 lp - log(2 pi); t >= 78 below the threshold, so the log is harmless.
    t = jnp.maximum(-2.0 * lp - 2.0 * _HALF_LOG_2PI, 2.0)
    x_asym = -jnp.sqrt(t - jnp.log(t))
    x = jnp.where(lp < _ASYMPTOTIC_BELOW, x_asym, x_direct)

    for _ in range(_NEWTON_STEPS):
        log_cdf = _log_ndtr(x)
        # f(x) = log Phi(x) - lp, f'(x) = exp(log_phi(x) - log Phi(x)).
        x = x - (log_cdf - lp) * jnp.exp(log_cdf - _log_phi(x))
    return jnp.where(neg_inf, -jnp.inf, x)


@jax.jit
def log_ndtri(logp: jax.typing.ArrayLike) -> jax.Array:
    """Inverse of :func:`jax.scipy.special.log_ndtr`.

    Parameters
    ----------
    logp : array_like
        ``log Phi(x)``, in ``[-inf, 0]``.  Works where ``exp(logp)`` underflows (e.g.
        ``logp = -800``) and where it rounds to 1 (``logp = -1e-20``).

    Returns
    -------
    jax.Array
        ``x`` with ``log Phi(x) == logp``, in the dtype of ``logp``; ``-inf`` at
        ``logp = -inf``, ``+inf`` at ``logp = 0``, NaN for ``logp > 0``.  A ``logp``
        closer to 0 than the smallest normal float (``x`` beyond ~13 in float32, ~37 in
        float64) is treated as 0, giving ``+inf``: XLA flushes subnormals.
    """
    logp = jnp.asarray(logp, dtype=_float_dtype(logp))
    upper = logp > _LOG_HALF
    # Upper half: Phi(x) = 1 - Phi(-x), and log(1 - p) = log(-expm1(logp)) is exact even
    # when p rounds to 1, so solve for -x on the lower side instead.
    log_q = jnp.log(-jnp.expm1(jnp.minimum(logp, 0.0)))
    x = _log_ndtri_lower(jnp.where(upper, log_q, logp))
    x = jnp.where(upper, -x, x)
    return jnp.where(logp > 0, jnp.nan, x)


def _log_mass_lower(a: jax.Array, b: jax.Array) -> jax.Array:
    """``log(Phi(b) - Phi(a))`` for ``a <= b <= 0`` (both ends in the lower half).

    ``Phi(b) - Phi(a) = Phi(b) (1 - exp(d))`` with ``d = log Phi(a) - log Phi(b) <= 0``.
    ``d`` is the small difference of two large numbers in the far tail (b - a = 1e-3 at
    a = -30: d ~ -0.03 from terms ~ -450), so it is formed from the scaled
    complementary error function, log Phi(x) = log(erfcx(-x/sqrt2)/2) - x^2/2:
    ``d = (b - a)(b + a)/2 + log(erfcx(-a/sqrt2) / erfcx(-b/sqrt2))``, whose parts are
    O(1) and exact to a few ulp.
    """
    a_inf = a == -jnp.inf
    a_ = jnp.where(a_inf, b - 1.0, a)  # finite stand-in; the a = -inf result is set below
    d = 0.5 * (b - a_) * (b + a_) + jnp.log(_erfcx(-a_ * _SQRT_HALF) / _erfcx(-b * _SQRT_HALF))
    d = jnp.where(a_inf, -jnp.inf, d)
    return _log_ndtr(b) + jnp.log(-jnp.expm1(d))


@jax.jit
def log_mass(a: jax.typing.ArrayLike, b: jax.typing.ArrayLike) -> jax.Array:
    """``log(Phi(b) - Phi(a))``, the log normalising constant of N(0, 1) on ``[a, b]``.

    Parameters
    ----------
    a, b : array_like
        Bounds with ``a <= b`` (broadcast together); ``a`` may be ``-inf``, ``b`` ``+inf``.

    Returns
    -------
    jax.Array
        The log mass (``-inf`` where ``a == b``), accurate in both tails and for narrow
        intervals: the error is a few ulp times the condition number of the problem.
    """
    dtype = _float_dtype(a, b)
    a = jnp.asarray(a, dtype)
    b = jnp.asarray(b, dtype)
    # Same-sign intervals: reflect into the lower half, where Phi is small and relative
    # accuracy is available (above 0, Phi(b) - Phi(a) would be (1 - tiny) - (1 - tiny')).
    flip = a > 0
    lo = jnp.where(flip, -b, a)
    hi = jnp.where(flip, -a, b)
    # Near 0 use erf, which unlike Phi ~ 1/2 is relatively accurate at small arguments;
    # for a straddling interval the two erf terms have opposite signs: no cancellation.
    near_zero = (hi > -1.0) | (lo > -1.0)
    # each branch is evaluated at safe, non-degenerate bounds where it is not used (the
    # "double where"), so that its value and its gradient stay finite there: a -inf or
    # NaN in the unused branch would make the gradient NaN
    lo_e, hi_e = jnp.where(near_zero, lo, -1.0), jnp.where(near_zero, hi, 0.0)
    log_erf = jnp.log(0.5 * (erf(hi_e * _SQRT_HALF) - erf(lo_e * _SQRT_HALF)))
    lo_t, hi_t = jnp.where(near_zero, -3.0, lo), jnp.where(near_zero, -2.0, hi)
    log_tail = _log_mass_lower(lo_t, hi_t)
    return jnp.where(near_zero, log_erf, log_tail)


@jax.jit
def sample_std(
    u: jax.typing.ArrayLike, a: jax.typing.ArrayLike, b: jax.typing.ArrayLike
) -> jax.Array:
    """Inverse CDF of the standard normal truncated to ``[a, b]``, evaluated at ``u``.

    ``u ~ Uniform(0, 1)`` gives a draw of N(0, 1) truncated to ``[a, b]``; the map is
    deterministic and non-decreasing in ``u``.

    Parameters
    ----------
    u : array_like
        Probabilities in [0, 1], clamped into :func:`unit_interval` (``[tiny, 1 - eps/2]``):
        at 0 (or a subnormal, which XLA flushes to 0) and 1 the quantile would be an
        infinite bound.
    a, b : array_like
        Bounds with ``a <= b``; ``a`` may be ``-inf`` and ``b`` ``+inf``.

    Returns
    -------
    jax.Array
        The quantile, in ``[a, b]`` and finite, broadcast shape of ``u, a, b``.
    """
    dtype = _float_dtype(u, a, b)
    u_min, u_max = unit_interval(dtype)
    u = jnp.clip(jnp.asarray(u, dtype), u_min, u_max)
    a = jnp.asarray(a, dtype)
    b = jnp.asarray(b, dtype)
    log_z = log_mass(a, b)
    # Target p = Phi(a) + u Z and its complement q = 1 - p = Phi(-b) + (1 - u) Z, both
    # in log space.  Invert whichever is below 1/2: a small probability keeps its
    # relative precision (p near 1 would not), which is the reflection by symmetry for
    # an interval in the upper half and the right choice on each side of a straddling
    # interval's median.
    log_p = jnp.logaddexp(_log_ndtr(a), jnp.log(u) + log_z)
    log_q = jnp.logaddexp(_log_ndtr(-b), _log1m(u) + log_z)
    lower = log_p < _LOG_HALF
    # log_ndtri(log_q) is the quantile of -z: one inversion serves both cases.
    x = log_ndtri(jnp.where(lower, log_p, log_q))
    x = jnp.where(lower, x, -x)
    # Rounding can put the quantile a few ulp outside a bound.
    return jnp.clip(x, a, b)


def _sample_std_bulk(u, a, b):
    """The inverse CDF of :func:`sample_std` in probability space, and where it is accurate.

    Reflected so that the interval's nearer end lies in the lower half (``a + b <= 0``):
    ``p = Phi(a) + u Z``, ``q = Phi(-b) + (1 - u) Z`` and the smaller one is inverted, as
    in :func:`sample_std`.  Accurate (a few ulp of the probabilities, hence of the
    quantile) when neither the interval's mass nor its nearer CDF value is small:
    ``Phi(b) >= 1e-6`` after the reflection and ``Z >= 1e-2 Phi(b)`` (no cancellation in
    ``Phi(b) - Phi(a)``), and when the probability inverted is at least
    ``_BULK_MIN_P``.  Returns the quantile and that mask."""
    flip = a + b > 0
    lo, hi = jnp.where(flip, -b, a), jnp.where(flip, -a, b)
    uu = jnp.where(flip, 1.0 - u, u)
    pa, pb = _ndtr(lo), _ndtr(hi)
    z = pb - pa
    p = pa + uu * z
    q = _ndtr(-hi) + (1.0 - uu) * z
    lower = p < 0.5
    # u Z (or (1 - u) Z) near the smallest normal float loses its precision, and flushes
    # to 0 below it (u = tiny on a one-sided interval: p = 0, ndtri(0) = -inf); such u
    # go to the log-space inverse, which takes log(u) instead.
    ok = (pb >= 1e-6) & (z >= 1e-2 * pb) & (jnp.where(lower, p, q) >= _BULK_MIN_P)
    x = jnp.where(lower, ndtri(jnp.where(lower, p, 0.5)), -ndtri(jnp.where(lower, 0.5, q)))
    x = jnp.where(flip, -x, x)
    return jnp.clip(x, a, b), ok


#: the smallest probability inverted in probability space.  Far above the smallest normal
#: float of float32 (1.2e-38); far below what a uniform other than the generator's
#: smallest value gives (u >= 2^-23 in float32, 2^-52 in float64, times Z >= 1e-8): only
#: u = tiny and the like leave the probability-space path.
_BULK_MIN_P = 1e-30


def _ndtr(x):
    """``Phi(x)`` from ``erfc`` (relatively accurate for negative x)."""
    return 0.5 * erfc(-x * _SQRT_HALF)


#: the share of the draws that get the log-space inverse CDF without recomputing all of
#: them in log space (ratings far from their interval are rare once the chains run)
_TAIL_SHARE = 1 / 16


def _sample_std_fast(u, a, b):
    """:func:`sample_std` at the cost of a probability-space inverse CDF for most
    entries: the entries where :func:`_sample_std_bulk` is not accurate (far tails,
    narrow intervals) are gathered into a buffer of ``_TAIL_SHARE`` of the entries and
    inverted in log space; when there are more of them, every entry is (a ``lax.cond``).
    Both are exact inverse CDFs of the same uniform, so the draw is the same up to
    rounding."""
    u, a, b = jnp.broadcast_arrays(u, a, b)
    shape = u.shape
    u, a, b = u.reshape(-1), a.reshape(-1), b.reshape(-1)
    n = u.shape[0]
    x, ok = _sample_std_bulk(u, a, b)
    B = max(1, int(n * _TAIL_SHARE))
    if n <= 64 or B >= n:
        return jnp.where(ok, x, sample_std(u, a, b)).reshape(shape)

    def some_tail(x):
        (idx,) = jnp.nonzero(~ok, size=B, fill_value=n)  # out-of-range fill: dropped below
        safe = jnp.minimum(idx, n - 1)
        t = sample_std(u[safe], a[safe], b[safe])
        return x.at[idx].set(t, mode="drop")

    def all_tail(x):
        return jnp.where(ok, x, sample_std(u, a, b))

    return jax.lax.cond(jnp.sum(~ok) <= B, some_tail, all_tail, x).reshape(shape)


@functools.partial(jax.jit, static_argnames="dtype")
def sample(
    key: jax.Array,
    mean: jax.typing.ArrayLike,
    lo: jax.typing.ArrayLike,
    hi: jax.typing.ArrayLike,
    dtype: jax.typing.DTypeLike | None = None,
) -> jax.Array:
    """Draw ``z ~ N(mean, 1)`` truncated to ``[lo, hi]`` (Albert & Chib augmentation).

    Parameters
    ----------
    key : jax.Array
        PRNG key.
    mean, lo, hi : array_like
        Location and bounds, broadcast together (``lo`` may be ``-inf``, ``hi``
        ``+inf``); ``lo < hi``.
    dtype : dtype, optional
        Floating dtype of the draws; default: that of ``mean, lo, hi``.

    Returns
    -------
    jax.Array
        Draws of the broadcast shape, finite and inside ``[lo, hi]`` for finite ``mean``.
    """
    dtype = _float_dtype(mean, lo, hi) if dtype is None else jnp.dtype(dtype)
    mean = jnp.asarray(mean, dtype)
    lo = jnp.asarray(lo, dtype)
    hi = jnp.asarray(hi, dtype)
    shape = jnp.broadcast_shapes(mean.shape, lo.shape, hi.shape)
    return sample_uniform(uniform(key, shape, dtype), mean, lo, hi)


def uniform(key: jax.Array, shape: tuple[int, ...], dtype: jax.typing.DTypeLike) -> jax.Array:
    """The uniforms of :func:`sample`: ``jax.random.uniform`` on ``[tiny, 1)``.

    Its values run from ``finfo(dtype).tiny`` (all random bits zero) to ``1 - eps``
    (``eps = 2^-23`` in float32, ``2^-52`` in float64); :func:`sample_uniform` is finite
    and inside its interval at both ends (``tests/likelihoods/test_random_extremes.py``).
    """
    dtype = jnp.dtype(dtype)
    return _rng.uniform(key, shape, dtype, minval=jnp.finfo(dtype).tiny, maxval=1.0)


def unit_interval(dtype: jax.typing.DTypeLike) -> tuple[float, float]:
    """``(tiny, 1 - eps/2)``: the smallest positive normal float and the largest float
    below 1 of ``dtype``, the range :func:`sample_uniform` clamps ``u`` into."""
    fi = jnp.finfo(dtype)
    return float(fi.tiny), float(1.0 - fi.epsneg)


@jax.jit
def sample_uniform(
    u: jax.typing.ArrayLike,
    mean: jax.typing.ArrayLike,
    lo: jax.typing.ArrayLike,
    hi: jax.typing.ArrayLike,
) -> jax.Array:
    """The draw of :func:`sample` from given uniforms ``u`` in (0, 1): ``mean`` plus the
    inverse CDF of the standard normal truncated to ``[lo - mean, hi - mean]`` at ``u``
    (in probability space for most entries, in log space for the far tails, narrow
    intervals and extreme ``u``), clipped into ``[lo, hi]``.  Call it outside ``vmap``:
    under ``vmap`` its ``lax.cond`` would evaluate the log-space inverse for every entry.

    ``u`` is clamped into :func:`unit_interval` (``[tiny, 1 - eps/2]``), so the draw is
    finite for every ``u`` in ``[0, 1]``: 0, a subnormal (which XLA flushes to 0) or 1
    would otherwise give an infinite bound.  :func:`uniform` never returns those, so its
    draws are unchanged."""
    dtype = _float_dtype(u, mean, lo, hi)
    u, mean, lo, hi = (jnp.asarray(x, dtype) for x in (u, mean, lo, hi))
    u_min, u_max = unit_interval(dtype)
    u = jnp.clip(u, u_min, u_max)
    z = mean + _sample_std_fast(u, lo - mean, hi - mean)
    # mean + x can round outside [lo, hi] when |mean| >> |x|.
    return jnp.clip(z, lo, hi)


def _quadrature(a: jax.Array, b: jax.Array):
    """Moments of N(0, 1) on ``[a, b]`` relative to ``c``, the point of [a, b] nearest 0.

    Returns ``(c, log_i, m1, var, m_sq)`` with ``I = int_a^b exp(-(z^2 - c^2)/2) dz``
    (so ``log Z = log phi(c) + log I``), ``m1 = E[z - c]``, ``var = Var[z]`` and
    ``m_sq = E[z^2 - c^2]``.

    Gauss-Legendre on the variable ``t = z - c`` avoids every cancellation of the closed
    forms: far in a tail ``E[z] ~ c`` and ``Var`` is ~1/c^2 or ~(b - a)^2/12, which the
    closed forms get as differences of O(c) or O(1) terms; here they come from sums of
    positive terms (the variance is positive by construction).
    """
    c = jnp.clip(0.0, a, b)
    # Integrate only where (z^2 - c^2)/2 <= _CUT: |z| <= r.  Beyond, the density is below
    # e^-_CUT of its peak and decays at least as fast, so the neglected mass is negligible.
    r = jnp.sqrt(c * c + 2.0 * _CUT)
    lo = jnp.maximum(a, -r) - c
    hi = jnp.minimum(b, r) - c
    half = 0.5 * (hi - lo)
    nodes = jnp.asarray(_GL_NODES, a.dtype)
    weights = jnp.asarray(_GL_WEIGHTS, a.dtype)
    t = (lo + half)[..., None] + half[..., None] * nodes  # shape (..., n)
    # exp(-(z^2 - c^2)/2) with z^2 - c^2 = t (t + 2c), no cancellation.
    w = weights * jnp.exp(-0.5 * t * (t + 2.0 * c[..., None]))
    total = jnp.sum(w, axis=-1)
    m1 = jnp.sum(w * t, axis=-1) / total
    dev = t - m1[..., None]
    var = jnp.sum(w * dev * dev, axis=-1) / total
    m_sq = jnp.sum(w * t * (t + 2.0 * c[..., None]), axis=-1) / total
    log_i = jnp.log(total * half)
    return c, log_i, m1, var, m_sq


def _standardize(mean, lo, hi):
    dtype = _float_dtype(mean, lo, hi)
    mean = jnp.asarray(mean, dtype)
    a = jnp.asarray(lo, dtype) - mean
    b = jnp.asarray(hi, dtype) - mean
    a, b = jnp.broadcast_arrays(a, b)
    return jnp.broadcast_to(mean, a.shape), a, b


@jax.jit
def moments(
    mean: jax.typing.ArrayLike, lo: jax.typing.ArrayLike, hi: jax.typing.ArrayLike
) -> tuple[jax.Array, jax.Array]:
    """Mean and variance of ``N(mean, 1)`` truncated to ``[lo, hi]``.

    Parameters
    ----------
    mean, lo, hi : array_like
        Location and bounds (broadcast together); ``lo < hi``, ``lo`` may be ``-inf``,
        ``hi`` ``+inf``.

    Returns
    -------
    (jax.Array, jax.Array)
        ``E[z]`` and ``Var[z]``; the variance is in ``(0, 1]`` even 40 standard
        deviations out in a tail (where it is ~1/a^2) or for narrow intervals (~width^2/12).
    """
    mean, a, b = _standardize(mean, lo, hi)
    c, _, m1, var, _ = _quadrature(a, b)
    # The truncated variance is < 1 for any interval; the clip removes round-off above.
    return mean + (c + m1), jnp.clip(var, jnp.finfo(var.dtype).tiny, 1.0)


@jax.jit
def entropy(
    mean: jax.typing.ArrayLike, lo: jax.typing.ArrayLike, hi: jax.typing.ArrayLike
) -> jax.Array:
    """Differential entropy of ``N(mean, 1)`` truncated to ``[lo, hi]``.

    ``H = log(sqrt(2 pi e) Z) + (a phi(a) - b phi(b)) / (2 Z)`` with ``a = lo - mean``,
    ``b = hi - mean``, ``Z = Phi(b) - Phi(a)``.  Computed as
    ``H = E[-log(phi(z)/Z)] = log I + E[z^2 - c^2]/2`` (``c`` the point of [a, b] nearest
    0, ``I = Z/phi(c)``): in the tails ``log Z`` and ``E[z^2]/2`` are each ~c^2/2 and
    cancel, which this form avoids.

    Parameters
    ----------
    mean, lo, hi : array_like
        As in :func:`moments`.

    Returns
    -------
    jax.Array
        The entropy (can be very negative for narrow intervals: ~log(width)).
    """
    _, a, b = _standardize(mean, lo, hi)
    _, log_i, _, _, m_sq = _quadrature(a, b)
    return log_i + 0.5 * m_sq
