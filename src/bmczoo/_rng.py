"""Random draws of several dimensions that compile quickly on a CPU.

XLA's CPU backend spends seconds optimising the threefry program of a draw of shape
``(m, K)`` (more under ``vmap`` over chains) and a tenth of that for the same number of
values drawn as one flat vector.  The flat draw reshaped is the same array (the bits are
generated for the flattened index in both cases), so these wrappers change compile time
only: ``normal(key, (m, K))`` equals ``jax.random.normal(key, (m, K))`` bit for bit.
Likewise :func:`draw_together` draws a function's small gamma and normal arrays in one call
per kind instead of one per call site, with the same values.

The gamma variates come from ``jax.random.gamma`` (``"jax"``) or from
:func:`standard_gamma` (``"one-hash"``: the same law, a third of the compile time, other
values), as the sweep being traced selects (:func:`using_gamma_sampler`; the Gibbs
sweep's option ``gamma_sampler`` defaults to ``"one-hash"``, draws outside a sweep use
``"jax"``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "normal",
    "normals_together",
    "uniform",
    "gamma",
    "inverse_gamma",
    "draw_together",
    "standard_gamma",
    "GAMMA_SAMPLERS",
    "using_gamma_sampler",
]


def normal(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, drawn flat and reshaped; inside a function
    wrapped by :func:`draw_together`, a small draw is made with the function's others."""
    shape = tuple(shape)
    if _TAPE.mode is not None and math.prod(shape) <= TOGETHER_MAX:
        return _TAPE.request("normal", key, jnp.zeros(shape, dtype))
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def uniform(
    key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32, minval=0.0, maxval=1.0
) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, drawn flat and reshaped."""
    shape = tuple(shape)
    return jax.random.uniform(
        key, (math.prod(shape),), dtype, minval=minval, maxval=maxval
    ).reshape(shape)


def normals_together(requests: list[tuple[jax.Array, int]], dtype) -> list[jax.Array]:
    """Standard normals for each ``(keys, n)`` of ``requests``: an array ``(len(keys), n)``
    equal bit for bit to ``jax.vmap(lambda k: jax.random.normal(k, (n,), dtype))(keys)``,
    all from one threefry hash.

    Each request is a call site of its own otherwise, and XLA's CPU backend compiles the
    hashing loop of each separately (about a tenth of a second each).  The values are those
    of JAX's partitionable threefry generator (its default), reproduced here: the hash of
    each key with the counters ``0..n-1``, then JAX's conversion of bits to a uniform on
    ``(-1, 1)`` and to a normal by ``sqrt(2) erfinv``.  With another generator the requests
    are drawn one by one (tests check the equality).
    """
    if not requests or not all(_partitionable(k) for k, _ in requests):
        return [jax.vmap(lambda k, n=n: jax.random.normal(k, (n,), dtype))(k) for k, n in requests]
    from jax.extend.random import threefry2x32_p

    dtype = jnp.dtype(dtype)
    k1, k2, counts, sizes = [], [], [], []
    for keys, n in requests:
        data = jax.random.key_data(keys).reshape(-1, 2)
        C = data.shape[0]
        k1.append(jnp.broadcast_to(data[:, :1], (C, n)).reshape(-1))
        k2.append(jnp.broadcast_to(data[:, 1:], (C, n)).reshape(-1))
        counts.append(jnp.broadcast_to(lax.iota(np.uint32, n)[None], (C, n)).reshape(-1))
        sizes.append((C, n))
    lo = jnp.concatenate(counts)
    bits1, bits2 = threefry2x32_p.bind(
        jnp.concatenate(k1), jnp.concatenate(k2), jnp.zeros_like(lo), lo
    )
    z = np.array(np.sqrt(2), dtype) * lax.erf_inv(_symmetric_unit(bits1, bits2, dtype))
    out, at = [], 0
    for C, n in sizes:
        out.append(z[at : at + C * n].reshape(C, n))
        at += C * n
    return out


def _unit(bits1, bits2, dtype) -> jax.Array:
    """JAX's conversion of a threefry hash's two words to uniforms on ``[0, 1)`` of
    ``dtype`` (their xor for 32-bit floats, both words for 64-bit ones)."""
    dtype = jnp.dtype(dtype)
    finfo = jnp.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    if nbits == 32:
        bits = bits1 ^ bits2
    else:
        wide = np.uint64
        bits = (bits1.astype(wide) << wide(32)) | bits2.astype(wide)
    uint = bits.dtype
    one = np.array(1.0, dtype).view(uint)
    floats = lax.bitcast_convert_type((bits >> uint.type(nbits - nmant)) | one, dtype)
    return floats - np.array(1.0, dtype)


def _symmetric_unit(bits1, bits2, dtype) -> jax.Array:
    """``jax.random.uniform`` on ``[nextafter(-1, 0), 1)`` from a hash's words, as
    ``jax.random.normal`` draws it before its ``sqrt(2) erfinv``."""
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    width = np.array(1.0, dtype) - low
    return lax.max(jnp.asarray(low), _unit(bits1, bits2, dtype) * width + low)


#: the most rounds of :func:`standard_gamma`: a value not accepted by then (probability
#: below ``0.05 ** 64`` for a finite shape) comes out NaN, a non-finite draw the sampler
#: reports, rather than a loop that could run forever on a non-finite shape
GAMMA_MAX_ROUNDS = 64


def standard_gamma(key: jax.Array, a: jax.Array) -> jax.Array:
    """``Gamma(a, 1)`` variates, one per value of the shape parameters ``a`` (of a floating
    dtype), by Marsaglia and Tsang's method with one threefry hash per round.

    ``jax.random.gamma`` draws the same law with a per-value rejection loop whose rounds
    split keys and hash several times in sequence; XLA's CPU backend compiles that loop in
    about a second per call site, this one in a third of it.  Round ``r`` hashes the key
    with the counters ``(r, 3 i + j)``, ``j < 3``, for value ``i``: a normal and a uniform
    for the proposal and its acceptance and, for ``a < 1``, the uniform ``U`` of
    ``Gamma(a) = Gamma(a + 1) U^(1/a)``.  A value's draw depends only on the key, its index
    and its shape, not on how many values are drawn with it (so
    :func:`draw_together` gives each request the values of its own call).  A shape that is
    not positive and finite gives NaN.  Keys of another generator than JAX's
    partitionable threefry are drawn by ``jax.random.gamma``.
    """
    a = jnp.asarray(a)
    if not _partitionable(key):
        return jax.random.gamma(key, a, a.shape, dtype=a.dtype)
    if a.size == 0:
        return jnp.zeros(a.shape, a.dtype)
    return _standard_gamma_rows(_key_words(key)[None], a.reshape(1, -1)).reshape(a.shape)


def _key_words(keys: jax.Array) -> jax.Array:
    """The two uint32 words of each key (typed or raw), shaped ``keys.shape + (2,)`` for
    raw keys ``(..., 2)``."""
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(keys)
    return keys


def _standard_gamma_rows(words: jax.Array, a: jax.Array) -> jax.Array:
    """:func:`standard_gamma` of each row: ``words`` (R, 2) the keys' words, ``a`` (R, n) the
    shape parameters; row ``r`` equals ``standard_gamma(key r, a[r])`` bit for bit.

    The rows are one flat problem (each value hashed with its row's key), not a ``vmap``
    over the rows: the rejection loop is traced once, without batching it.  A row that is
    done keeps its values while the others go on (they are no longer NaN), and the rounds
    run in step, so the values are those of one call per row.
    """
    from jax.extend.random import threefry2x32_p

    dtype = a.dtype
    R, n = a.shape
    k1 = jnp.broadcast_to(words[:, :1], (R, 3 * n)).reshape(-1)
    k2 = jnp.broadcast_to(words[:, 1:], (R, 3 * n)).reshape(-1)
    counters = jnp.broadcast_to(lax.iota(np.uint32, 3 * n)[None], (R, 3 * n)).reshape(-1)
    a = a.reshape(-1)
    valid = jnp.isfinite(a) & (a > 0)
    boost = a < 1
    d = jnp.where(boost, a + 1, a) - np.array(1 / 3, dtype)
    d = jnp.where(valid, d, np.array(1.0, dtype))
    c = lax.rsqrt(9 * d)

    def round_(carry):
        r, value = carry
        hi = jnp.broadcast_to(r.astype(np.uint32), counters.shape)
        w1, w2 = (b.reshape(R * n, 3) for b in threefry2x32_p.bind(k1, k2, hi, counters))
        x = np.array(np.sqrt(2), dtype) * lax.erf_inv(_symmetric_unit(w1[:, 0], w2[:, 0], dtype))
        u = _unit(w1, w2, dtype)
        y = c * x
        accept = (y > -1) & (jnp.log1p(-u[:, 1]) < 3 * d * _log1p_remainder(y))
        t = 1 + y
        g = d * (t * t * t)
        # Gamma(a) = Gamma(a + 1) U^(1/a), U on (0, 1]
        g = jnp.where(boost, g * jnp.exp(jnp.log1p(-u[:, 2]) / a), g)
        # the decision is used once: a value is drawn when it is no longer NaN (an
        # elementwise test computed twice could round differently in two fused kernels)
        return r + 1, jnp.where(valid & jnp.isnan(value) & accept, g, value)

    def more(carry):
        r, value = carry
        return (r < GAMMA_MAX_ROUNDS) & jnp.any(valid & jnp.isnan(value))

    start = (jnp.int32(0), jnp.full((R * n,), jnp.nan, dtype))
    _, value = lax.while_loop(more, round_, start)
    return value.reshape(R, n)


def _log1p_remainder(y: jax.Array) -> jax.Array:
    """``log1p(y) - y + y^2/2 - y^3/3`` for ``y > -1``, without the cancellation of that sum
    near 0 (where it is ``-y^4/4 + ...``): Marsaglia and Tsang's acceptance test
    ``log U < x^2/2 + d - d v + d log v`` with ``v = (1 + y)^3``, ``y = c x``,
    ``c^2 d = 1/9`` is ``log U < 3 d (log1p(y) - y + y^2/2 - y^3/3)``; written the first
    way its terms of size ``d`` cancel to a few thousandths and round to different
    decisions for shapes in the thousands (learned noise, Wishart degrees of freedom)."""
    small = jnp.abs(y) < 0.1
    ys = jnp.where(small, y, 0)
    series = jnp.zeros_like(y)
    for k in range(20, 3, -1):  # Horner: sum_{k>=4} (-1)^(k+1) y^(k-4) / k, to 1e-17 at |y| < 0.1
        series = series * ys + (1.0 if k % 2 else -1.0) / k
    yl = jnp.where(small, 0.5, y)
    direct = jnp.log1p(yl) - yl + yl * yl / 2 - yl * yl * yl / 3
    return jnp.where(small, series * ys**4, direct)


#: the gamma samplers: ``"jax"`` (``jax.random.gamma``) and ``"one-hash"`` (:func:`standard_gamma`)
GAMMA_SAMPLERS = ("jax", "one-hash")


class _Sampler(threading.local):
    name = "jax"


_SAMPLER = _Sampler()


@contextlib.contextmanager
def using_gamma_sampler(name: str):
    """The gamma sampler (one of :data:`GAMMA_SAMPLERS`) of the draws traced in the block
    (:func:`gamma`, :func:`inverse_gamma` and :func:`draw_together`'s gamma draws)."""
    if name not in GAMMA_SAMPLERS:
        raise ValueError(f"gamma_sampler must be one of {GAMMA_SAMPLERS}, got {name!r}")
    before, _SAMPLER.name = _SAMPLER.name, name
    try:
        yield
    finally:
        _SAMPLER.name = before


def _standard_gamma(key: jax.Array, a: jax.Array) -> jax.Array:
    """``Gamma(a, 1)`` variates of the selected sampler, one per value of ``a``."""
    if _SAMPLER.name == "one-hash":
        return standard_gamma(key, a)
    return jax.random.gamma(key, a, a.shape, dtype=a.dtype)


# ------------------------------------------------------------------------ draws together
# XLA compiles each random call site on a CPU separately: a ``jax.random.gamma`` site (a
# vectorised rejection loop) in about a second, a normal draw's threefry hashing in a tenth
# of that.  The blocks of a sweep after the factors draw a few small arrays each (the
# Wishart's Bartlett vector and normals of each factor, a learned noise precision, the bias
# variances, a link's precision) whose parameters do not depend on each other's draws, so
# :func:`draw_together` makes one call per kind instead of one per site.  With the threefry
# generator in its partitionable form (jax's default), the variates a key gives for ``k``
# values are the first ``k`` it gives for ``n >= k``: the values are those of one call per
# site.


class _Tape(threading.local):
    """The requests of a function being traced (``record``) or their values (``replay``),
    per kind of draw."""

    def __init__(self):
        self.mode = None
        self.items = {"gamma": [], "normal": []}

    def request(self, kind: str, key, params):
        """A draw of ``params.shape``: recorded (a NaN placeholder returned) or replayed."""
        if self.mode == "record":
            self.items[kind].append((key, params))
            # NaN placeholders: a parameter computed from an earlier draw of the same function
            # comes out NaN (a non-finite draw the sampler reports), never a silent error
            return jnp.full(params.shape, jnp.nan, params.dtype)
        value = self.items[kind].pop(0)
        if value.shape != params.shape or value.dtype != params.dtype:
            raise RuntimeError("draw_together: the replayed calls differ from the recorded ones")
        return value


_TAPE = _Tape()

#: make the draws of :func:`draw_together` functions together (tests compare both ways)
TOGETHER = True
#: the largest draw (number of values) made together; larger ones are drawn at their site
#: (the shared draw pads every request to the longest)
TOGETHER_MAX = 4096


def gamma(key: jax.Array, a, shape: tuple[int, ...] = (), dtype=jnp.float32) -> jax.Array:
    """``Gamma(a, 1)`` variates of ``shape`` from the selected sampler
    (:func:`using_gamma_sampler`; outside it ``jax.random.gamma(key, a, shape, dtype)``);
    inside a function wrapped by :func:`draw_together`, drawn with the function's other
    gamma variates (the same values)."""
    a = jnp.broadcast_to(jnp.asarray(a, dtype), tuple(shape))
    if _TAPE.mode is not None and a.size <= TOGETHER_MAX:
        return _TAPE.request("gamma", key, a)
    return _standard_gamma(key, a)


def inverse_gamma(key: jax.Array, shape, scale, dtype=jnp.float32) -> jax.Array:
    """A variance ``~ InvGamma(shape, scale)``, one per value of ``scale`` (through
    :func:`gamma`), kept in the positive normal floats: a gamma variate at its extreme must
    not make a variance 0 or infinite (an infinite or zero precision)."""
    scale = jnp.asarray(scale, dtype)
    g = gamma(key, jnp.asarray(shape, dtype), jnp.shape(scale), dtype=dtype)
    fi = jnp.finfo(dtype)
    return jnp.clip(scale / g, fi.tiny, fi.max)


def _partitionable(key) -> bool:
    """Whether a key's first ``k`` values are the same whatever the number drawn."""
    if not jax.config.jax_threefry_partitionable:
        return False
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return "threefry" in str(jax.random.key_impl(key))
    return jax.config.jax_default_prng_impl == "threefry2x32"


def _draw(kind: str, keys, params):
    """One call for the requests' keys (partitionable, as :func:`draw_together` checks):
    gamma variates of shape parameters ``params`` (R, n), or ``n`` standard normals per
    key.  The one-hash gammas and the normals are one flat draw (batching a traced loop
    with ``vmap`` costs Python time); ``jax.random.gamma`` is vmapped."""
    if kind == "gamma":
        if _SAMPLER.name == "one-hash":
            return _standard_gamma_rows(_key_words(keys), params)
        return jax.vmap(_standard_gamma)(keys, params)
    return normals_together([(keys, params.shape[1])], params.dtype)[0]


def _draw_kind(kind: str, items: list) -> list:
    """The values of each ``(key, params)`` request of one kind from one call: the requests
    padded to the longest (the padding, shape parameter one, is drawn and dropped); requests
    of another dtype than the first's, or of no value, at their own sites."""
    sized = [i for i, (_, p) in enumerate(items) if p.size > 0]
    if not sized:
        return [jnp.zeros(p.shape, p.dtype) for _, p in items]
    dtype = items[sized[0]][1].dtype
    group = [i for i in sized if items[i][1].dtype == dtype]
    n = max(items[i][1].size for i in group)
    keys = jnp.stack([items[i][0] for i in group])
    params = jnp.stack(
        [
            jnp.pad(items[i][1].reshape(-1), (0, n - items[i][1].size), constant_values=1.0)
            for i in group
        ]
    )
    drawn = _draw(kind, keys, params)
    rows = {i: row for row, i in enumerate(group)}
    # only the requests left out of the shared call are drawn at their site (tracing a
    # site's draw costs Python time even where its value is dropped)
    return [
        drawn[rows[i], : p.size].reshape(p.shape) if i in rows else _at_site(kind, k, p)
        for i, (k, p) in enumerate(items)
    ]


def _at_site(kind: str, key, params):
    if params.size == 0:
        return jnp.zeros(params.shape, params.dtype)
    if kind == "gamma":
        return _standard_gamma(key, params)
    return jax.random.normal(key, (params.size,), params.dtype).reshape(params.shape)


@contextlib.contextmanager
def _taped(mode: str, items: dict):
    _TAPE.mode, _TAPE.items = mode, items
    try:
        yield items
    finally:
        _TAPE.mode, _TAPE.items = None, {"gamma": [], "normal": []}


def draw_together(fn):
    """``fn`` with its small gamma and normal draws (through :func:`gamma` and
    :func:`normal`) made in one call per kind.

    ``fn`` is traced twice: once to record the keys and parameters of its draws (its results
    then are discarded: dead code the compiler removes), once with the values drawn
    together.  They equal the values of one call per site (compiled, up to the last bit of a
    gamma shape parameter below one); the parameters must not depend on the function's own
    draws.  Without the partitionable threefry generator, or inside another such function,
    ``fn`` runs as it is.
    """

    @functools.wraps(fn)
    def wrapped(*args):
        if not TOGETHER or _TAPE.mode is not None:
            return fn(*args)
        with _taped("record", {"gamma": [], "normal": []}) as items:
            fn(*args)
        requests = [r for kind in items.values() for r in kind]
        if len(requests) < 2 or not all(_partitionable(k) for k, _ in requests):
            return fn(*args)
        values = {kind: _draw_kind(kind, reqs) for kind, reqs in items.items()}
        with _taped("replay", values) as left:
            out = fn(*args)
            if any(left.values()):
                raise RuntimeError("draw_together: fewer draws replayed than recorded")
        return out

    return wrapped
