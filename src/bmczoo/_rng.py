"""Random draws of several dimensions that compile quickly on a CPU.

XLA's CPU backend spends seconds optimising the threefry program of a draw of shape
``(m, K)`` (more under ``vmap`` over chains) and a tenth of that for the same number of
values drawn as one flat vector.  The flat draw reshaped is the same array (the bits are
generated for the flattened index in both cases), so these wrappers change compile time
only: ``normal(key, (m, K))`` equals ``jax.random.normal(key, (m, K))`` bit for bit.
Likewise :func:`gamma_batched` draws a function's gamma variates in one call instead of
one per call site, with the same values.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading

import jax
import jax.numpy as jnp

__all__ = ["normal", "uniform", "gamma", "gamma_batched"]


def normal(key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, drawn flat and reshaped."""
    shape = tuple(shape)
    return jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)


def uniform(
    key: jax.Array, shape: tuple[int, ...], dtype=jnp.float32, minval=0.0, maxval=1.0
) -> jax.Array:
    """``jax.random.uniform(key, shape, dtype, minval, maxval)``, drawn flat and reshaped."""
    shape = tuple(shape)
    return jax.random.uniform(
        key, (math.prod(shape),), dtype, minval=minval, maxval=maxval
    ).reshape(shape)


# ---------------------------------------------------------------------------- gamma draws
# XLA compiles each ``jax.random.gamma`` call site (a vmapped rejection loop) in about half a
# second on a CPU.  A sweep's gamma variates (the Wishart's Bartlett vector of each factor,
# a learned noise precision, the bias variances, a link's precision) have shape parameters
# that do not depend on each other, so :func:`gamma_batched` draws them in ONE call.  With
# the threefry generator in its partitionable form (jax's default), ``split(key, n)[:k]``
# equals ``split(key, k)``, hence a site's variates are the first ``k`` of a draw of
# ``n >= k`` from its key: the same values as one call per site.


class _Tape(threading.local):
    """The gamma requests of a function being traced (``record``) or their values (``replay``)."""

    def __init__(self):
        self.mode = None
        self.items = []


_TAPE = _Tape()

#: draw the gamma variates of :func:`gamma_batched` functions together (tests compare both)
BATCH_GAMMA = True


def gamma(key: jax.Array, a, shape: tuple[int, ...] = (), dtype=jnp.float32) -> jax.Array:
    """``jax.random.gamma(key, a, shape, dtype)``; inside a function wrapped by
    :func:`gamma_batched`, drawn together with that function's other gamma variates (the
    same values)."""
    shape = tuple(shape)
    if _TAPE.mode == "record":
        _TAPE.items.append((key, jnp.broadcast_to(jnp.asarray(a, dtype), shape)))
        # NaN placeholders: an ``a`` computed from an earlier variate of the same function
        # would come out NaN (a non-finite draw the sampler reports), never a silent error
        return jnp.full(shape, jnp.nan, dtype)
    if _TAPE.mode == "replay":
        value = _TAPE.items.pop(0)
        if value.shape != shape or value.dtype != jnp.dtype(dtype):
            raise RuntimeError("gamma_batched: the replayed calls differ from the recorded ones")
        return value
    return jax.random.gamma(key, a, shape, dtype=dtype)


def _partitionable(key) -> bool:
    """Whether ``split(key, n)[:k] == split(key, k)`` holds for this key's generator."""
    if not jax.config.jax_threefry_partitionable:
        return False
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return "threefry" in str(jax.random.key_impl(key))
    return jax.config.jax_default_prng_impl == "threefry2x32"


def _draw_together(items: list) -> list:
    """The variates of each ``(key, a)`` request from one vmapped ``jax.random.gamma``: the
    shape parameters padded with ones to the longest request (the padding is drawn and
    dropped)."""
    n = max(a.size for _, a in items)
    dtype = items[0][1].dtype
    keys = jnp.stack([k for k, _ in items])
    alphas = jnp.stack(
        [jnp.pad(a.reshape(-1), (0, n - a.size), constant_values=1.0) for _, a in items]
    )
    g = jax.vmap(lambda k, a: jax.random.gamma(k, a, dtype=dtype))(keys, alphas)
    return [g[i, : a.size].reshape(a.shape) for i, (_, a) in enumerate(items)]


@contextlib.contextmanager
def _taped(mode: str, items: list):
    _TAPE.mode, _TAPE.items = mode, items
    try:
        yield items
    finally:
        _TAPE.mode, _TAPE.items = None, []


def gamma_batched(fn):
    """``fn`` with the gamma variates it draws through :func:`gamma` drawn in one call.

    ``fn`` is traced twice: once to record the keys and shape parameters of its
    :func:`gamma` calls (its results then are discarded: dead code the compiler removes),
    once with the variates drawn together.  The values equal those of one call per site
    bit for bit (the shape parameters must not depend on the function's own variates).
    Without the partitionable threefry generator, or inside another such function, ``fn``
    runs as it is.
    """

    @functools.wraps(fn)
    def wrapped(*args):
        if not BATCH_GAMMA or _TAPE.mode is not None:
            return fn(*args)
        with _taped("record", []) as items:
            fn(*args)
        sized = [i for i, (_, a) in enumerate(items) if a.size > 0]
        if len(sized) < 2 or not all(_partitionable(items[i][0]) for i in sized):
            return fn(*args)
        if len({items[i][1].dtype for i in sized}) > 1:
            return fn(*args)
        drawn = _draw_together([items[i] for i in sized])
        values = [jnp.zeros(a.shape, a.dtype) for _, a in items]
        for i, v in zip(sized, drawn):
            values[i] = v
        with _taped("replay", values) as left:
            out = fn(*args)
            if left:
                raise RuntimeError("gamma_batched: fewer gamma calls replayed than recorded")
        return out

    return wrapped
