"""The hot path shared by the Gibbs sampler and VB: per-row Gaussian conditionals.

For every row ``i`` of ``M`` (rows of ``N`` are symmetric, with the roles swapped)

    P_i = diag(w) + tau * sum_{k: i_k = i} E[N_j N_j^T]      (precision)
    r_i = tau * sum_{k: i_k = i} Y_k E[N_j]                    (right-hand side)

with ``w = 1/gamma`` (Gibbs) or ``E_q[1/gamma]`` (VB) and ``E[N_j N_j^T] = N_j N_j^T``
(Gibbs) or ``n_j n_j^T + W_j`` (VB).  Both sums are sparse-times-dense products of the
CSR rating pattern with an ``m_other x (C K^2)`` matrix of per-item second moments, so
neither an ``n x K x K`` array nor the ``m1 x m2`` matrix is ever built.  Chains are
stacked as extra dense columns of one sparse product: ``jax.vmap`` over a BCSR product
falls back to a much slower path (see ``benchmarks/``).

All functions take a leading chain axis ``C`` on the factor arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import sparse

__all__ = [
    "CSR",
    "csr_from_view",
    "csr_matmul",
    "row_precision",
    "row_rhs",
    "cholesky_rows",
    "sample_rows",
    "solve_rows",
    "outer",
]


class CSR(NamedTuple):
    """Rows of a sparse ``m x m_other`` matrix (the rating pattern), device arrays.

    ``indptr`` (m+1,) int32, ``index`` (n,) int32, ``values`` (n,) float, ``ones`` (n,)
    float of the same dtype (the pattern, for the precision products).
    """

    indptr: jax.Array
    index: jax.Array
    values: jax.Array
    ones: jax.Array
    shape: tuple[int, int]


# CSR carries a static shape: register it so it can be passed through jit as a pytree.
jax.tree_util.register_pytree_node(
    CSR,
    lambda c: ((c.indptr, c.index, c.values, c.ones), c.shape),
    lambda shape, xs: CSR(*xs, shape),
)


def csr_from_view(view, shape: tuple[int, int], dtype) -> CSR:
    """Device CSR from a :class:`bmczoo.data.SortedView` (int32 indices, ``dtype`` data)."""
    values = jnp.asarray(view.values, dtype=dtype)
    return CSR(
        indptr=jnp.asarray(view.indptr, dtype=jnp.int32),
        index=jnp.asarray(view.index, dtype=jnp.int32),
        values=values,
        ones=jnp.ones_like(values),
        shape=tuple(shape),
    )


def csr_matmul(indptr, index, data, shape, dense):
    """``A @ dense`` for the CSR matrix ``A = (data, index, indptr)`` of static ``shape``.

    Uses ``jax.experimental.sparse.BCSR``, which reaches JAX's native CPU sparse kernel
    when indices are int32 and ``data`` has the dtype of ``dense``.
    """
    a = sparse.BCSR((data, index, indptr), shape=shape, indices_sorted=True, unique_indices=True)
    return a @ dense


def outer(F: jax.Array) -> jax.Array:
    """Per-row outer products ``F_j F_j^T``: (C, m, K) -> (C, m, K, K)."""
    return F[..., :, None] * F[..., None, :]


def row_precision(csr: CSR, second_moment: jax.Array, prior_precision: jax.Array, tau) -> jax.Array:
    """Row precisions ``diag(prior_precision) + tau * sum_j second_moment[j]``.

    Parameters
    ----------
    csr : CSR of the rows being updated (``m x m_other``).
    second_moment : (C, m_other, K, K) per-item ``E[N_j N_j^T]``.
    prior_precision : (C, K) ``1/gamma`` or ``E[1/gamma]``.
    tau : likelihood precision.

    Returns
    -------
    (C, m, K, K) precisions.
    """
    C, m_other, K, _ = second_moment.shape
    dense = jnp.transpose(second_moment.reshape(C, m_other, K * K), (1, 0, 2)).reshape(m_other, C * K * K)
    G = csr_matmul(csr.indptr, csr.index, csr.ones, csr.shape, dense)  # (m, C K^2)
    G = jnp.transpose(G.reshape(csr.shape[0], C, K, K), (1, 0, 2, 3))
    eye = jnp.eye(K, dtype=G.dtype)
    return tau * G + prior_precision[:, None, :, None] * eye


def row_rhs(csr: CSR, mean: jax.Array, tau) -> jax.Array:
    """Right-hand sides ``tau * sum_j Y_ij mean[j]``: mean (C, m_other, K) -> (C, m, K)."""
    C, m_other, K = mean.shape
    dense = jnp.transpose(mean, (1, 0, 2)).reshape(m_other, C * K)
    r = csr_matmul(csr.indptr, csr.index, csr.values, csr.shape, dense)
    return tau * jnp.transpose(r.reshape(csr.shape[0], C, K), (1, 0, 2))


def cholesky_rows(P: jax.Array) -> jax.Array:
    """Batched lower Cholesky factors of (..., K, K) precisions (NaN where not PD)."""
    return jnp.linalg.cholesky(P)


def _tri(L, b, transpose: bool):
    # (..., K, K) triangular solve against (..., K) vectors
    return lax.linalg.triangular_solve(
        L, b[..., None], left_side=True, lower=True, transpose_a=transpose
    )[..., 0]


def sample_rows(L: jax.Array, rhs: jax.Array, z: jax.Array) -> jax.Array:
    """Draw ``x ~ N(P^{-1} rhs, P^{-1})`` for each row, with ``P = L L^T``, given
    standard normals ``z`` of the shape of ``rhs``.

    ``x = L^{-T} (L^{-1} rhs + z)``: two triangular solves, no inverse.
    """
    return _tri(L, _tri(L, rhs, False) + z, True)


def solve_rows(L: jax.Array, rhs: jax.Array) -> jax.Array:
    """Posterior means ``P^{-1} rhs`` for each row."""
    return _tri(L, _tri(L, rhs, False), True)
