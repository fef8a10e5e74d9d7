"""Random draws of several dimensions that compile quickly on a CPU.

XLA's CPU backend spends seconds optimising the threefry program of a draw of shape
``(m, K)`` (more under ``vmap`` over chains) and a tenth of that for the same number of
values drawn as one flat vector.  The flat draw reshaped is the same array (the bits are
generated for the flattened index in both cases), so these wrappers change compile time
only: ``normal(key, (m, K))`` equals ``jax.random.normal(key, (m, K))`` bit for bit.
Likewise :func:`draw_together` draws a function's small gamma and normal arrays in one call
per kind instead of one per call site, with the same values.
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

__all__ = ["normal", "normals_together", "uniform", "gamma", "inverse_gamma", "draw_together"]


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
    finfo = jnp.finfo(dtype)
    nbits, nmant = finfo.bits, finfo.nmant
    if nbits == 32:
        bits = bits1 ^ bits2
    else:
        wide = np.uint64
        bits = (bits1.astype(wide) << wide(32)) | bits2.astype(wide)
    uint = bits.dtype
    # jax.random.uniform on [nextafter(-1, 0), 1), then jax.random.normal's transform
    one = np.array(1.0, dtype).view(uint)
    floats = lax.bitcast_convert_type((bits >> uint.type(nbits - nmant)) | one, dtype)
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype), dtype=dtype)
    width = np.array(1.0, dtype) - low
    u = lax.max(jnp.asarray(low), (floats - np.array(1.0, dtype)) * width + low)
    z = np.array(np.sqrt(2), dtype) * lax.erf_inv(u)
    out, at = [], 0
    for C, n in sizes:
        out.append(z[at : at + C * n].reshape(C, n))
        at += C * n
    return out


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
    """``jax.random.gamma(key, a, shape, dtype)``; inside a function wrapped by
    :func:`draw_together`, drawn with the function's other gamma variates (the same values)."""
    shape = tuple(shape)
    if _TAPE.mode is not None and math.prod(shape) <= TOGETHER_MAX:
        return _TAPE.request("gamma", key, jnp.broadcast_to(jnp.asarray(a, dtype), shape))
    return jax.random.gamma(key, a, shape, dtype=dtype)


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
    """One vmapped call over the requests' keys: gamma variates of shape parameters
    ``params`` (R, n), or ``n`` standard normals per key."""
    if kind == "gamma":
        return jax.vmap(lambda k, a: jax.random.gamma(k, a, dtype=params.dtype))(keys, params)
    n = params.shape[1]
    return jax.vmap(lambda k: jax.random.normal(k, (n,), params.dtype))(keys)


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
    values = [_at_site(kind, k, p) for k, p in items]
    for row, i in enumerate(group):
        values[i] = drawn[row, : items[i][1].size].reshape(items[i][1].shape)
    return values


def _at_site(kind: str, key, params):
    if params.size == 0:
        return jnp.zeros(params.shape, params.dtype)
    if kind == "gamma":
        return jax.random.gamma(key, params, params.shape, dtype=params.dtype)
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
