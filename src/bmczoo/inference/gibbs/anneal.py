"""The discrete prior's annealed spike/slab switch (:func:`annealed_switch`): one column
moved between the spike and the slab along an annealing path, accepted on the work done.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ... import _rng
from ...priors import Prior
from .. import sharding as sh
from ...linalg import CSR, row_ids
from ..settings import check_spike_and_slab
from .latent import ratings_view
from .rows import Conditional, Side, SweepFlags, half_sweep
from .state import GibbsProblem, GibbsState, padded_dims

__all__ = ["ANNEAL_STREAM", "annealed_switch", "annealed_path"]

#: the annealed switch's key stream (folded into the sweep's key)
ANNEAL_STREAM = 0x616E6E  # "ann"


def annealed_switch(
    state: GibbsState, problem: GibbsProblem, prior: Prior, keys: jax.Array
) -> tuple[GibbsState, jax.Array]:
    """Switch one column between the spike and the slab along an annealing path, accepted
    by Metropolis-Hastings on the work done (non-equilibrium candidate Monte Carlo).

    Each chain picks a column ``h`` uniformly and proposes to move ``gamma_h`` to the
    other value of the discrete prior (:meth:`~bmczoo.priors.Prior.column_proposal`):
    over ``T = problem.options.anneal_steps`` steps ``gamma_h`` follows the geometric path from its
    value to the other one, and after each step but the last the factors are updated by
    a kernel that keeps the joint at the current ``gamma_h`` invariant and is reversible
    (rows of ``M``, rows of ``N``, rows of ``M`` again: a palindrome of exact Gibbs
    blocks; the other variables fixed).  The proposal is the path's end point; its log
    acceptance ratio is the prior odds of the two values of ``gamma_h`` plus the work
    ``sum_t [log p(M_h, N_h | g_t) - log p(M_h, N_h | g_(t-1))]`` at the states visited (the
    likelihood does not depend on ``gamma_h``).  The reverse switch follows the reversed
    path with the same reversible kernels, so the move keeps the posterior invariant
    (Neal's tempered transitions; Nilmeier et al. 2011, PNAS 108, E1009).  Unlike the
    column moves' flip (one step, the own column integrated out) the factors follow the
    change of scale, so a switch that needs a column to grow or shrink a long way (a
    second factor on MovieLens) is accepted where a one-step flip is not.

    Costs ``1.5 (T - 1)`` sweeps of the factors; :func:`sweep` runs it every
    ``problem.options.anneal_every`` sweeps.  Sharded like the sweep on a mesh; biases and a
    learned noise precision stay fixed during the move (the residual subtracts the
    biases), a latent likelihood's ``z`` replace the ratings.

    Parameters
    ----------
    state : GibbsState
        The chains' state after a sweep.
    problem : GibbsProblem
        The ratings, the model's components and the run's settings.
    prior : bmczoo.priors.Prior
        The prior; the discrete prior (spike and slab).
    keys : jax.Array, shape (C,)
        One PRNG key per chain.

    Returns
    -------
    GibbsState
        The state after the move (its ``stats`` untouched).
    jax.Array, shape (C, 2) int32
        Each chain's accepted (0 or 1) and attempted (1) switches, for ``stats.switches``.
    """
    check_spike_and_slab(prior)
    C, _, K = state.M.shape
    dt = state.M.dtype
    k = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)
    h = jax.vmap(lambda kk: jax.random.randint(kk, (), 0, K))(k[:, 0])
    log_u = jnp.log(jax.vmap(lambda kk: jax.random.uniform(kk, (), dt))(k[:, 2]))
    M, N, gamma, log_ratio = annealed_path(
        state, problem, prior, k[:, 1], h, problem.options.anneal_steps
    )
    accept = log_u < log_ratio  # a NaN work (a failed factorisation) rejects
    acc = accept[:, None, None]
    counts = jnp.stack([accept.astype(jnp.int32), jnp.ones_like(accept, jnp.int32)], axis=-1)
    new = state._replace(
        M=jnp.where(acc, M, state.M),
        N=jnp.where(acc, N, state.N),
        prior_state={**state.prior_state, "gamma": jnp.where(accept[:, None], gamma, state.gamma)},
    )
    return new, counts


def annealed_path(
    state: GibbsState,
    problem: GibbsProblem,
    prior: Prior,
    keys: jax.Array,
    h: jax.Array,
    steps: int,
):
    """The annealed path of :func:`annealed_switch` for column ``h`` (C,) int of each chain
    over ``steps`` steps (``keys`` (C,): the kernels' keys).  Returns the path's end ``(M,
    N, gamma)`` and its log acceptance ratio (C,): the prior odds of the two values of
    ``gamma_h`` plus the work."""
    C, _, K = state.M.shape
    m1, m2 = problem.dims
    dt = state.M.dtype
    T = int(steps)
    if T < 1:
        raise ValueError(f"steps must be at least 1, got {steps!r}")
    tb = problem.block_precision(state.tau)
    onehot = jax.nn.one_hot(h, K, dtype=dt)  # (C, K)
    g0 = jnp.sum(state.gamma * onehot, axis=-1)
    g1, _, log_odds = prior.column_proposal(g0, jnp.zeros_like(g0), m1 + m2)
    values = _path_values(state, problem)

    def with_scale(gamma, g):
        return jnp.where(onehot > 0, g[:, None], gamma)

    def perturb(t, M, N, gamma, work):
        g_t = jnp.where(t == T, g1, g0 * jnp.exp((t / T) * (jnp.log(g1) - jnp.log(g0))))
        g_prev = jnp.sum(gamma * onehot, axis=-1)
        work = (
            work
            + _log_column_prior(M, N, onehot, g_t, m1 + m2)
            - _log_column_prior(M, N, onehot, g_prev, m1 + m2)
        )
        return with_scale(gamma, g_t), work

    def body(t, carry):  # step t + 1 of the path, then the kernel at g_(t+1)
        M, N, gamma, work = carry
        gamma, work = perturb(t + 1, M, N, gamma, work)
        kk = jax.vmap(lambda key: jax.random.split(jax.random.fold_in(key, t), 3))(keys)
        z = _rng.normals_together([(kk[:, 0], m1 * K), (kk[:, 1], m2 * K), (kk[:, 2], m1 * K)], dt)
        z = tuple(x.reshape(C, -1, K) for x in z)
        priors = prior.row_priors({**state.prior_state, "gamma": gamma})
        M, N = _path_kernel(problem, priors, M, N, z, tb, values)
        return M, N, gamma, work

    M, N, gamma, work = lax.fori_loop(
        0, T - 1, body, (state.M, state.N, state.gamma, jnp.zeros((C,), dt))
    )
    gamma, work = perturb(T, M, N, gamma, work)
    return M, N, gamma, work + log_odds


def _path_values(state: GibbsState, problem: GibbsProblem):
    """The values the path's half sweeps fit, per chain, in row and in column order ((C,
    n) each; sharded: this device's ratings): the ratings (a latent likelihood's ``z``)
    minus the biases, which stay fixed along the path, so computed once per switch;
    ``(None, None)`` when they are the ratings themselves (then the half sweeps use the
    ratings of the pattern, one product for all chains)."""
    use_bias = problem.biases is not None
    if not problem.latent and not use_bias and not problem.offsets:
        return None, None
    b, c = state.row_bias, state.col_bias
    if problem.mesh is None:
        view = ratings_view(state.lik_state, problem, state.offset_state)
        yr, yc = (view[0].values, view[1].values) if view is not None else (None, None)
        if use_bias:
            yr, yc = _bias_residual(problem.rows, yr, b, c), _bias_residual(problem.cols, yc, c, b)
        return yr, yc
    comm = sh.sharded_comm(
        problem.dims
    )  # sharded: biases only (a latent likelihood runs on one device)

    def body(rows, cols, b, c):
        return (
            _bias_residual(sh.local_csr(rows), None, b, comm.gather(c)),
            _bias_residual(sh.local_csr(cols), None, c, comm.gather(b)),
        )

    csr_spec, v = jax.sharding.PartitionSpec(sh.AXIS), jax.sharding.PartitionSpec(None, sh.AXIS)
    return jax.shard_map(
        body,
        mesh=problem.mesh,
        in_specs=(csr_spec, csr_spec, v, v),
        out_specs=(v, v),
        check_vma=False,
    )(problem.rows, problem.cols, b, c)


def _path_kernel(problem: GibbsProblem, priors, M, N, z, tb, values):
    """The annealed path's kernel at the rows' ``priors``: rows of ``M``, rows of ``N``,
    rows of ``M`` again (exact Gibbs blocks with the normals ``z``, three (C, m, K) arrays,
    fitting ``values`` of :func:`_path_values`; biases, ``tau`` and a latent likelihood's
    ``z`` fixed), on one device or sharded as the sweep
    (:func:`~bmczoo.inference.gibbs.rows.sweep_factors`)."""
    if problem.mesh is None:
        return _path_body(problem.rows, problem.cols, M, N, z, priors, tb, sh.LOCAL, values)
    p1, p2 = padded_dims(problem)
    z = (sh.pad_rows(z[0], p1), sh.pad_rows(z[1], p2), sh.pad_rows(z[2], p1))
    f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
    v = jax.sharding.PartitionSpec(None, sh.AXIS)
    comm = sh.sharded_comm(problem.dims)
    csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
    args = (problem.rows, problem.cols, M, N, z, priors, tb)
    specs = (csr_spec, csr_spec, f, f, (f, f, f), r, r)
    if values[0] is not None:  # the residual without the biases, per device

        def body(rows, cols, M, N, z, priors, tb, values):
            return _path_body(
                sh.local_csr(rows), sh.local_csr(cols), M, N, z, priors, tb, comm, values
            )

        args, specs = args + (tuple(values),), specs + ((v, v),)
    else:

        def body(rows, cols, M, N, z, priors, tb):
            return _path_body(
                sh.local_csr(rows), sh.local_csr(cols), M, N, z, priors, tb, comm, values
            )

    return jax.shard_map(
        body, mesh=problem.mesh, in_specs=specs, out_specs=(f, f), check_vma=False
    )(*args)


def _path_body(rows: CSR, cols: CSR, M, N, z, priors, tb, comm: sh.Comm, values):
    """:func:`_path_kernel` on this device's rows (``z`` the three half sweeps' normals;
    ``values``: :func:`_path_values`, or None: the ratings)."""
    pM, pN = priors
    ones = jnp.ones((M.shape[0],), M.dtype)
    flags = SweepFlags(rho=0.0, use_bias=False, sse=False)

    def half(csr, own, other, z, prior_rows, vals, which):
        zb = jnp.zeros(own.shape[:2], own.dtype)
        zo = jnp.zeros(other.shape[:2], own.dtype)
        side = Side(csr, own, other, zb, zo, vals)
        new = half_sweep(side, z, zb, Conditional(prior_rows, tb, ones), flags)[0]
        return comm.mask(new, which)

    M = half(rows, M, comm.gather(N), z[0], pM, values[0], 0)
    N = half(cols, N, comm.gather(M), z[1], pN, values[1], 1)
    M = half(rows, M, comm.gather(N), z[2], pM, values[0], 0)
    return M, N


def _bias_residual(csr: CSR, values, bias_own, bias_other):
    """``Y_ij - b_i - c_j`` (C, n) at the ratings of ``csr`` (grouped by the rows of
    ``bias_own`` (C, m), this device's; ``bias_other`` (C, m_other) all rows); ``values``
    (C, n) replace the ratings (a latent ``z``) when given."""
    y = csr.values[None] if values is None else values
    # a sharded block's padding entries have the row id b (out of range): clip, they are
    # not read by the products
    return y - jnp.take(bias_own, row_ids(csr), axis=1, mode="clip") - bias_other[:, csr.index]


def _log_column_prior(M, N, onehot, g, d: int):
    """``log N(M_h; 0, g I) + log N(N_h; 0, g I)`` up to a constant, per chain (``h`` the
    column of ``onehot`` (C, K), ``d = m1 + m2``: padding rows of a sharded run are zero);
    its own function so that the Geweke power check can break the annealed switch's work."""
    sq = jnp.einsum("cmk,ck->c", M * M, onehot) + jnp.einsum("cjk,ck->c", N * N, onehot)
    return -0.5 * d * jnp.log(g) - 0.5 * sq / g
