"""The column moves: Metropolis-Hastings moves that change ``gamma_h`` together with its
column (docs/algorithms.md, "Column moves"), the discrete prior's spike/slab flip aimed
by a reflection of the slab.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ... import _rng
from ...priors import Prior
from .. import sharding as sh
from ...linalg import CSR, packed_position
from .latent import ratings_view
from .rows import (
    FactorRows,
    FusedMoves,
    MoveArrays,
    RatingsView,
    Side,
    side_sums,
    transform_sums,
)
from .state import GibbsProblem, GibbsState, padded_dims

__all__ = [
    "COLUMN_STREAM",
    "ColumnMove",
    "FlipDraws",
    "column_moves",
    "column_log_marginal",
    "fused_moves",
]

#: the column moves' key stream (folded into the sweep's key)
COLUMN_STREAM = 0x636F6C  # "col"


def _no_sum(x):
    return x


class ColumnMove(NamedTuple):
    """The fixed parts of one side's column moves: the ``prior``, ``d = m1 + m2`` (the
    dimension its proposal sees), ``m_other`` the true number of rows of the rescaled
    factor, ``use_bias`` (the residual subtracts the biases) and ``psum`` (the sum over the
    devices of a sharded run; the identity on one device)."""

    prior: Prior
    d: int
    m_other: int
    use_bias: bool
    psum: Callable = _no_sum


class FlipDraws(NamedTuple):
    """The random numbers of one reflected flip, per chain: ``z`` (C, m) the integrated
    column's normals, ``z2`` (C, m) its redraw after a rejected switch-on, ``xi`` (C, K)
    the reflection's direction, ``zq`` (C,) the proposal's normal and ``log_u`` (C,)."""

    z: jax.Array
    z2: jax.Array
    xi: jax.Array
    zq: jax.Array
    log_u: jax.Array


def column_moves(
    state: GibbsState, problem: GibbsProblem, prior: Prior, keys: jax.Array
) -> GibbsState:
    """Moves that change ``gamma_h`` together with its column (docs/algorithms.md, "Column moves").

    For each column ``h`` in turn, with ``N`` and the other columns fixed, ``M_h`` is
    integrated out (its entries are independent univariate Gaussians given the residual
    ``r_k`` without column ``h``: precision ``p_i = 1/gamma_h + tau sum_k N_jh^2``, mean
    ``tau sum_k r_k N_jh / p_i``); the prior's :meth:`~bmczoo.priors.Prior.column_proposal`
    proposes ``gamma_h'`` (the discrete prior: the spike/slab flip) together with ``N_h' =
    s N_h`` (``s = sqrt(gamma_h'/gamma_h)``), accepted by Metropolis-Hastings on the
    ``M_h``-marginal (prior of gamma, prior of ``N_h'``, the marginal likelihood with
    ``M_h`` integrated out, Jacobian ``m2 log s``); then ``M_h`` is drawn exactly given
    ``gamma_h`` and ``N``.  Then the same with the roles of ``M`` and ``N`` swapped.  Each
    step is an exact block update of ``(gamma_h, M_h, N_h)``, so the posterior stays
    invariant.  Learned noise enters through the block precision, biases through the
    residual.  Per side, two sparse products of the shared hot path (the per-row Gram
    matrices of the other factor and the per-row residual sums, as in a sweep), then
    O(m K^2) per column (:func:`_column_side`).  For a prior with a :meth:`~bmczoo.priors.Prior.column_block`
    (the discrete prior's slab) the flip is aimed by a reflection of the slab
    (:func:`_reflected_flip`): without it the signal spreads over every slab column (the
    posterior is rotation-invariant there) and no single column can be switched off.

    Parameters
    ----------
    state : GibbsState
        The chains' state after a sweep.
    problem : GibbsProblem
        The ratings, the model's components and the run's settings.
    prior : bmczoo.priors.Prior
        The prior; it must have column scales and a column move.
    keys : jax.Array, shape (C,)
        One PRNG key per chain.

    Returns
    -------
    GibbsState
        The state after the move.
    """
    _check_column_move(state, prior)
    m1, m2 = problem.dims
    tb = problem.block_precision(state.tau)
    reflected = prior.column_block(state.gamma) is not None
    d1, d2 = _both_draws(keys, problem=problem, like=state.M, reflected=reflected)
    setup = (prior, (m1, m2), problem.biases is not None)
    x = FactorRows(state.M, state.N, state.row_bias, state.col_bias)
    if problem.mesh is None:
        # a latent likelihood's z replace the ratings, a weighted one's weights weigh them
        values = ratings_view(state.lik_state, problem, state.offset_state) or (
            RatingsView(),
            RatingsView(),
        )
        M, N, gamma = _column_body(
            problem.rows, problem.cols, x, state.gamma, tb, (d1, d2), sh.LOCAL, setup, values
        )
    else:
        M, N, gamma = _sharded_column_moves(problem, x, state.gamma, tb, (d1, d2), setup)
    return state._replace(M=M, N=N, prior_state={**state.prior_state, "gamma": gamma})


def fused_moves(state: GibbsState, problem: GibbsProblem, prior: Prior, keys: jax.Array):
    """The column moves inside the sweep (``fuse_column_moves=True``), as the ``moves``
    argument of ``rows.sweep_factors``: ``(FusedMoves, MoveArrays)``.

    Each half sweep runs its side's moves (those of :func:`column_moves`: its own factor
    integrated out column by column, the other rescaled, or reflected for the discrete
    prior) between the sparse products it needs anyway and its draw, which then
    conditions on the moved ``gamma`` and the rescaled other factor: the sums for ``N T``
    are exact linear maps of those for ``N``
    (:func:`~bmczoo.inference.gibbs.rows.transform_sums`), so the moves cost no pass over
    the ratings.  Each block is an exact update (the moves, then the rows' conditional), so
    the posterior stays invariant; the draws differ from :func:`column_moves` at the end of
    the sweep.  ``keys`` (C,) the moves' keys; the same random numbers as
    :func:`column_moves` with them (padded on a mesh).  With ``column_moves_every > 1``
    the moves run inside every that many sweeps (``due``).

    Parameters
    ----------
    state : GibbsState
        The chains' state before the sweep.
    problem : GibbsProblem
        The ratings, the model's components and the run's settings.
    prior : bmczoo.priors.Prior
        The prior; it must have column scales and a column move.
    keys : jax.Array, shape (C,)
        The moves' PRNG keys, one per chain.

    Returns
    -------
    tuple
        ``(FusedMoves, MoveArrays)``: the moves and their arrays.
    """
    _check_column_move(state, prior)
    m1, m2 = problem.dims
    K, dt = state.M.shape[-1], state.M.dtype
    reflected = prior.column_block(state.gamma) is not None
    make_draws = functools.partial(_both_draws, problem=problem, like=state.M, reflected=reflected)
    every = problem.options.column_moves_every
    if every == 1:
        due, draws = None, make_draws(keys)
    else:  # a sweep without its moves draws none of their numbers
        due = (state.iteration + 1) % every == 0
        zeros = jax.tree.map(
            lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(make_draws, keys)
        )
        draws = lax.cond(due, make_draws, lambda _: zeros, keys)
    use_bias = problem.biases is not None
    others = (m2, m1)  # the true number of rows of the rescaled factor, per side
    prior_state = state.prior_state

    def side(which, side, sums, gamma, tb, draws, psum, due):
        move = ColumnMove(prior, m1 + m2, others[which], use_bias, psum)

        def run(gamma):
            own, T, gamma = _moves_from_sums(
                side, sums.G, sums.r, sums.sumO, sums.sumBO, gamma, tb, draws, move, Gp=sums.Gp
            )
            return own, T, gamma, transform_sums(sums, T)

        if due is None:
            return run(gamma)
        C = gamma.shape[0]
        skip = (
            jnp.broadcast_to(jnp.eye(K, dtype=dt), (C, K, K)) if reflected else jnp.ones((C, K), dt)
        )
        return lax.cond(due, run, lambda g: (side.own, skip, g, sums), gamma)

    def row_priors(gamma):
        return prior.row_priors({**prior_state, "gamma": gamma})

    return FusedMoves(side, row_priors), MoveArrays(state.gamma, draws, due)


def _check_column_move(state: GibbsState, prior: Prior) -> None:
    """Raise unless ``prior`` has column scales in ``state`` and a column move."""
    if "gamma" not in state.prior_state or not prior.has_column_move:
        raise ValueError(
            f"the {prior.name or type(prior).__name__} prior has no column move "
            "(column_moves=True needs a prior with column scales that defines column_proposal)"
        )


def _both_draws(keys, *, problem: GibbsProblem, like, reflected: bool):
    """Both sides' :func:`_move_draws` from the moves' ``keys`` (the factor ``like`` gives
    K and the dtype), padded as the rows on a mesh: the same draws on one device and
    sharded (the row draws padded there and sliced)."""
    (m1, m2), K, dt = problem.dims, like.shape[-1], like.dtype
    k = jax.vmap(jax.random.split)(keys)
    draws = (_move_draws(k[:, 0], K, m1, dt, reflected), _move_draws(k[:, 1], K, m2, dt, reflected))
    if problem.mesh is None:
        return draws
    p1, p2 = padded_dims(problem)  # the same draws on one device and sharded
    return _pad_draws(draws[0], p1), _pad_draws(draws[1], p2)


def _sharded_column_moves(problem: GibbsProblem, x: FactorRows, gamma, tb, draws, setup):
    """:func:`column_moves` over the problem's mesh (``draws``: both sides' padded draws)."""
    d1, d2 = draws
    f, r = jax.sharding.PartitionSpec(None, sh.AXIS, None), jax.sharding.PartitionSpec()
    v = jax.sharding.PartitionSpec(None, sh.AXIS)
    dspec = sh.move_draw_specs(d1)
    comm = sh.sharded_comm(problem.dims)

    def body(rows, cols, x, gamma, tb, draws):
        return _column_body(
            sh.local_csr(rows), sh.local_csr(cols), x, gamma, tb, draws, comm, setup
        )

    csr_spec = jax.sharding.PartitionSpec(sh.AXIS)
    return jax.shard_map(
        body,
        mesh=problem.mesh,
        in_specs=(csr_spec, csr_spec, FactorRows(f, f, v, v), r, r, (dspec, dspec)),
        out_specs=(f, f, r),
        check_vma=False,
    )(problem.rows, problem.cols, x, gamma, tb, (d1, d2))


def _move_draws(keys, K: int, m: int, dt, reflected: bool) -> dict:
    """The random numbers of one side's moves, per chain: ``z`` (C, K, m) for the integrated
    column, ``zq`` (C, K) for the proposal, ``log_u`` (C, K); for the reflected flip also
    ``xi`` (C, K, K) (its direction, from a folded key: the other priors' moves draw as
    without it) and ``z2`` (C, K, m) (the redraw after a rejected switch-on)."""
    kk = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    out = dict(
        z=jax.vmap(lambda k: _rng.normal(k, (K, m), dt))(kk[:, 0]),
        zq=jax.vmap(lambda k: jax.random.normal(k, (K,), dt))(kk[:, 1]),
        log_u=jnp.log(jax.vmap(lambda k: jax.random.uniform(k, (K,), dt))(kk[:, 2])),
    )
    if reflected:
        kr = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 1), 2))(keys)
        out["xi"] = jax.vmap(lambda k: _rng.normal(k, (K, K), dt))(kr[:, 0])
        out["z2"] = jax.vmap(lambda k: _rng.normal(k, (K, m), dt))(kr[:, 1])
    return out


def _pad_draws(draws: dict, m_pad: int) -> dict:
    """The row draws of :func:`_move_draws` padded to ``m_pad`` rows: zero draws for the
    padding rows (they have no ratings, so they stay exactly zero)."""
    return {
        k: jnp.pad(x, ((0, 0), (0, 0), (0, m_pad - x.shape[2]))) if k in ("z", "z2") else x
        for k, x in draws.items()
    }


def _column_body(
    rows: CSR,
    cols: CSR,
    x: FactorRows,
    gamma,
    tb,
    draws,
    comm: sh.Comm,
    setup: tuple,
    values=(RatingsView(), RatingsView()),
):
    """Both sides of the column moves on this device's rows (``comm``: see
    :class:`~bmczoo.inference.sharding.Comm`): ``M`` integrated and ``N`` rescaled, then
    the roles swapped.  ``draws`` the two sides' :func:`_move_draws`, ``setup = (prior,
    (m1, m2), use_bias)``, ``values`` the likelihood's
    :class:`~bmczoo.inference.gibbs.rows.RatingsView` in row and in column order.  Returns the new local ``M``, ``N`` and ``gamma``."""
    prior, (m1, m2), use_bias = setup
    M, N, b, c = x
    side = Side(rows, M, comm.gather(N), b, comm.gather(c), *values[0])
    M, T, gamma = _column_side(
        side, gamma, tb, draws[0], ColumnMove(prior, m1 + m2, m2, use_bias, comm.psum)
    )
    N = jnp.einsum("cjk,ckl->cjl", N, T)
    side = Side(cols, N, comm.gather(M), c, comm.gather(b), *values[1])
    N, T, gamma = _column_side(
        side, gamma, tb, draws[1], ColumnMove(prior, m1 + m2, m1, use_bias, comm.psum)
    )
    return jnp.einsum("cjk,ckl->cjl", M, T), N, gamma


def column_log_marginal(gamma, A, B, tb):
    """``log int prod_i N(x_i; 0, gamma) exp(-tb/2 sum_k (r_k - x_i f_k)^2) dx`` up to the
    terms free of ``gamma`` and ``f``, per chain: ``sum_i -1/2 log(1 + gamma tb A_i) +
    tb^2 B_i^2 gamma / (2 (1 + gamma tb A_i))`` with ``A_i = sum_k f_k^2``, ``B_i = sum_k
    r_k f_k`` over row i's ratings.  gamma, tb (C,), A, B (C, m) -> (C,)."""
    return jnp.sum(_log_marginal_terms(gamma, A, B, tb), axis=-1)


def _log_marginal_terms(gamma, A, B, tb):
    """The per-row terms (C, m) of :func:`column_log_marginal`."""
    gA = gamma[:, None] * tb[:, None] * A
    return -0.5 * jnp.log1p(gA) + 0.5 * (tb[:, None] * B) ** 2 * gamma[:, None] / (1.0 + gA)


def _log_jacobian(m: int, log_s):
    """``log |d(s f)/df| = m log s`` of the rescaling of an m-vector (its own function so
    that the Geweke power check can break it)."""
    return m * log_s


def _column_side(side: Side, gamma, tb, draws: dict, move: ColumnMove):
    """The column moves with ``side.own`` (C, m, K) integrated out and ``side.other``
    (C, m_other, K) rescaled, the ratings grouped by the rows of ``own`` (``side.csr``;
    ``side.values`` (C, n) replace the ratings per chain: a latent likelihood's ``z``;
    ``side.weights`` weigh them).
    Returns the new ``own``, the (C, K, K) matrix ``T`` that ``other`` must be multiplied
    by, and the new ``gamma``.  ``move.m_other`` is the true number of rows of ``other``;
    sharded, ``own`` and ``csr`` are this device's rows, ``other`` all rows (padding rows
    zero) and ``move.psum`` sums over the devices.

    Every quantity a move needs is a per-row sum over the ratings of the other factor's
    rows: with ``F0 = other`` at entry, the two sparse products of :func:`row_sums` (as in
    a half sweep) give ``G0_i = sum_j F0_j F0_j^T`` and ``Y_i = sum_j (Y_ij - b_i - c_j)
    F0_j``.  The moves only rescale and reflect the columns of ``other``, so it stays ``F0
    T`` for a (C, K, K) matrix ``T`` tracked alongside; then for column ``h`` (``t = T e_h``)
    ``A_i = sum_j f_jh^2 = t^T G0_i t`` and the residual sum without column ``h`` is
    ``B_i = t^T Y_i - (G0_i t)^T (T x_i) + a_i A_i`` (``x_i`` the row of ``own``): O(m K^2)
    per column, with no pass over the ratings.  ``draws``: :func:`_move_draws`."""
    sums = side_sums(side, move.use_bias)
    return _moves_from_sums(side, sums.G, sums.r, sums.sumO, sums.sumBO, gamma, tb, draws, move)


def _moves_from_sums(
    side: Side, G0, Y, sumO, sumBO, gamma, tb, draws: dict, move: ColumnMove, Gp=None
):
    """:func:`_column_side` from the per-row sums of :func:`row_sums` (``G0`` unpacked);
    given the packed ``Gp`` (the fused moves), the plain moves by :func:`_plain_fused`
    (``T`` as its diagonal)."""
    own, other, bias_own = side.own, side.other, side.bias_own
    if move.use_bias:  # the residual of the biases too, as in half_sweep
        Y = Y - bias_own[..., None] * sumO - sumBO
    S0 = jnp.einsum("cjk,cjl->ckl", other, other)
    if "xi" in draws:  # the reflected flip (see _reflected_flip): T mixes the slab's columns
        return _reflected_side(own, gamma, (G0, Y, S0), tb, draws, move)
    if Gp is not None:
        return _plain_fused(own, gamma, (Gp, Y, S0), tb, draws, move)
    return _plain_side(own, gamma, (G0, Y, S0), tb, draws, move)


def _reflected_side(own, gamma, sums0, tb, draws: dict, move: ColumnMove):
    """The reflected flips of every column in turn (:func:`_reflected_flip`), from the
    per-row sums ``sums0 = (G0, Y, S0)`` of :func:`_column_side`."""
    C, _, K = own.shape
    G0, Y, S0 = sums0
    sums = functools.partial(_column_sums, G0, Y, S0)

    def body(h, carry):
        d = FlipDraws(
            draws["z"][:, h],
            draws["z2"][:, h],
            draws["xi"][:, h],
            draws["zq"][:, h],
            draws["log_u"][:, h],
        )
        return _reflected_flip(h, carry, sums, S0, move, tb, d)

    T0 = jnp.broadcast_to(jnp.eye(K, dtype=own.dtype), (C, K, K))
    return lax.fori_loop(0, K, body, (own, T0, gamma))


def _plain_side(own, gamma, sums0, tb, draws: dict, move: ColumnMove):
    """The plain moves of every column in turn, from the per-row sums ``sums0 = (G0, Y,
    S0)`` of :func:`_column_side`."""
    # the plain move only rescales column h at step h: T stays diagonal (its diagonal
    # ``tdiag`` tracked) and T e_h = e_h when column h is visited, so the sums of
    # _column_sums are slices of G0, Y, S0 (O(m K) per column instead of O(m K^2); the
    # same numbers: the dropped terms are exact zeros)
    C, _, K = own.shape
    G0, Y, S0 = sums0
    z, zq, log_u = draws["z"], draws["zq"], draws["log_u"]
    prior, d, m_other, psum = move.prior, move.d, move.m_other, move.psum

    def body(h, carry):
        own, tdiag, gamma = carry
        g = gamma[:, h]
        A, B, ff = _column_sums_diagonal(G0, Y, S0, own, tdiag, h)
        g2, log_s, log_r = prior.column_proposal(g, zq[:, h], d)
        log_alpha = log_r + _flip_log_ratio(g, g2, log_s, A, B, ff, tb, m_other, psum)
        accept = log_u[:, h] < log_alpha
        g_new = jnp.where(accept, g2, g)
        s_eff = jnp.where(accept, jnp.exp(log_s), jnp.ones_like(g))
        a_new = _integrated_draw(g_new, s_eff, A, B, tb, z[:, h])
        return own.at[:, :, h].set(a_new), tdiag.at[:, h].multiply(s_eff), gamma.at[:, h].set(g_new)

    own, tdiag, gamma = lax.fori_loop(0, K, body, (own, jnp.ones((C, K), own.dtype), gamma))
    return own, jax.vmap(jnp.diag)(tdiag), gamma


def _column_sums_diagonal(G0, Y, S0, own, tdiag, h):
    """:func:`_column_sums` for a diagonal ``T = diag(tdiag)`` whose column ``h`` is still
    ``e_h`` (the plain move): ``t = e_h``, so ``G0_i t``, ``t^T G0_i t``, ``t^T Y_i`` and
    ``t^T S0 t`` are entries of ``G0``, ``Y``, ``S0``, and ``T x_i = tdiag * x_i``."""
    gt = G0[:, :, :, h]
    A = gt[:, :, h]
    # an einsum, not jnp.sum(gt * x, -1): XLA on CPU reduces a fused product over a short
    # minor axis slowly for one chain, while the einsum is a dot
    # (benchmarks/bench_column_moves.py --chains 1)
    B = Y[:, :, h] - jnp.einsum("cmk,cmk->cm", gt, tdiag[:, None, :] * own) + own[:, :, h] * A
    return A, B, S0[:, h, h]


def _column_sums(G0, Y, S0, own, T, h):
    """``A_i``, ``B_i`` (C, m) of column ``h`` and ``sum_j f_jh^2`` (C,) for the state
    ``(own, F0 T)`` (see :func:`_column_side`)."""
    t = T[:, :, h]
    gt = jnp.einsum("cmkl,cl->cmk", G0, t)
    A = jnp.einsum("cmk,ck->cm", gt, t)
    fitted = jnp.einsum("ckl,cml->cmk", T, own)  # T x_i: row i's fit in F0's coordinates
    B = (
        jnp.einsum("cmk,ck->cm", Y, t) - jnp.einsum("cmk,cmk->cm", gt, fitted) + own[:, :, h] * A
    )  # einsum: see _column_sums_diagonal
    return A, B, jnp.einsum("ck,ckl,cl->c", t, S0, t)


def _flip_log_ratio(g, g2, log_s, A, B, ff, tb, m_other: int, psum=lambda x: x):
    """Log target ratio of ``(gamma_h, f) -> (g2, s f)`` with the own column integrated
    out: the prior of the rescaled column and the Jacobian ``m_other log s`` (they cancel for
    ``s = sqrt(g2/g)``; kept general for proposals that rescale otherwise) and the marginal
    likelihoods (summed over this device's rows, then ``psum``)."""
    s = jnp.exp(log_s)
    log_f = _flip_log_prior(g, g2, log_s, ff, m_other)
    return log_f + psum(
        column_log_marginal(g2, (s * s)[:, None] * A, s[:, None] * B, tb)
        - column_log_marginal(g, A, B, tb)
    )


def _flip_log_prior(g, g2, log_s, ff, m_other: int):
    """The part of :func:`_flip_log_ratio` free of the own column: the rescaled column's
    prior (``ff = sum_j f_j^2``) and the Jacobian; elementwise in ``g, g2, log_s, ff``."""
    s = jnp.exp(log_s)
    return (
        -0.5 * m_other * (jnp.log(g2) - jnp.log(g))
        - 0.5 * ff * (s * s / g2 - 1.0 / g)
        + _log_jacobian(m_other, log_s)
    )


def _plain_fused(own, gamma, sums0, tb, draws: dict, move: ColumnMove):
    """:func:`_plain_side`'s moves with the same random numbers (other rounding), arranged
    for the fused moves, whose loop over the columns dominates their cost on a small
    problem: a column's proposal, the prior of its rescaled column and its ``A_i`` do not
    depend on the earlier columns' moves (``gamma_h`` and column ``h`` of the other factor
    change only at step ``h``), so they are computed for all columns at once; the loop
    carries the residual sums ``R_i = Y_i - G0_i (t * x_i)`` (``B_i = R_ih + A_i x_ih``
    at step ``h``) and updates them with column ``h`` of ``G0_i`` read from the packed
    triangle (``sums0 = (Gp, Y, S0)``): elementwise passes only, where the reductions over
    the short last axis that :func:`_column_sums_diagonal` needs run slowly on CPU.
    Returns the new ``own``, the diagonal (C, K) of ``T`` and ``gamma``."""
    Gp, Y, S0 = sums0
    C, _, K = own.shape
    pos = packed_position(K)  # column h of G0_i = Gp[..., pos[h]] (symmetric)
    prior, m_other, psum = move.prior, move.m_other, move.psum
    g2, log_s, log_r = prior.column_proposal(gamma, draws["zq"], move.d)
    base = log_r + _flip_log_prior(gamma, g2, log_s, jnp.diagonal(S0, axis1=1, axis2=2), m_other)
    s = jnp.exp(log_s)
    A_all = jnp.take(Gp, np.diagonal(pos), axis=-1)
    R = Y - sum(jnp.take(Gp, pos[h], axis=-1) * own[:, :, h, None] for h in range(K))
    z, log_u = draws["z"], draws["log_u"]
    pos_dev = jnp.asarray(pos, jnp.int32)

    def body(h, carry):
        own, R, tdiag, new_gamma = carry
        A, x, sh = A_all[:, :, h], own[:, :, h], s[:, h]
        B = R[:, :, h] + A * x
        log_m = jnp.sum(
            _log_marginal_terms(g2[:, h], (sh * sh)[:, None] * A, sh[:, None] * B, tb)
            - _log_marginal_terms(gamma[:, h], A, B, tb),
            axis=-1,
        )
        accept = log_u[:, h] < base[:, h] + psum(log_m)
        s_eff = jnp.where(accept, sh, jnp.ones_like(sh))
        g_new = jnp.where(accept, g2[:, h], gamma[:, h])
        x_new = _integrated_draw(g_new, s_eff, A, B, tb, z[:, h])
        # column h of the other factor times s_eff, x_ih -> x_new: R_i -= G0_i e_h (change)
        R = R - jnp.take(Gp, pos_dev[h], axis=-1) * (s_eff[:, None] * x_new - x)[:, :, None]
        return (
            own.at[:, :, h].set(x_new),
            R,
            tdiag.at[:, h].set(s_eff),
            new_gamma.at[:, h].set(g_new),
        )

    init = (own, R, jnp.ones((C, K), own.dtype), gamma)
    own, _, tdiag, gamma = lax.fori_loop(0, K, body, init)
    return own, tdiag, gamma


def _integrated_draw(g, s, A, B, tb, z):
    """The own column's exact draw given ``gamma_h = g`` and the other column rescaled by
    ``s``: ``N(tb s B / p, 1/p)``, ``p = 1/g + tb s^2 A``, per row."""
    p = 1.0 / g[:, None] + tb[:, None] * (s * s)[:, None] * A
    return tb[:, None] * s[:, None] * B / p + z * lax.rsqrt(p)


#: concentration of the angular central Gaussian that aims the reflected flip at the
#: slab's least-energy direction (Sigma = I + lambda v v^T).  Any value keeps the posterior;
#: it sets how well a switch-off hits the column to remove (angular spread ~ lambda^-1/2:
#: a stray 10% of a strong column costs far more likelihood than the flip can gain);
#: ``benchmarks/bench_rank_mixing.py`` compares values on the rank-3 simulation.
_ACG_LAMBDA = 1000.0


def _block_direction(gram, block):
    """Unit direction (C, K) of least energy ``x^T gram x`` (``gram = own^T own + other^T
    other``, (C, K, K)) within the columns of ``block`` (C, K) bool (zero outside it)."""
    big = jnp.trace(gram, axis1=-2, axis2=-1) + 1.0  # above every eigenvalue of the block
    inside = block[:, :, None] & block[:, None, :]
    G = jnp.where(inside, gram, 0.0) + jax.vmap(jnp.diag)(jnp.where(block, 0.0, big[:, None]))
    v = jnp.where(
        block, jnp.linalg.eigh(G)[1][:, :, 0], 0.0
    )  # exactly zero outside (eigh leaves ~eps there)
    return v / jnp.linalg.norm(v, axis=-1, keepdims=True)


def _acg_log_density(w, v, k):
    """Log density, relative to the uniform law on the unit sphere of the block (dimension
    ``k``), of the angular central Gaussian with ``Sigma = I + lambda v v^T`` at ``w``:
    ``-log(1 + lambda)/2 - (k/2) log(1 - lambda/(1 + lambda) (v.w)^2)``."""
    lam = _ACG_LAMBDA
    c = jnp.sum(v * w, axis=-1)
    return -0.5 * math.log1p(lam) - 0.5 * k * jnp.log1p(-(lam / (1.0 + lam)) * c * c)


def _householder(h: int, w, K: int):
    """(C, K, K) reflections swapping ``e_h`` and the unit vectors ``w`` (C, K) (identity
    where they coincide to within sqrt(eps): there ``u = e_h - w`` is rounding noise, and
    a reflection along it would mix columns at random)."""
    u = jax.nn.one_hot(h, K, dtype=w.dtype)[None] - w
    nu = jnp.sum(u * u, axis=-1)
    ok = nu > jnp.finfo(w.dtype).eps
    safe = jnp.where(ok, nu, 1.0)
    H = jnp.eye(K, dtype=w.dtype)[None] - 2.0 * u[:, :, None] * u[:, None, :] / safe[:, None, None]
    return jnp.where(ok[:, None, None], H, jnp.eye(K, dtype=w.dtype)[None])


def _reflected_flip(h, carry, sums, S0, move: ColumnMove, tb, draws: FlipDraws):
    """The spike/slab flip of column ``h`` aimed by a reflection of the slab (a move of
    :func:`column_moves` for priors with a :meth:`~bmczoo.priors.Prior.column_block`).

    Within the slab the posterior is invariant under rotations and reflections of the
    columns (equal scales; ``theta = M N^T`` unchanged), so the signal spreads over all slab
    columns and a plain flip is only accepted when column ``h`` happens to carry none.
    Switching off (``h`` in the slab): draw ``w`` from an angular central Gaussian aimed at
    the slab's least-energy direction ``v(x)`` (:func:`_block_direction`), reflect the slab
    by the Householder map ``H_w`` (``e_h <-> w``), then flip ``h`` on the reflected state as
    the plain move does (own column integrated out, the other rescaled).  Switching on (``h``
    in the spike): draw ``w`` uniformly on the sphere of the slab plus ``h``, flip, draw the
    own column from its conditional, then reflect.  The two are each other's reverse, with
    the proposal ratio ``q_on(w) / q_off(w | x)`` (uniform over the angular central
    Gaussian, the latter at the slab state: before the switch-off, after the switch-on) in
    the acceptance; the reflections have unit Jacobian and leave the joint unchanged.  On
    rejection the state is kept; a rejected switch-on then redraws the own column from its
    conditional (a Gibbs step, fresh normals ``z2``; not after a rejected switch-off, whose
    acceptance depends on that column)."""
    own, T, gamma = carry
    K = own.shape[-1]
    dt = own.dtype
    prior, psum = move.prior, move.psum
    slab = prior.column_block(gamma)
    block = slab | (jnp.arange(K) == h)[None]
    k = jnp.sum(block, axis=-1).astype(dt)
    off = slab[:, h]
    gram = functools.partial(_gram, S0, psum)
    xi = jnp.where(block, draws.xi, 0.0)
    v = _block_direction(gram(own, T), block)
    w, H = _aim(h, v, xi, block, off)
    own_r, T_r = (
        jnp.einsum("cmk,ckl->cml", own, H),
        jnp.einsum("cjk,ckl->cjl", T, H),
    )  # theta unchanged
    own_b = jnp.where(off[:, None, None], own_r, own)
    T_b = jnp.where(off[:, None, None], T_r, T)
    g = gamma[:, h]
    A, B, ff = sums(own_b, T_b, h)
    g2, log_s, log_r = prior.column_proposal(g, draws.zq, move.d)
    log_alpha = log_r + _flip_log_ratio(g, g2, log_s, A, B, ff, tb, move.m_other, psum)
    s = jnp.exp(log_s)
    own_p = own_b.at[:, :, h].set(_integrated_draw(g2, s, A, B, tb, draws.z))
    T_p = T_b.at[:, :, h].multiply(s[:, None])
    own_p = jnp.where(
        off[:, None, None], own_p, jnp.einsum("cmk,ckl->cml", own_p, H)
    )  # switching on: reflect last
    T_p = jnp.where(off[:, None, None], T_p, jnp.einsum("cjk,ckl->cjl", T_p, H))
    log_q = jnp.where(
        off,
        -_acg_log_density(w, v, k),
        _acg_log_density(w, _block_direction(gram(own_p, T_p), block), k),
    )
    accept = draws.log_u < log_alpha + log_q
    # rejected: the current state.  Switching on, whose acceptance does not depend on the
    # current own column h, then redraws it from its conditional (a Gibbs step; its sums are
    # A, B: nothing was reflected); switching off must not: its acceptance depends on that
    # column through v(x), so a redraw only after a rejection would not keep the posterior
    own_keep = jnp.where(
        off[:, None, None],
        own,
        own.at[:, :, h].set(_integrated_draw(g, jnp.ones_like(g), A, B, tb, draws.z2)),
    )
    acc = accept[:, None, None]
    return (
        jnp.where(acc, own_p, own_keep),
        jnp.where(acc, T_p, T),
        gamma.at[:, h].set(jnp.where(accept, g2, g)),
    )


def _gram(S0, psum, own_x, T_x):
    """``own^T own + other^T other`` (C, K, K), ``other = F0 T`` (``S0 = F0^T F0``)."""
    return psum(jnp.einsum("cmk,cml->ckl", own_x, own_x)) + jnp.einsum(
        "cjk,cjl,clm->ckm", T_x, S0, T_x
    )


def _aim(h: int, v, xi, block, off):
    """The reflected flip's unit direction ``w`` (C, K) within ``block`` and the
    Householder map ``H_w`` (``e_h <-> w``): from the angular central Gaussian aimed at
    ``v`` when switching off (``off``), else uniform (``xi`` the normals, zero outside)."""
    aimed = xi + (math.sqrt(1.0 + _ACG_LAMBDA) - 1.0) * jnp.sum(v * xi, axis=-1, keepdims=True) * v
    w = jnp.where(off[:, None], aimed, xi)
    # exactly inside the block: a reflection must not touch the other columns (their scales differ)
    w = jnp.where(block, w, 0.0)
    w = w / jnp.linalg.norm(w, axis=-1, keepdims=True)
    return w, _householder(h, w, w.shape[-1])
