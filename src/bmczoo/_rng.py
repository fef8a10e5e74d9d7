"""Random draws of several dimensions that compile quickly on a CPU.

XLA's CPU backend spends seconds optimising the threefry program of a draw of shape
``(m, K)`` (more under ``vmap`` over chains) and a tenth of that for the same number of
values drawn as one flat vector.  The flat draw reshaped is the same array (the bits are
generated for the flattened index in both cases), so these wrappers change compile time
only: ``normal(key, (m, K))`` equals ``jax.random.normal(key, (m, K))`` bit for bit.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = ["normal", "uniform"]


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
