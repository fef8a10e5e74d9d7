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
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..likelihoods import Tempered
from ..priors import Prior
from . import sharding as sh
from .kernels import CSR, cholesky_rows, outer, row_precision, row_rhs, solve_rows

__all__ = ["VBState", "init", "update", "elbo", "expected_sq_error", "shard_state", "unshard_state"]

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


def _update_factor(csr: CSR, mean_other, cov_other, prior_precision, tau):
    P = row_precision(csr, cov_other + outer(mean_other), prior_precision, tau)
    L = cholesky_rows(P)
    rhs = row_rhs(csr, mean_other, tau)
    return solve_rows(L, rhs), _inverse_from_cholesky(L)


def _expected_S(m, V, n, W):
    return (
        jnp.sum(m**2, axis=1) + jnp.sum(jnp.diagonal(V, axis1=-2, axis2=-1), axis=1)
        + jnp.sum(n**2, axis=1) + jnp.sum(jnp.diagonal(W, axis1=-2, axis2=-1), axis=1)
    )


def _body(rows: CSR, cols: CSR, n, W, inv_gamma, tau, comm: "_Comm"):
    """The CAVI updates of q(M) and q(N) and ``E[S]``; ``comm`` says how rows are spread
    (identity on one device; all-gathers and a psum inside ``shard_map``)."""
    m, V = _update_factor(rows, comm.gather(n), comm.gather(W), inv_gamma, tau)
    n, W = _update_factor(cols, comm.gather(m), comm.gather(V), inv_gamma, tau)
    ES = comm.psum(_expected_S(m, comm.mask(V, 0), n, comm.mask(W, 1)))
    return m, V, n, W, ES


def _sq_error_body(rows: CSR, m, V, n, W, comm: "_Comm"):
    """``sum_k E_q[(Y_k - M_i . N_j)^2]`` and ``sum log det`` of the covariances (C,) each.

    ``sum_k E[(Y - M_i.N_j)^2] = sum_k Y^2 - 2 sum_i m_i . (sum_j Y n_j)
    + sum_i <V_i + m_i m_i^T, sum_j (W_j + n_j n_j^T)>``: the last sum is the sparse
    product of the precision computation, so no ``n x K x K`` array is built.
    """
    C, _, K = m.shape
    n_all, W_all = comm.gather(n), comm.gather(W)
    G = row_precision(rows, W_all + outer(n_all), jnp.zeros((C, K), m.dtype), 1.0)
    yn = row_rhs(rows, n_all, 1.0)
    sq = jnp.sum(rows.values**2) - 2.0 * jnp.sum(m * yn, axis=(1, 2)) + jnp.sum((V + outer(m)) * G, axis=(1, 2, 3))
    logdet = (jnp.sum(comm.mask(jnp.linalg.slogdet(V)[1], 0), axis=1)
              + jnp.sum(comm.mask(jnp.linalg.slogdet(W)[1], 1), axis=1))
    return comm.psum(sq), comm.psum(logdet)


class _Comm(NamedTuple):
    """How the body sees the other rows: ``gather`` all rows of a factor, ``psum`` over
    devices, ``mask(x, which)`` zeroes the padding rows (axis 1) of factor ``which`` (0: M,
    1: N); on one device there is no padding and the three are the identity."""

    gather: Callable
    psum: Callable
    mask: Callable


_LOCAL = _Comm(gather=lambda x: x, psum=lambda x: x, mask=lambda x, which: x)


def update(state: VBState, rows: CSR, cols: CSR, prior: Prior, tau, *, mesh=None, dims=None) -> VBState:
    """One CAVI iteration: ``q(M)``, then ``q(N)``, then ``q(gamma)``.

    With ``mesh`` (see :func:`shard_state`), ``rows``/``cols`` are the per-device blocks of
    :func:`bmczoo.inference.sharding.shard_csr` and ``dims`` the true ``(m1, m2)``; the
    same body runs on each device.
    """
    if mesh is None:
        m, V, n, W, ES = _body(rows, cols, state.n, state.W, state.inv_gamma, tau, _LOCAL)
        d = rows.shape[0] + rows.shape[1]
    else:
        def body(rows, cols, n_l, W_l, inv_gamma, tau):
            return _body(sh.local_csr(rows), sh.local_csr(cols), n_l, W_l, inv_gamma, tau, _sharded_comm(dims))

        m, V, n, W, ES = jax.shard_map(
            body, mesh=mesh, in_specs=(_CSR, _CSR, _F, _F4, _R, _R), out_specs=(_F, _F4, _F, _F4, _R),
            check_vma=False,
        )(rows, cols, state.n, state.W, state.inv_gamma, tau)
        d = dims[0] + dims[1]
    q = prior.vb_update(ES, d)
    return VBState(m=m, V=V, n=n, W=W, inv_gamma=q.inv_mean.astype(m.dtype), ES=ES)


def expected_sq_error(state: VBState, rows: CSR) -> jax.Array:
    """``sum_k E_q[(Y_k - M_i . N_j)^2]`` for each run (one device)."""
    return _sq_error_body(rows, state.m, state.V, state.n, state.W, _LOCAL)[0]


def elbo(state: VBState, rows: CSR, prior: Prior, tau, *, likelihood=None, mesh=None, dims=None) -> jax.Array:
    """The evidence lower bound of each run, exact when ``q(gamma)`` is the optimum for
    the current ``E[S]`` (true right after :func:`update`).

    The likelihood term is the likelihood component's :meth:`vb_loglik` (default: the
    Gaussian ``N(Y | theta, 1/tau)``, normalising constant included, so that the ELBO is
    a bound on the log evidence of that Gaussian model).  ``mesh``/``dims`` as in
    :func:`update`.
    """
    K = state.m.shape[-1]
    if mesh is None:
        sq, logdet = _sq_error_body(rows, state.m, state.V, state.n, state.W, _LOCAL)
        m1, m2 = rows.shape
        n_obs = rows.values.shape[0]
    else:
        def body(rows, m_l, V_l, n_l, W_l):
            rows = sh.local_csr(rows)
            return _sq_error_body(rows, m_l, V_l, n_l, W_l, _sharded_comm(dims))

        sq, logdet = jax.shard_map(
            body, mesh=mesh, in_specs=(_CSR, _F, _F4, _F, _F4), out_specs=(_R, _R), check_vma=False,
        )(rows, state.m, state.V, state.n, state.W)
        m1, m2 = dims
        n_obs = jnp.sum(rows.ones)  # the padding entries of the blocks are zeros
    d = m1 + m2
    lik = Tempered() if likelihood is None else likelihood
    loglik = lik.vb_loglik(n_obs, sq, tau)
    q = prior.vb_update(state.ES, d)
    gamma_part = jnp.sum(q.log_normalizer, axis=-1) - 0.5 * d * K * _LOG_2PI
    # entropies of the Gaussian factors: (K/2) log(2 pi e) + (1/2) log det V
    return loglik + gamma_part + 0.5 * d * K * (1.0 + _LOG_2PI) + 0.5 * logdet


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


def _sharded_comm(dims) -> _Comm:
    """Inside ``shard_map``: all-gather the rows of a factor, psum over the devices, and
    zero the padding rows of this device's block of factor ``which``."""
    def mask(x, which):
        b = x.shape[1]
        start = jax.lax.axis_index(sh.AXIS) * b
        valid = ((start + jnp.arange(b)) < dims[which]).astype(x.dtype)
        return x * valid.reshape((1, b) + (1,) * (x.ndim - 2))

    return _Comm(gather=lambda x: jax.lax.all_gather(x, sh.AXIS, axis=1, tiled=True),
                 psum=lambda x: jax.lax.psum(x, sh.AXIS), mask=mask)
