"""One BLAS thread while bmczoo's compiled programs run on the CPU.

JAX's CPU factorisations and triangular solves (``lax.linalg.cholesky``,
``lax.linalg.triangular_solve``) call LAPACK and BLAS from the OpenBLAS library that
SciPy ships, and XLA already runs a sweep's batched factorisations over its own thread
pool.  OpenBLAS's threads on top of XLA's compete for the same cores: a single
``K x K`` triangular solve with ``K`` right-hand sides (the Normal-Wishart prior's
Bartlett step) wakes them and, inside a sweep that keeps XLA's workers busy, took about
20 ms per sweep at K = 32 on the MovieLens 1M shape, where it takes microseconds alone
(``benchmarks/bench_gibbs.py`` times the sweeps with and without this limit).  Each of
these calls solves its right-hand sides column by column in the same order with one
thread or several, so the draws are the same.

:func:`one_blas_thread` limits every BLAS library loaded in the process to one thread
(``threadpoolctl``) for the duration of a block and restores the previous limits after
it; :data:`LIMIT` turns it off.  On another backend than the CPU it does nothing.
"""

from __future__ import annotations

import contextlib

import jax

__all__ = ["LIMIT", "one_blas_thread"]

#: limit BLAS to one thread while bmczoo's programs run on the CPU (see the module's docstring)
LIMIT = True


@contextlib.contextmanager
def one_blas_thread():
    """Every loaded BLAS library at one thread in the block (the CPU backend only), the
    previous limits restored after it."""
    if not LIMIT or jax.default_backend() != "cpu":
        yield
        return
    from threadpoolctl import threadpool_limits

    try:
        # JAX's LAPACK kernels take their functions from SciPy's library when a program
        # is first lowered: loaded now, so that the limit reaches it
        import scipy.linalg.cython_lapack  # noqa: F401
    except ImportError:  # pragma: no cover - jax requires scipy
        pass
    with threadpool_limits(limits=1, user_api="blas"):
        yield
