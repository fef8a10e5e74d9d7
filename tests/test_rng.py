"""bmczoo._rng draws equal jax.random's bit for bit (they only compile faster)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bmczoo import _rng


@pytest.mark.parametrize("shape", [(), (5,), (4, 7, 3), (0, 3), (2, 1, 10)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_flat_draws_equal_jax_random(shape, dtype):
    key = jax.random.key(11)
    with jax.enable_x64(dtype == jnp.float64):
        np.testing.assert_array_equal(
            _rng.normal(key, shape, dtype), jax.random.normal(key, shape, dtype)
        )
        tiny = jnp.finfo(dtype).tiny
        np.testing.assert_array_equal(
            _rng.uniform(key, shape, dtype, minval=tiny, maxval=1.0),
            jax.random.uniform(key, shape, dtype, minval=tiny, maxval=1.0),
        )
        # under vmap over a batch of keys, as the samplers draw one array per chain
        keys = jax.random.split(key, 3)
        np.testing.assert_array_equal(
            jax.vmap(lambda k: _rng.normal(k, shape, dtype))(keys),
            jax.vmap(lambda k: jax.random.normal(k, shape, dtype))(keys),
        )
