"""Closed-form mean-field variational Bayes (CAVI) for every prior of the zoo.

``q(M, N, gamma) = prod_i N(m_i, V_i) prod_j N(n_j, W_j) prod_h q(gamma_h)``
(DESIGN.md section 3).  One iteration updates all ``q(M_i)`` (one batched Cholesky, the
same sparse products as the Gibbs sweep, see :mod:`bmczoo.inference.kernels`), then all
``q(N_j)``, then ``q(gamma)`` from the prior's :meth:`~bmczoo.priors.Prior.vb_update`.
The ELBO is computed after every iteration; coordinate ascent never decreases it.

Like the Gibbs core, the functions carry a leading axis ``C`` (independent runs, e.g.
several initialisations) on the factor arrays.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..priors import Prior
from .kernels import CSR, cholesky_rows, csr_matmul, outer, row_precision, row_rhs, solve_rows

__all__ = ["VBState", "init", "update", "elbo"]

_LOG_2PI = math.log(2.0 * math.pi)


class VBState(NamedTuple):
    """Variational parameters of ``C`` independent runs.

    ``m`` (C, m1, K), ``V`` (C, m1, K, K), ``n`` (C, m2, K), ``W`` (C, m2, K, K),
    ``inv_gamma`` (C, K) ``E_q[1/gamma_h]``, ``ES`` (C, K) ``E_q[S_h]``.
    """

    m: jax.Array
    V: jax.Array
    n: jax.Array
    W: jax.Array
    inv_gamma: jax.Array
    ES: jax.Array


def _inverse_from_cholesky(L: jax.Array) -> jax.Array:
    K = L.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(K, dtype=L.dtype), L.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.swapaxes(Linv, -1, -2) @ Linv


def init(keys: jax.Array, shape: tuple[int, int], prior: Prior, K: int, dtype=jnp.float32, scale: float = 1.0,
         gamma: float | None = 1.0) -> VBState:
    """Random means ``N(0, scale^2)`` (one key per run), zero covariances and
    ``E[1/gamma_h] = 1/gamma`` (``gamma=None``: the prior's ``init_gamma``); the first
    update of ``q(M)`` only uses ``n``, ``W`` and ``inv_gamma``.

    A unit ``gamma`` rather than e.g. the inverse-gamma prior's mode ``b/(a+1)`` matters:
    starting from strong shrinkage, CAVI can settle on the all-zero fixed point."""
    m1, m2 = shape
    C = keys.shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    m = jax.vmap(lambda k: jax.random.normal(k, (m1, K), dtype))(split[:, 0]) * scale
    n = jax.vmap(lambda k: jax.random.normal(k, (m2, K), dtype))(split[:, 1]) * scale
    g = prior.init_gamma(K, m1 + m2, dtype) if gamma is None else jnp.full((K,), gamma, dtype)
    return VBState(
        m=m,
        V=jnp.zeros((C, m1, K, K), dtype),
        n=n,
        W=jnp.zeros((C, m2, K, K), dtype),
        inv_gamma=jnp.broadcast_to(1.0 / g, (C, K)),
        ES=jnp.zeros((C, K), dtype),
    )


def _update_factor(csr: CSR, mean_other, cov_other, inv_gamma, tau):
    P = row_precision(csr, cov_other + outer(mean_other), inv_gamma, tau)
    L = cholesky_rows(P)
    rhs = row_rhs(csr, mean_other, tau)
    return solve_rows(L, rhs), _inverse_from_cholesky(L)


def _expected_S(m, V, n, W):
    return (
        jnp.sum(m**2, axis=1) + jnp.sum(jnp.diagonal(V, axis1=-2, axis2=-1), axis=1)
        + jnp.sum(n**2, axis=1) + jnp.sum(jnp.diagonal(W, axis1=-2, axis2=-1), axis=1)
    )


def update(state: VBState, rows: CSR, cols: CSR, prior: Prior, tau) -> VBState:
    """One CAVI iteration: ``q(M)``, then ``q(N)``, then ``q(gamma)``."""
    m, V = _update_factor(rows, state.n, state.W, state.inv_gamma, tau)
    n, W = _update_factor(cols, m, V, state.inv_gamma, tau)
    ES = _expected_S(m, V, n, W)
    d = rows.shape[0] + rows.shape[1]
    q = prior.vb_update(ES, d)
    return VBState(m=m, V=V, n=n, W=W, inv_gamma=q.inv_mean.astype(m.dtype), ES=ES)


def expected_sq_error(state: VBState, rows: CSR) -> jax.Array:
    """``sum_k E_q[(Y_k - M_i . N_j)^2]`` for each run, without an ``n x K x K`` array.

    ``sum_k E[(Y - M_i.N_j)^2] = sum_k Y^2 - 2 sum_i m_i . (sum_j Y n_j)
    + sum_i <V_i + m_i m_i^T, sum_j (W_j + n_j n_j^T)>``: the last sum is the sparse
    product of the precision computation.
    """
    C, m1, K = state.m.shape
    A = state.V + outer(state.m)  # (C, m1, K, K)
    G = row_precision(rows, state.W + outer(state.n), jnp.zeros((C, K), state.m.dtype), 1.0)
    yn = row_rhs(rows, state.n, 1.0)  # (C, m1, K) = sum_j Y n_j
    y2 = jnp.sum(rows.values**2)
    return y2 - 2.0 * jnp.sum(state.m * yn, axis=(1, 2)) + jnp.sum(A * G, axis=(1, 2, 3))


def elbo(state: VBState, rows: CSR, prior: Prior, tau) -> jax.Array:
    """The evidence lower bound of each run, exact when ``q(gamma)`` is the optimum for
    the current ``E[S]`` (true right after :func:`update`).

    The likelihood is the Gaussian ``N(Y | theta, 1/tau)`` (the tempered likelihood up to
    its normalising constant, which is included so that the ELBO is a bound on the
    log evidence of that Gaussian model).
    """
    n_obs = rows.values.shape[0]
    m1, m2 = rows.shape
    d = m1 + m2
    K = state.m.shape[-1]
    loglik = 0.5 * n_obs * (jnp.log(tau) - _LOG_2PI) - 0.5 * tau * expected_sq_error(state, rows)
    q = prior.vb_update(state.ES, d)
    gamma_part = jnp.sum(q.log_normalizer, axis=-1) - 0.5 * d * K * _LOG_2PI
    # entropies of the Gaussian factors: (K/2) log(2 pi e) + (1/2) log det V
    ent = 0.5 * d * K * (1.0 + _LOG_2PI)
    ent = ent + 0.5 * jnp.sum(jnp.linalg.slogdet(state.V)[1], axis=1) + 0.5 * jnp.sum(jnp.linalg.slogdet(state.W)[1], axis=1)
    return loglik + gamma_part + ent
