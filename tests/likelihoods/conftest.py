"""Fixtures shared by the likelihood tests."""

import jax
import numpy as np
import pytest


@pytest.fixture(params=["float32", "float64"])
def dtype(request):
    """Run under float32 (default JAX) and float64 (x64 enabled for the test)."""
    if request.param == "float64":
        with jax.enable_x64(True):
            yield np.float64
    else:
        yield np.float32
