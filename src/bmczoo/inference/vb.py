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
from . import sharding as sh
from .kernels import CSR, cholesky_rows, csr_matmul, outer, row_precision, row_rhs, solve_rows

__all__ = ["VBState", "init", "update", "elbo", "update_sharded", "elbo_sharded", "shard_state", "unshard_state"]

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


# ---------------------------------------------------------------- several devices
# The same iteration with the rows of q(M) / q(N) and the ratings split over the devices
# of a mesh (see bmczoo.inference.sharding): the arrays of the state have their rows
# padded to a multiple of the device count; padding rows have no ratings and are masked
# out of E[S] and of the ELBO.

_F = jax.sharding.PartitionSpec(None, sh.AXIS, None)
_F4 = jax.sharding.PartitionSpec(None, sh.AXIS, None, None)
_R = jax.sharding.PartitionSpec()
_CSR = jax.sharding.PartitionSpec(sh.AXIS)


def shard_state(state: VBState, mesh) -> VBState:
    """Pad the rows of ``state`` to a multiple of the device count and shard them."""
    D = mesh.devices.size

    def put(x, rows_axis=True):
        if not rows_axis:
            return jax.device_put(x, sh.replicated(mesh))
        pad = sh.padded_size(x.shape[1], D) - x.shape[1]
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        spec = _F if x.ndim == 3 else _F4
        return jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))

    return VBState(m=put(state.m), V=put(state.V), n=put(state.n), W=put(state.W),
                   inv_gamma=put(state.inv_gamma, False), ES=put(state.ES, False))


def unshard_state(state: VBState, dims: tuple[int, int]) -> VBState:
    """Drop the padding rows of a sharded state."""
    m1, m2 = dims
    return state._replace(m=state.m[:, :m1], V=state.V[:, :m1], n=state.n[:, :m2], W=state.W[:, :m2])


def _valid(block_rows: int, m: int, dtype):
    # inside shard_map: 1 for this device's real rows, 0 for its padding rows
    start = jax.lax.axis_index(sh.AXIS) * block_rows
    return ((start + jnp.arange(block_rows)) < m).astype(dtype)


def update_sharded(state: VBState, rows: CSR, cols: CSR, prior: Prior, tau, *, mesh, dims) -> VBState:
    """:func:`update` with ``rows`` / ``cols`` the per-device blocks of
    :func:`bmczoo.inference.sharding.shard_csr` and a state from :func:`shard_state`."""
    m1, m2 = dims

    def body(rows, cols, n_l, W_l, inv_gamma, tau):
        rows, cols = sh.local_csr(rows), sh.local_csr(cols)
        gather = lambda x: jax.lax.all_gather(x, sh.AXIS, axis=1, tiled=True)  # noqa: E731
        m_l, V_l = _update_factor(rows, gather(n_l), gather(W_l), inv_gamma, tau)
        n_l, W_l = _update_factor(cols, gather(m_l), gather(V_l), inv_gamma, tau)
        vm = _valid(rows.shape[0], m1, m_l.dtype)[None, :, None, None]
        vn = _valid(cols.shape[0], m2, n_l.dtype)[None, :, None, None]
        ES = jax.lax.psum(_expected_S(m_l, V_l * vm, n_l, W_l * vn), sh.AXIS)
        return m_l, V_l, n_l, W_l, ES

    m, V, n, W, ES = jax.shard_map(
        body, mesh=mesh, in_specs=(_CSR, _CSR, _F, _F4, _R, _R), out_specs=(_F, _F4, _F, _F4, _R), check_vma=False,
    )(rows, cols, state.n, state.W, state.inv_gamma, tau)
    q = prior.vb_update(ES, m1 + m2)
    return VBState(m=m, V=V, n=n, W=W, inv_gamma=q.inv_mean.astype(m.dtype), ES=ES)


def elbo_sharded(state: VBState, rows: CSR, prior: Prior, tau, *, mesh, dims, n_obs: int) -> jax.Array:
    """:func:`elbo` of a sharded state (``rows``: per-device blocks, ``n_obs`` ratings)."""
    m1, m2 = dims
    d = m1 + m2
    K = state.m.shape[-1]

    def body(rows, m_l, V_l, n_l, W_l):
        rows = sh.local_csr(rows)
        C = m_l.shape[0]
        gather = lambda x: jax.lax.all_gather(x, sh.AXIS, axis=1, tiled=True)  # noqa: E731
        n_all, W_all = gather(n_l), gather(W_l)
        A = V_l + outer(m_l)
        G = row_precision(rows, W_all + outer(n_all), jnp.zeros((C, K), m_l.dtype), 1.0)
        yn = row_rhs(rows, n_all, 1.0)
        sq = jnp.sum(rows.values**2) - 2.0 * jnp.sum(m_l * yn, axis=(1, 2)) + jnp.sum(A * G, axis=(1, 2, 3))
        vm = _valid(m_l.shape[1], m1, m_l.dtype)[None, :]
        vn = _valid(n_l.shape[1], m2, n_l.dtype)[None, :]
        logdet = (jnp.sum(jnp.linalg.slogdet(V_l)[1] * vm, axis=1)
                  + jnp.sum(jnp.linalg.slogdet(W_l)[1] * vn, axis=1))
        return jax.lax.psum(sq, sh.AXIS), jax.lax.psum(logdet, sh.AXIS)

    sq, logdet = jax.shard_map(
        body, mesh=mesh, in_specs=(_CSR, _F, _F4, _F, _F4), out_specs=(_R, _R), check_vma=False,
    )(rows, state.m, state.V, state.n, state.W)
    loglik = 0.5 * n_obs * (jnp.log(tau) - _LOG_2PI) - 0.5 * tau * sq
    q = prior.vb_update(state.ES, d)
    gamma_part = jnp.sum(q.log_normalizer, axis=-1) - 0.5 * d * K * _LOG_2PI
    return loglik + gamma_part + 0.5 * d * K * (1.0 + _LOG_2PI) + 0.5 * logdet
