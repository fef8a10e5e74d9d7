"""Which sweeps an MCMC run keeps: the one definition of NumPyro's thinning alignment.

NumPyro's ``fori_collect`` keeps, after ``num_warmup`` warm-up sweeps, every
``thinning``-th of the ``num_samples`` sweeps *ending with the last one*: sweeps
``num_warmup + r + thinning * q`` for ``q = 1 .. num_samples // thinning`` with
``r = num_samples % thinning``.  The Gibbs kernel (jitted, on traced iteration numbers),
the checkpointing driver (host integers) and the ArviZ conversion all use these.
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_kept", "num_kept", "kept_iterations"]


def is_kept(iteration, num_warmup: int, num_samples: int, thinning: int):
    """Whether the draw after ``iteration`` sweeps (1-based) is kept; works on Python
    ints and on (traced) JAX integers.  ``num_samples = 0`` means unknown: every
    ``thinning``-th sweep after warm-up."""
    t = iteration - num_warmup
    r = num_samples % thinning if num_samples else 0
    return (t > r) & ((t - r) % thinning == 0)


def num_kept(iteration: int, num_warmup: int, num_samples: int, thinning: int) -> int:
    """How many draws are kept after ``iteration`` sweeps."""
    t = iteration - num_warmup - num_samples % thinning
    return max(t, 0) // thinning


def kept_iterations(num_warmup: int, num_samples: int, thinning: int) -> np.ndarray:
    """1-based sweep numbers of the kept draws (an array of ``num_samples // thinning``)."""
    q = np.arange(1, num_samples // thinning + 1)
    return num_warmup + num_samples % thinning + thinning * q
